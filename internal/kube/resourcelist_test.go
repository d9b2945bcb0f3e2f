package kube

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func TestFormatResourceList(t *testing.T) {
	list := func(pairs ...string) corev1.ResourceList {
		l := corev1.ResourceList{}
		for i := 0; i < len(pairs); i += 2 {
			l[corev1.ResourceName(pairs[i])] = resource.MustParse(pairs[i+1])
		}
		return l
	}
	for _, tt := range []struct {
		name       string
		l          corev1.ResourceList
		text, flag string
	}{
		{"nil", nil, "nothing", ""},
		{"empty", corev1.ResourceList{}, "nothing", ""},
		{"one", list("cpu", "2"), "cpu 2", "cpu=2"},
		{"sorted by name", list("pods", "110", "nvidia.com/gpu", "1", "memory", "4Gi", "cpu", "500m"),
			"cpu 500m, memory 4Gi, nvidia.com/gpu 1, pods 110", "cpu=500m,memory=4Gi,nvidia.com/gpu=1,pods=110"},
		{"zero is 0", list("cpu", "0", "memory", "0Gi"), "cpu 0, memory 0", "cpu=0,memory=0"},
		{"quantities in canonical form", list("memory", "1024Mi", "cpu", "1000m"), "cpu 1, memory 1Gi", "cpu=1,memory=1Gi"},
		// The pairs sort as written: with " " that is by name, with "="
		// a name that begins another and goes on with a character before
		// "=" comes after it.
		{"a name that begins another", list("example.com/a", "1", "example.com/a-b", "2"),
			"example.com/a 1, example.com/a-b 2", "example.com/a-b=2,example.com/a=1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := FormatResourceList(tt.l, ResourceListText); got != tt.text {
				t.Errorf("text: %q, want %q", got, tt.text)
			}
			if got := FormatResourceList(tt.l, ResourceListFlag); got != tt.flag {
				t.Errorf("flag: %q, want %q", got, tt.flag)
			}
		})
	}
	custom := ResourceListStyle{Assign: ": ", Sep: "; ", Empty: "-"}
	if got := FormatResourceList(list("memory", "1Gi", "cpu", "2"), custom); got != "cpu: 2; memory: 1Gi" {
		t.Errorf("custom style: %q", got)
	}
	if got := FormatResourceList(nil, custom); got != "-" {
		t.Errorf("custom style, empty: %q", got)
	}
}
