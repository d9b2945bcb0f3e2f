package membergrant

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/kube"
)

func TestSelected(t *testing.T) {
	vc := vcOf("vc-a", "ml", "u")
	vc.Labels = map[string]string{"team": "ml"}
	for _, tt := range []struct {
		name     string
		selector *metav1.LabelSelector
		want     string // a word of the message; empty: selected
	}{
		{"unset admits none", nil, "has no spec.virtualClusterSelector"},
		{"empty admits all", &metav1.LabelSelector{}, ""},
		{"matching", &metav1.LabelSelector{MatchLabels: map[string]string{"team": "ml"}}, ""},
		{"not matching", &metav1.LabelSelector{MatchLabels: map[string]string{"team": "web"}}, "does not match the labels of VirtualCluster vc-a/ml"},
		{"invalid", &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "team", Operator: "Bogus"}}}, "not a valid selector"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			mc := &nestv1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: "gpu"}, Spec: nestv1.MemberClusterSpec{VirtualClusterSelector: tt.selector}}
			f := selected(mc, vc)
			switch {
			case tt.want == "" && f != nil:
				t.Errorf("not selected: %v", f)
			case tt.want != "" && (f == nil || f.reason != ReasonNotSelected || !strings.Contains(f.message, tt.want)):
				t.Errorf("got %v, want NotSelected saying %q", f, tt.want)
			}
		})
	}
}

func TestGrantStatus(t *testing.T) {
	ready := grantStatus("gpu", "nest-ml-x", res("nvidia.com/gpu", "1", "cpu", "2"), nil)
	if !ready.Ready || ready.Reason != "" || ready.Message != "set up in namespace nest-ml-x of the member; the member node offers cpu 2, nvidia.com/gpu 1" {
		t.Errorf("ready status %+v", ready)
	}
	failed := grantStatus("gpu", "", nil, memberNotFound("gpu"))
	if failed.Ready || failed.Reason != ReasonMemberNotFound || !strings.Contains(failed.Message, "MemberCluster gpu does not exist") {
		t.Errorf("failed status %+v", failed)
	}
}

func TestMembersPatchTouchesOnlyMembers(t *testing.T) {
	got, err := kube.StatusFieldPatch("members", sortedStatuses(map[string]nestv1.MemberGrantStatus{
		"b": {Name: "b", Ready: true}, "a": {Name: "a", Reason: ReasonNotSelected},
	}))
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"status":{"members":[{"name":"a","ready":false,"reason":"NotSelected"},{"name":"b","ready":true}]}}`; string(got) != want {
		t.Errorf("patch %s, want %s", got, want)
	}
	got, err = kube.StatusFieldPatch("members", sortedStatuses(nil))
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"status":{"members":null}}`; string(got) != want {
		t.Errorf("empty patch %s, want %s (null removes the field)", got, want)
	}
}

func TestSecretOwner(t *testing.T) {
	secret := func(name string, labels map[string]string) *metav1.PartialObjectMetadata {
		return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: "vc-a", Name: name, Labels: labels}}
	}
	ours := map[string]string{LabelManagedBy: ManagedByValue, "nest.dev/virtualcluster": "ml"}
	if got := secretOwner(context.Background(), secret("ml-members", ours)); len(got) != 1 || got[0].Name != "ml" || got[0].Namespace != "vc-a" {
		t.Errorf("members Secret maps to %v, want vc-a/ml", got)
	}
	if got := secretOwner(context.Background(), secret("ml-pki", ours)); len(got) != 0 {
		t.Errorf("another Secret maps to %v", got)
	}
	if got := secretOwner(context.Background(), secret("ml-members", map[string]string{"nest.dev/virtualcluster": "ml"})); len(got) != 0 {
		t.Errorf("a Secret not labelled managed-by nest-manager maps to %v", got)
	}
}

func TestMemberChanged(t *testing.T) {
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	// reachableMC is MemberCluster gpu at generation gen, as the probe-th
	// probe (30 seconds apart) found it.
	reachableMC := func(status metav1.ConditionStatus, cpu string, gen int64, probe int) *nestv1.MemberCluster {
		mc := &nestv1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: "gpu", Generation: gen}}
		mc.Status.Allocatable = res("cpu", cpu)
		mc.Status.Conditions = []metav1.Condition{{Type: nestv1.ConditionReachable, Status: status}}
		mc.Status.LastProbeTime = &metav1.Time{Time: start.Add(time.Duration(probe) * 30 * time.Second)}
		return mc
	}
	base := reachableMC(metav1.ConditionTrue, "4", 1, 0)
	for _, tt := range []struct {
		name string
		cur  *nestv1.MemberCluster
		want bool
	}{
		{"only the probe time", reachableMC(metav1.ConditionTrue, "4", 1, 1), false},
		{"spec", reachableMC(metav1.ConditionTrue, "4", 2, 0), true},
		{"allocatable", reachableMC(metav1.ConditionTrue, "8", 1, 0), true},
		{"reachability", reachableMC(metav1.ConditionFalse, "4", 1, 0), true},
		{"Ready nodes", func() *nestv1.MemberCluster {
			mc := reachableMC(metav1.ConditionTrue, "4", 1, 0)
			mc.Status.Nodes = 3
			return mc
		}(), true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := memberChanged.Update(event.UpdateEvent{ObjectOld: base, ObjectNew: tt.cur}); got != tt.want {
				t.Errorf("memberChanged = %v, want %v", got, tt.want)
			}
		})
	}
}
