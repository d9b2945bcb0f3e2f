package syncer

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

// unwrap is the object of a delete event, tombstone or not.
func unwrap(obj any) any {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return d.Obj
	}
	return obj
}

// forwardEvent repeats a host event about a host pod (image pulled, container
// started, probe failed) on the tenant pod, image pull failures reduced to
// their kind (TenantEventMessage) and the host's names of the pod, its
// namespace and what it mounts turned into the tenant's (podScope): a
// kubelet's BackOff or FailedMount names them. Events older than this syncer
// are not repeated, so a restart does not replay history, and events about
// a helper init container are not either (reportHelperFailures tells the
// tenant what matters of those).
func (s *syncer) forwardEvent(ev *corev1.Event) {
	if ev.InvolvedObject.Kind != "Pod" || eventTime(ev).Before(s.started) {
		return
	}
	host, err := s.provider.hostPods.Get(ev.InvolvedObject.Name)
	if err != nil {
		return
	}
	tenant, ok := s.provider.tenantPodOf(host)
	switch {
	case !ok, aboutHelper(ev):
	case fromHostKubelet(ev):
		scope := s.provider.scope(tenant, host)
		s.recorder.Event(tenant, ev.Type, ev.Reason, scope.Scrub(TenantEventMessage(ev.Message)))
	case ev.Reason == "FailedScheduling":
		s.recorder.Event(tenant, corev1.EventTypeWarning, ReasonWaitingForHost, "The host cluster has no room for this pod yet: it starts once the host has")
	}
}

// ReasonWaitingForHost is the tenant event of a pod whose host pod the host
// scheduler cannot place yet.
const ReasonWaitingForHost = "WaitingForHost"

// fromHostKubelet reports whether a host event is the host kubelet's (its
// containers, probes, images and volumes), which the tenant's kubelet would
// have reported. Other sources describe the host cluster: the host
// scheduler names host nodes and their capacity, host controllers act on
// host objects. Those stay on the host.
func fromHostKubelet(ev *corev1.Event) bool {
	return ev.Source.Component == "kubelet" || ev.ReportingController == "kubelet"
}

func eventTime(ev *corev1.Event) time.Time {
	for _, t := range []metav1.Time{ev.LastTimestamp, ev.FirstTimestamp} {
		if !t.IsZero() {
			return t.Time
		}
	}
	return ev.EventTime.Time
}
