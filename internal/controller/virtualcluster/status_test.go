package virtualcluster

import (
	"errors"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
)

func TestPhaseAndConditions(t *testing.T) {
	all := observed{certificates: true, hostObjects: true, endpoint: "https://x:1", kubeconfig: true, available: true, nodesReady: true}
	tests := []struct {
		name      string
		obs       observed
		previous  nestv1.Phase
		phase     nestv1.Phase
		ready     bool
		available bool
		reason    string
	}{
		{"nothing yet", observed{}, "", nestv1.PhasePreparing, false, false, ReasonNotReady},
		{"certificates only", observed{certificates: true}, nestv1.PhasePreparing, nestv1.PhasePreparing, false, false, ReasonNotReady},
		{"waiting for load balancer", observed{certificates: true, hostObjects: true}, nestv1.PhasePreparing, nestv1.PhasePending, false, false, ReasonWaitingForEndpoint},
		{"starting", observed{certificates: true, hostObjects: true, endpoint: "https://x:1", kubeconfig: true}, nestv1.PhasePreparing, nestv1.PhaseInitialized, false, false, ReasonNotReady},
		{"available, add-ons missing", observed{certificates: true, hostObjects: true, endpoint: "https://x:1", kubeconfig: true, available: true}, nestv1.PhaseInitialized, nestv1.PhaseInitialized, false, true, ReasonNotReady},
		{"ready", all, nestv1.PhaseInitialized, nestv1.PhaseCompleted, true, true, ReasonReady},
		{"namespace held by another", observed{namespaceHolder: "first"}, nestv1.PhaseCompleted, nestv1.PhasePending, false, false, ReasonNamespaceInUse},
		{"was ready, restarting", observed{certificates: true, hostObjects: true, endpoint: "https://x:1", kubeconfig: true}, nestv1.PhaseCompleted, nestv1.PhaseUpdating, false, false, ReasonNotReady},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := phaseFor(tt.obs, tt.previous); got != tt.phase {
				t.Errorf("phase = %s, want %s", got, tt.phase)
			}
			conds := conditionsFor(tt.obs, 3, "alpha", "team")
			ready := meta.FindStatusCondition(conds, nestv1.ConditionReady)
			if ready == nil || meta.IsStatusConditionTrue(conds, nestv1.ConditionReady) != tt.ready || ready.Reason != tt.reason {
				t.Errorf("Ready = %+v, want ready=%v reason=%s", ready, tt.ready, tt.reason)
			}
			if meta.IsStatusConditionTrue(conds, nestv1.ConditionControlPlaneAvailable) != tt.available {
				t.Errorf("ControlPlaneAvailable = %v, want %v", !tt.available, tt.available)
			}
			for _, c := range conds {
				if c.ObservedGeneration != 3 || c.Message == "" {
					t.Errorf("condition %s lacks generation or message: %+v", c.Type, c)
				}
			}
		})
	}
}

func TestSetFailureKeepsStatusAndNotesTheError(t *testing.T) {
	since := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	conds := []metav1.Condition{{Type: nestv1.ConditionCertificatesReady, Status: metav1.ConditionTrue, Reason: ReasonIssued, Message: "issued", LastTransitionTime: since}}
	setFailure(&conds, nestv1.ConditionCertificatesReady, errors.New("timeout"), 3)
	setFailure(&conds, nestv1.ConditionCertificatesReady, errors.New("conflict"), 3)
	c := meta.FindStatusCondition(conds, nestv1.ConditionCertificatesReady)
	if c.Status != metav1.ConditionTrue || c.Reason != ReasonIssued || !c.LastTransitionTime.Equal(&since) {
		t.Errorf("a failure changed the condition: %+v", c)
	}
	if c.Message != "issued (last reconcile failed: conflict)" {
		t.Errorf("message = %q: want the base message and only the latest error", c.Message)
	}
	setFailure(&conds, "", errors.New("boom"), 3)
	if r := meta.FindStatusCondition(conds, nestv1.ConditionReady); r == nil || r.Status != metav1.ConditionFalse || r.Reason != ReasonReconcileError {
		t.Errorf("a failure before any observation: Ready = %+v, want False/%s", r, ReasonReconcileError)
	}
}
