package syncer

import (
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/nestdev/nest/internal/syncer/contract"
	"github.com/nestdev/nest/internal/syncer/tenantmsg"
)

// TenantStatus returns the tenant pod's status from its host pod's: phase,
// conditions, pod and host IPs, start time and container statuses flow up,
// image pull failures reduced to their kind (tenantWaiting).
// The QoS class stays the tenant's, which the tenant API server computed from
// the tenant's own spec. Observed generations are the tenant's (see
// tenantGeneration). The host kubelet's and runtime's messages name the
// host pod, its namespace and the host copies of what it mounts: the
// tenant reads them in its own names (tenantMessages).
func TenantStatus(tenant, host *corev1.Pod) corev1.PodStatus {
	s := *host.Status.DeepCopy()
	s.QOSClass = tenant.Status.QOSClass
	s.NominatedNodeName = ""
	s.ObservedGeneration = tenantGeneration(s.ObservedGeneration, tenant, host)
	s.InitContainerStatuses = withoutHelpers(s.InitContainerStatuses)
	for _, statuses := range [][]corev1.ContainerStatus{s.InitContainerStatuses, s.ContainerStatuses, s.EphemeralContainerStatuses} {
		for i := range statuses {
			statuses[i].State.Waiting = tenantWaiting(statuses[i].State.Waiting, statuses[i].Image)
		}
	}
	tenantResources(s.InitContainerStatuses, tenant.Spec.InitContainers)
	tenantResources(s.ContainerStatuses, tenant.Spec.Containers)
	for i := range s.Conditions {
		s.Conditions[i] = initializedWithoutHelpers(s.Conditions[i])
		s.Conditions[i].ObservedGeneration = tenantGeneration(s.Conditions[i].ObservedGeneration, tenant, host)
	}
	tenantMessages(&s, podScope(host.Labels[contract.LabelTenantOf], host.Namespace, tenant, host))
	s.Conditions = withTenantConditions(s.Conditions, tenant)
	return s
}

// tenantMessages rewrites the host's words in a status for the tenant
// (tenantmsg.Scope.Scrub): the pod's message, its conditions' and its
// containers' waiting and terminated messages, but for image pull
// failures, which tenantWaiting wrote. A terminated container's
// message may be its own termination log, whose addresses are the
// tenant's: only host names are rewritten there.
func tenantMessages(s *corev1.PodStatus, scope tenantmsg.Scope) {
	s.Message = scope.Scrub(s.Message)
	for i := range s.Conditions {
		s.Conditions[i].Message = scope.Scrub(s.Conditions[i].Message)
	}
	for _, statuses := range [][]corev1.ContainerStatus{s.InitContainerStatuses, s.ContainerStatuses, s.EphemeralContainerStatuses} {
		for i := range statuses {
			for _, state := range []*corev1.ContainerState{&statuses[i].State, &statuses[i].LastTerminationState} {
				// An image pull failure is its kind and the image already
				// (tenantWaiting): the image's registry is the tenant's.
				if w := state.Waiting; w != nil && w.Message != "" && !imagePullReasons[w.Reason] {
					w.Message = scope.Scrub(w.Message)
				}
				if t := state.Terminated; t != nil && t.Message != "" {
					t.Message = scope.ScrubNames(t.Message)
				}
			}
		}
	}
}

// withTenantConditions adds to the host's conditions those of the tenant
// pod that only the tenant cluster sets: PodScheduled, DisruptionTarget,
// from the tenant's scheduler (a preemption) or an eviction, and the
// conditions of the pod's readiness gates, which tenant controllers set. Any other condition is the
// host kubelet's to report, or to remove (PodResizeInProgress once a resize
// is done). The pod is Ready only when every readiness gate's condition is
// True too.
func withTenantConditions(conditions []corev1.PodCondition, tenant *corev1.Pod) []corev1.PodCondition {
	tenantOwned := map[corev1.PodConditionType]bool{corev1.DisruptionTarget: true, corev1.PodScheduled: true}
	for _, g := range tenant.Spec.ReadinessGates {
		tenantOwned[g.ConditionType] = true
	}
	// PodScheduled is the tenant's scheduler's: the host scheduler's says
	// where on the host the host pod went, or why it could not go (the
	// host's nodes), which is not the tenant's to see.
	conditions = slices.DeleteFunc(conditions, func(c corev1.PodCondition) bool { return c.Type == corev1.PodScheduled })
	if !hasCondition(tenant.Status.Conditions, corev1.PodScheduled) {
		// Bound by spec.nodeName, never by a scheduler: the kubelet
		// reports such a pod scheduled.
		conditions = append(conditions, corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: tenant.CreationTimestamp})
	}
	has := map[corev1.PodConditionType]bool{}
	for _, c := range conditions {
		has[c.Type] = true
	}
	for _, c := range tenant.Status.Conditions {
		if tenantOwned[c.Type] && !has[c.Type] {
			conditions = append(conditions, c)
		}
	}
	gateReady(conditions, tenant)
	return conditions
}

// unmetReadinessGate returns the first readiness gate of the tenant pod
// whose condition is not True.
func unmetReadinessGate(tenant *corev1.Pod) (corev1.PodConditionType, bool) {
	for _, g := range tenant.Spec.ReadinessGates {
		if readinessGateStatus(tenant, g.ConditionType) != corev1.ConditionTrue {
			return g.ConditionType, true
		}
	}
	return "", false
}

// readinessGateStatus is the status of the tenant pod's condition t, ""
// when it has none.
func readinessGateStatus(p *corev1.Pod, t corev1.PodConditionType) corev1.ConditionStatus {
	for _, c := range p.Status.Conditions {
		if c.Type == t {
			return c.Status
		}
	}
	return ""
}

// readinessGatesChanged reports whether a tenant controller changed the
// condition of one of the pod's readiness gates: the pod's Ready follows.
func readinessGatesChanged(old, cur *corev1.Pod) bool {
	for _, g := range cur.Spec.ReadinessGates {
		if readinessGateStatus(old, g.ConditionType) != readinessGateStatus(cur, g.ConditionType) {
			return true
		}
	}
	return false
}

// tenantResources keeps, of each container status' resources, those the
// tenant's container states: the rest (a zero request, a LimitRange
// default) the host added, and the tenant never asked for them.
func tenantResources(statuses []corev1.ContainerStatus, containers []corev1.Container) {
	stated := map[string]corev1.ResourceRequirements{}
	for _, c := range containers {
		stated[c.Name] = c.Resources
	}
	keep := func(l corev1.ResourceList, want corev1.ResourceList) corev1.ResourceList {
		out := corev1.ResourceList{}
		for name, q := range l {
			if _, ok := want[name]; ok {
				out[name] = q
			}
		}
		if len(out) == 0 {
			return nil
		}
		return out
	}
	for i := range statuses {
		st := &statuses[i]
		want := stated[st.Name]
		st.AllocatedResources = keep(st.AllocatedResources, want.Requests)
		if st.Resources != nil {
			st.Resources.Requests = keep(st.Resources.Requests, want.Requests)
			st.Resources.Limits = keep(st.Resources.Limits, want.Limits)
		}
	}
}

// tenantGeneration maps a generation the host kubelet observed to the
// tenant's: the host pod's generation counts its own changes, not the
// tenant pod's. Having seen the host pod's latest is having seen the
// tenant's latest, since the syncer carries every tenant change before it
// reports status; an older one is reported as the tenant's previous
// generation, not yet caught up. Zero (not reported) stays zero.
func tenantGeneration(observed int64, tenant, host *corev1.Pod) int64 {
	switch {
	case observed == 0:
		return 0
	case observed >= host.Generation:
		return tenant.Generation
	}
	return max(tenant.Generation-1, 1)
}

// terminatedStatus is the status of a tenant pod whose host pod is gone: every
// container terminated, so the pod controller may finish the deletion.
func terminatedStatus(tenant *corev1.Pod, reason string) corev1.PodStatus {
	s := *tenant.Status.DeepCopy()
	if s.Phase != corev1.PodSucceeded {
		s.Phase = corev1.PodFailed
	}
	s.Reason = reason
	for _, list := range []*[]corev1.ContainerStatus{&s.ContainerStatuses, &s.InitContainerStatuses} {
		for i := range *list {
			c := &(*list)[i]
			if c.State.Terminated == nil {
				c.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: reason}}
			}
			c.Ready, c.Started = false, nil
		}
	}
	for i := range s.Conditions {
		if s.Conditions[i].Type == corev1.PodReady || s.Conditions[i].Type == corev1.ContainersReady {
			s.Conditions[i].Status = corev1.ConditionFalse
		}
	}
	return s
}

// hasCondition reports whether conditions has one of type t.
func hasCondition(conditions []corev1.PodCondition, t corev1.PodConditionType) bool {
	return slices.ContainsFunc(conditions, func(c corev1.PodCondition) bool { return c.Type == t })
}
