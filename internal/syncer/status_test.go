package syncer

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The tenant sees its own generations observed: the host pod's count the
// host pod's changes.
func TestTenantStatusReportsTenantGenerations(t *testing.T) {
	tenant := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Generation: 3}, Status: corev1.PodStatus{QOSClass: corev1.PodQOSBurstable}}
	host := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Generation: 7}, Status: corev1.PodStatus{
		ObservedGeneration: 7, QOSClass: corev1.PodQOSBestEffort,
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, ObservedGeneration: 7}, {Type: corev1.ContainersReady, ObservedGeneration: 5}, {Type: corev1.PodInitialized}},
	}}
	s := TenantStatus(tenant, host)
	if s.ObservedGeneration != 3 || s.QOSClass != corev1.PodQOSBurstable {
		t.Errorf("observed generation %d, QoS %s; want 3 and the tenant's Burstable", s.ObservedGeneration, s.QOSClass)
	}
	for i, want := range []int64{3, 2, 0} {
		if got := s.Conditions[i].ObservedGeneration; got != want {
			t.Errorf("condition %s: observed generation %d, want %d", s.Conditions[i].Type, got, want)
		}
	}
}

// The tenant sees the resources its containers state, not the zero requests
// and LimitRange defaults the host pod carries.
func TestTenantStatusShowsOnlyStatedResources(t *testing.T) {
	rl := func(kv ...string) corev1.ResourceList {
		out := corev1.ResourceList{}
		for i := 0; i < len(kv); i += 2 {
			out[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
		}
		return out
	}
	tenant := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{
		{Name: "app", Resources: corev1.ResourceRequirements{Requests: rl("cpu", "200m", "memory", "64Mi"), Limits: rl("cpu", "200m", "memory", "64Mi")}},
		{Name: "bare"},
	}}}
	host := &corev1.Pod{Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{
		{Name: "app", AllocatedResources: rl("cpu", "200m", "memory", "64Mi", "ephemeral-storage", "64Mi"),
			Resources: &corev1.ResourceRequirements{Requests: rl("cpu", "200m", "memory", "64Mi", "ephemeral-storage", "64Mi"), Limits: rl("cpu", "200m", "memory", "64Mi", "ephemeral-storage", "1Gi")}},
		{Name: "bare", AllocatedResources: rl("cpu", "0", "memory", "0"),
			Resources: &corev1.ResourceRequirements{Requests: rl("cpu", "0", "memory", "0"), Limits: rl("cpu", "500m", "memory", "512Mi")}},
	}}}
	s := TenantStatus(tenant, host)
	app, bare := s.ContainerStatuses[0], s.ContainerStatuses[1]
	if len(app.Resources.Limits) != 2 || len(app.Resources.Requests) != 2 || len(app.AllocatedResources) != 2 {
		t.Errorf("app: %+v, allocated %v; want cpu and memory only", app.Resources, app.AllocatedResources)
	}
	if bare.Resources.Limits != nil || bare.Resources.Requests != nil || bare.AllocatedResources != nil {
		t.Errorf("bare: %+v, allocated %v; want none", bare.Resources, bare.AllocatedResources)
	}
	if _, ok := host.Status.ContainerStatuses[0].Resources.Limits["ephemeral-storage"]; !ok {
		t.Error("the host pod's own status was changed")
	}
}

// A tenant change the host pod does not mirror still changes the spec hash,
// so the pod controller updates the host pod and the tenant's status
// reports the new generation observed.
func TestSpecHashFollowsTheGeneration(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Generation: 1}}
	bumped := pod.DeepCopy()
	bumped.Generation = 2
	bumped.Spec.Tolerations = []corev1.Toleration{{Key: "k", Operator: corev1.TolerationOpExists}}
	if SpecHash(pod) == SpecHash(bumped) {
		t.Error("new tolerations and a new generation leave the spec hash alone")
	}
}

// Conditions only the tenant cluster sets survive a status from the host:
// DisruptionTarget from a preemption, a readiness gate's condition. The
// kubelet's, such as a finished resize's PodResizeInProgress, do not.
func TestTenantStatusKeepsTenantConditions(t *testing.T) {
	tenant := &corev1.Pod{
		Spec: corev1.PodSpec{ReadinessGates: []corev1.PodReadinessGate{{ConditionType: "example.com/gate"}}},
		Status: corev1.PodStatus{Conditions: []corev1.PodCondition{
			{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "PreemptionByScheduler"},
			{Type: "example.com/gate", Status: corev1.ConditionTrue},
			{Type: corev1.PodReady, Status: corev1.ConditionTrue},
			{Type: corev1.PodResizeInProgress, Status: corev1.ConditionTrue},
		}}}
	host := &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodSucceeded, Conditions: []corev1.PodCondition{
		{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "PodCompleted"},
	}}}
	got := map[corev1.PodConditionType]corev1.PodCondition{}
	for _, c := range TenantStatus(tenant, host).Conditions {
		if _, dup := got[c.Type]; dup {
			t.Errorf("condition %s twice", c.Type)
		}
		got[c.Type] = c
	}
	if c := got[corev1.DisruptionTarget]; c.Status != corev1.ConditionTrue || c.Reason != "PreemptionByScheduler" {
		t.Errorf("DisruptionTarget = %+v, want the tenant's", c)
	}
	if _, ok := got["example.com/gate"]; !ok {
		t.Error("the readiness gate's condition is lost")
	}
	if got[corev1.PodReady].Status != corev1.ConditionFalse {
		t.Error("Ready is the tenant's stale value, not the host kubelet's")
	}
	if _, ok := got[corev1.PodResizeInProgress]; ok {
		t.Error("a resize the host kubelet finished is still in progress")
	}
}

// A pod whose readiness gate's condition is not True is not Ready, whatever
// the host kubelet says of its containers; it is once the condition is.
func TestTenantStatusFollowsReadinessGates(t *testing.T) {
	gate := corev1.PodConditionType("example.com/lb-ready")
	tenant := &corev1.Pod{Spec: corev1.PodSpec{ReadinessGates: []corev1.PodReadinessGate{{ConditionType: gate}}}}
	host := &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{
		{Type: corev1.PodReady, Status: corev1.ConditionTrue}, {Type: corev1.ContainersReady, Status: corev1.ConditionTrue},
	}}}
	ready := func(s corev1.PodStatus) (corev1.ConditionStatus, corev1.ConditionStatus) {
		var r, c corev1.ConditionStatus
		for _, cond := range s.Conditions {
			switch cond.Type {
			case corev1.PodReady:
				r = cond.Status
			case corev1.ContainersReady:
				c = cond.Status
			}
		}
		return r, c
	}
	if r, c := ready(TenantStatus(tenant, host)); r != corev1.ConditionFalse || c != corev1.ConditionTrue {
		t.Errorf("without the gate's condition: Ready %s, ContainersReady %s; want False, True", r, c)
	}
	before := tenant.DeepCopy()
	tenant.Status.Conditions = []corev1.PodCondition{{Type: gate, Status: corev1.ConditionTrue}}
	if !readinessGatesChanged(before, tenant) {
		t.Error("the gate's new condition is not seen as a change")
	}
	if r, _ := ready(TenantStatus(tenant, host)); r != corev1.ConditionTrue {
		t.Errorf("with the gate True: Ready %s, want True", r)
	}
	if readinessGatesChanged(tenant, tenant.DeepCopy()) {
		t.Error("an unchanged pod is seen as a gate change")
	}
}

// PodScheduled is the tenant scheduler's: the host scheduler's condition
// (which names the host's nodes) never reaches the tenant pod.
func TestTenantStatusKeepsTheTenantsPodScheduled(t *testing.T) {
	tenant := &corev1.Pod{Status: corev1.PodStatus{Conditions: []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
	}}}
	host := &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable", Message: "0/2 nodes are available: 2 Insufficient cpu."},
	}}}
	var scheduled []corev1.PodCondition
	for _, c := range TenantStatus(tenant, host).Conditions {
		if c.Type == corev1.PodScheduled {
			scheduled = append(scheduled, c)
		}
	}
	if len(scheduled) != 1 || scheduled[0].Status != corev1.ConditionTrue || scheduled[0].Message != "" {
		t.Errorf("PodScheduled = %+v, want only the tenant's True", scheduled)
	}
}

func TestOnlyTheHostKubeletsEventsReachTheTenant(t *testing.T) {
	for _, c := range []struct {
		ev   corev1.Event
		want bool
	}{
		{corev1.Event{Source: corev1.EventSource{Component: "kubelet", Host: "nest-worker"}, Reason: "Pulled"}, true},
		{corev1.Event{ReportingController: "kubelet", Reason: "Unhealthy"}, true},
		{corev1.Event{ReportingController: "default-scheduler", Reason: "FailedScheduling"}, false},
		{corev1.Event{Source: corev1.EventSource{Component: "default-scheduler"}, Reason: "Scheduled"}, false},
		{corev1.Event{Source: corev1.EventSource{Component: "taint-eviction-controller"}, Reason: "TaintManagerEviction"}, false},
	} {
		if got := fromHostKubelet(&c.ev); got != c.want {
			t.Errorf("%s from %s%s: forwarded %v, want %v", c.ev.Reason, c.ev.Source.Component, c.ev.ReportingController, got, c.want)
		}
	}
}

// A pod bound by spec.nodeName has no PodScheduled of the tenant's; the
// kubelet reports it scheduled, and so does the virtual node.
func TestTenantStatusReportsANodeNamePodScheduled(t *testing.T) {
	host := &corev1.Pod{Status: corev1.PodStatus{Conditions: []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Message: "0/2 nodes are available"},
	}}}
	got := TenantStatus(&corev1.Pod{}, host).Conditions
	if len(got) != 1 || got[0].Type != corev1.PodScheduled || got[0].Status != corev1.ConditionTrue || got[0].Message != "" {
		t.Errorf("conditions %+v, want PodScheduled True", got)
	}
}
