package syncer

import (
	corev1 "k8s.io/api/core/v1"
)

// TenantStatus returns the tenant pod's status from its host pod's: phase,
// conditions, pod and host IPs, start time and container statuses flow up.
// The QoS class stays the tenant's, which the tenant API server computed from
// the tenant's own spec.
func TenantStatus(tenant, host *corev1.Pod) corev1.PodStatus {
	s := *host.Status.DeepCopy()
	s.QOSClass = tenant.Status.QOSClass
	s.NominatedNodeName = ""
	return s
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
