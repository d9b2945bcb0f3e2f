package virtualcluster

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"
)

func TestQuotaSpecChanged(t *testing.T) {
	quota := &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: "q", Labels: map[string]string{"a": "b"}},
		Spec:       corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("10")}},
	}
	statusOnly := quota.DeepCopy()
	statusOnly.Status.Used = corev1.ResourceList{corev1.ResourcePods: resource.MustParse("3")}
	statusOnly.ResourceVersion = "2"
	spec := quota.DeepCopy()
	spec.Spec.Hard[corev1.ResourcePods] = resource.MustParse("20")
	relabelled := quota.DeepCopy()
	relabelled.Labels = nil

	tests := []struct {
		name  string
		after *corev1.ResourceQuota
		want  bool
	}{
		{"status.used rewritten by the quota controller", statusOnly, false},
		{"hard limits edited", spec, true},
		{"labels removed", relabelled, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := quotaSpecChanged.Update(event.UpdateEvent{ObjectOld: quota, ObjectNew: tt.after}); got != tt.want {
				t.Errorf("Update = %v, want %v", got, tt.want)
			}
		})
	}
	if !quotaSpecChanged.Delete(event.DeleteEvent{Object: quota}) {
		t.Error("a deleted quota must be reconciled, to recreate it")
	}
}
