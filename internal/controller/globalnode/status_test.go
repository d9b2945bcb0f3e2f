package globalnode

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
)

func globalNode(state nestv1.NodeState, holder string, phase nestv1.NodePhase) *nestv1.GlobalNode {
	return &nestv1.GlobalNode{
		ObjectMeta: metav1.ObjectMeta{Name: "worker-1", Generation: 4},
		Spec:       nestv1.GlobalNodeSpec{NodeIP: "198.51.100.11", State: state},
		Status:     nestv1.GlobalNodeStatus{VirtualCluster: holder, Phase: phase},
	}
}

func TestHostNodeCondition(t *testing.T) {
	tests := []struct {
		name    string
		gn      *nestv1.GlobalNode
		present bool
		status  metav1.ConditionStatus
		reason  string
		// message holds a part of the wanted message.
		message string
	}{
		{"free, Node present", globalNode(nestv1.NodeStateFree, "", nestv1.NodePhaseHost), true, metav1.ConditionTrue, ReasonNodePresent, "has Node worker-1"},
		{"occupied, Node present", globalNode(nestv1.NodeStateOccupied, "vc-a/a", nestv1.NodePhaseLeaving), true, metav1.ConditionTrue, ReasonNodePresent, "has Node worker-1"},
		{"occupied, Node away", globalNode(nestv1.NodeStateOccupied, "vc-a/a", nestv1.NodePhaseTenant), false, metav1.ConditionFalse, ReasonNodeAbsent, "VirtualCluster vc-a/a holds it"},
		{"reserved without a holder yet", globalNode(nestv1.NodeStateReserved, "", nestv1.NodePhaseJoining), false, metav1.ConditionFalse, ReasonNodeAbsent, "is reserved"},
		{"free, returning", globalNode(nestv1.NodeStateFree, "", nestv1.NodePhaseReturning), false, metav1.ConditionFalse, ReasonNodeAbsent, "phase is Returning"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := hostNodeCondition(tt.gn, tt.present)
			if c.Type != nestv1.ConditionHostNodePresent || c.Status != tt.status || c.Reason != tt.reason || c.ObservedGeneration != 4 {
				t.Errorf("condition = %+v, want %s/%s at generation 4", c, tt.status, tt.reason)
			}
			if !strings.Contains(c.Message, tt.message) {
				t.Errorf("message %q does not say %q", c.Message, tt.message)
			}
		})
	}
}

func TestSetStatusOfAFreeGlobalNode(t *testing.T) {
	created := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	gn := globalNode(nestv1.NodeStateFree, "", "")
	setStatus(gn, true, created)
	if gn.Status.Phase != nestv1.NodePhaseHost || gn.Status.PhaseTransitionTime == nil || !gn.Status.PhaseTransitionTime.Equal(&created) {
		t.Errorf("a new GlobalNode: phase %q since %v, want Host since %v", gn.Status.Phase, gn.Status.PhaseTransitionTime, created)
	}
	if gn.Status.ObservedGeneration != 4 || !meta.IsStatusConditionTrue(gn.Status.Conditions, nestv1.ConditionHostNodePresent) {
		t.Errorf("status = %+v, want generation 4 observed and HostNodePresent True", gn.Status)
	}

	later := metav1.NewTime(created.Add(time.Hour))
	gn.Generation = 5
	setStatus(gn, true, later)
	if !gn.Status.PhaseTransitionTime.Equal(&created) {
		t.Errorf("phaseTransitionTime moved to %v although the phase stayed Host", gn.Status.PhaseTransitionTime)
	}
	if c := meta.FindStatusCondition(gn.Status.Conditions, nestv1.ConditionHostNodePresent); !c.LastTransitionTime.Equal(&created) || gn.Status.ObservedGeneration != 5 {
		t.Errorf("condition %+v, observedGeneration %d: want the first transition time kept and generation 5", c, gn.Status.ObservedGeneration)
	}
}

func TestSetStatusOfAHeldGlobalNodeOnlyNotesItsNode(t *testing.T) {
	since := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	gn := globalNode(nestv1.NodeStateOccupied, "vc-a/a", nestv1.NodePhaseTenant)
	gn.Status.PhaseTransitionTime = &since
	gn.Status.ObservedGeneration = 3
	gn.Status.Conditions = []metav1.Condition{{Type: "Joined", Status: metav1.ConditionTrue, Reason: "Joined", Message: "joined", LastTransitionTime: since}}
	before := gn.DeepCopy()

	setStatus(gn, false, metav1.NewTime(since.Add(time.Hour)))
	c := meta.FindStatusCondition(gn.Status.Conditions, nestv1.ConditionHostNodePresent)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != ReasonNodeAbsent {
		t.Fatalf("HostNodePresent = %+v, want False/%s", c, ReasonNodeAbsent)
	}
	meta.RemoveStatusCondition(&gn.Status.Conditions, nestv1.ConditionHostNodePresent)
	if !equality.Semantic.DeepEqual(before, gn) {
		t.Errorf("setStatus changed more than HostNodePresent:\nbefore %+v\nafter  %+v", before.Status, gn.Status)
	}
}
