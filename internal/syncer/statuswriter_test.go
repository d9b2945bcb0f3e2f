package syncer

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// A tenant controller's change to a readiness gate's condition survives a
// status the provider worked out from an informer that had not seen it:
// virtual-kubelet writes that status, and the gate's condition and Ready
// are the API server's, not the lagging copy's. Both ways: False over a
// stale True, True over a stale False.
func TestStatusWriteKeepsTheTenantsLatestGateCondition(t *testing.T) {
	const gate = corev1.PodConditionType("k8s.io/test-condition1")
	host := &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{
		{Type: corev1.PodReady, Status: corev1.ConditionTrue}, {Type: corev1.ContainersReady, Status: corev1.ConditionTrue},
	}}}
	for _, tc := range []struct {
		name       string
		stale, now corev1.ConditionStatus
		wantReady  corev1.ConditionStatus
		wantReason string
	}{
		{"set-false", corev1.ConditionTrue, corev1.ConditionFalse, corev1.ConditionFalse, readinessGatesNotReady},
		{"set-true", corev1.ConditionFalse, corev1.ConditionTrue, corev1.ConditionTrue, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := func(s corev1.ConditionStatus) *corev1.Pod {
				return &corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "gated", UID: "u1", ResourceVersion: "5"},
					Spec:       corev1.PodSpec{ReadinessGates: []corev1.PodReadinessGate{{ConditionType: gate}}},
					Status:     corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: gate, Status: s}}},
				}
			}
			api := fake.NewClientset(pod(tc.now))
			lagging := pod(tc.stale)
			view := lagging.DeepCopy()
			view.Status = TenantStatus(lagging, host)

			if _, err := (gatedStatusPods{api.CoreV1()}).Pods("default").UpdateStatus(context.Background(), view, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			got, err := api.CoreV1().Pods("default").Get(context.Background(), "gated", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			conds := map[corev1.PodConditionType]corev1.PodCondition{}
			for _, c := range got.Status.Conditions {
				if _, dup := conds[c.Type]; dup {
					t.Errorf("condition %s twice", c.Type)
				}
				conds[c.Type] = c
			}
			if c := conds[gate]; c.Status != tc.now {
				t.Errorf("gate condition %q, want the tenant's latest %q", c.Status, tc.now)
			}
			if c := conds[corev1.PodReady]; c.Status != tc.wantReady || c.Reason != tc.wantReason {
				t.Errorf("Ready %q (%q), want %q (%q)", c.Status, c.Reason, tc.wantReady, tc.wantReason)
			}
			if c := conds[corev1.ContainersReady]; c.Status != corev1.ConditionTrue {
				t.Errorf("ContainersReady %q, want the host's True", c.Status)
			}
		})
	}
}

// A status worked out for a pod that has since been replaced under its
// name is not written onto the new one.
func TestStatusWriteSparesAPodReplacedUnderItsName(t *testing.T) {
	gates := []corev1.PodReadinessGate{{ConditionType: "example.com/gate"}}
	api := fake.NewClientset(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "p", UID: "new"}, Spec: corev1.PodSpec{ReadinessGates: gates}})
	old := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "p", UID: types.UID("old")}, Spec: corev1.PodSpec{ReadinessGates: gates},
		Status: corev1.PodStatus{Phase: corev1.PodFailed}}
	_, err := (gatedStatusPods{api.CoreV1()}).Pods("default").UpdateStatus(context.Background(), old, metav1.UpdateOptions{})
	if !apierrors.IsNotFound(err) {
		t.Fatalf("err = %v, want NotFound", err)
	}
	if got, _ := api.CoreV1().Pods("default").Get(context.Background(), "p", metav1.GetOptions{}); got.Status.Phase != "" {
		t.Errorf("the new pod's phase is %q: the old pod's status was written over it", got.Status.Phase)
	}
}

// Ready turned True by a gate's condition dates from that condition's
// change, not the host's older Ready: a Deployment's minReadySeconds counts
// from it.
func TestGateReadyDatesFromTheGatesChange(t *testing.T) {
	hostReady, gateSet := metav1.Unix(1000, 0), metav1.Unix(2000, 0)
	tenant := &corev1.Pod{
		Spec:   corev1.PodSpec{ReadinessGates: []corev1.PodReadinessGate{{ConditionType: "example.com/gate"}}},
		Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: "example.com/gate", Status: corev1.ConditionTrue, LastTransitionTime: gateSet}}},
	}
	conds := []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: readinessGatesNotReady, LastTransitionTime: hostReady}}
	got := withCurrentGates(conds, tenant)
	for _, c := range got {
		if c.Type == corev1.PodReady && (c.Status != corev1.ConditionTrue || !c.LastTransitionTime.Equal(&gateSet)) {
			t.Errorf("Ready %s since %v, want True since the gate's %v", c.Status, c.LastTransitionTime, gateSet)
		}
	}
}

// A status virtual-kubelet writes unconditionally (no resource version)
// stays unconditional.
func TestStatusWriteKeepsAnUnconditionalWriteSo(t *testing.T) {
	gates := []corev1.PodReadinessGate{{ConditionType: "example.com/gate"}}
	api := fake.NewClientset(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "p", UID: "u", ResourceVersion: "7"}, Spec: corev1.PodSpec{ReadinessGates: gates}})
	var sent string
	api.PrependReactor("update", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		sent = a.(k8stesting.UpdateAction).GetObject().(*corev1.Pod).ResourceVersion
		return false, nil, nil
	})
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "p", UID: "u"}, Spec: corev1.PodSpec{ReadinessGates: gates}, Status: corev1.PodStatus{Phase: corev1.PodFailed}}
	if _, err := (gatedStatusPods{api.CoreV1()}).Pods("default").UpdateStatus(context.Background(), pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if sent != "" {
		t.Errorf("written at resource version %q, want none (unconditional)", sent)
	}
}
