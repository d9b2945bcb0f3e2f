package syncer

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"

	"github.com/nestdev/nest/internal/kindsync"
	"github.com/nestdev/nest/internal/syncer/contract"
)

// addHandlers connects informer events to the syncers: each kind's events,
// on the tenant side and on the host copies, put keys on that kind's queue.
func (s *syncer) addHandlers(ctx context.Context) {
	p := s.provider
	_, _ = s.hostF.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			p.hostPodChanged(obj.(*corev1.Pod))
			s.orphans.Add(obj.(*corev1.Pod).Name)
			s.hostPodNetworkChanged(obj.(*corev1.Pod))
		},
		UpdateFunc: func(old, obj any) {
			p.hostPodChanged(obj.(*corev1.Pod))
			if old.(*corev1.Pod).Status.PodIP != obj.(*corev1.Pod).Status.PodIP {
				s.hostPodNetworkChanged(obj.(*corev1.Pod))
			}
			p.reportHelperFailures(old.(*corev1.Pod), obj.(*corev1.Pod))
			if was, is := old.(*corev1.Pod), obj.(*corev1.Pod); was.Status.PodIP != is.Status.PodIP || holdsItsIP(was) != holdsItsIP(is) {
				s.addSelectorlessServices()
			}
		},
		DeleteFunc: func(obj any) {
			if pod, ok := unwrap(obj).(*corev1.Pod); ok {
				p.hostPodDeleted(pod)
				s.addSelectorlessServices()
			}
		},
	})
	// virtual-kubelet drops the tombstones of pods deleted while the watch
	// was down; the orphan syncer catches their host pods.
	_, _ = s.pods.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { s.nodeNetworkChanged(obj.(*corev1.Pod)) },
		// A readiness gate's condition is the tenant's: no host change
		// follows it, so the pod's status is worked out again here.
		UpdateFunc: func(old, obj any) {
			s.nodeNetworkChanged(obj.(*corev1.Pod))
			if pod := obj.(*corev1.Pod); readinessGatesChanged(old.(*corev1.Pod), pod) {
				if host, err := p.hostPods.Get(contract.HostName(s.o.VirtualCluster, pod.Namespace, pod.Name)); err == nil {
					p.hostPodChanged(host)
				}
			}
		},
		DeleteFunc: func(obj any) {
			if pod, ok := unwrap(obj).(*corev1.Pod); ok {
				s.orphans.Add(contract.HostName(s.o.VirtualCluster, pod.Namespace, pod.Name))
				s.nodeNetworkChanged(pod)
			}
		},
	})
	_, _ = s.tenantF.Core().V1().ConfigMaps().Informer().AddEventHandler(onEvery(addKey(s.configMaps)))
	_, _ = s.hostF.Core().V1().ConfigMaps().Informer().AddEventHandler(onEvery(addTenantKey(s.configMaps)))
	_, _ = s.tenantF.Core().V1().Secrets().Informer().AddEventHandler(onEvery(addKey(s.secrets)))
	_, _ = s.hostF.Core().V1().Secrets().Informer().AddEventHandler(onEvery(func(obj metav1.Object) {
		if obj.GetLabels()[LabelTokenSecret] == "true" {
			s.tokens.Add(obj.GetName())
			return
		}
		addTenantKey(s.secrets)(obj)
	}))
	if s.o.Member == "" {
		s.addServiceHandlers()
		s.addNetworkPolicyHandlers()
		s.addStorageHandlers()
		_, _ = s.membersF.Core().V1().Secrets().Informer().AddEventHandler(onEvery(func(metav1.Object) { s.members.Add(membersKey) }))
	}
	_, _ = s.events.Core().V1().Events().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { s.forwardEvent(obj.(*corev1.Event)) },
		UpdateFunc: func(old, obj any) {
			if obj.(*corev1.Event).Count != old.(*corev1.Event).Count {
				s.forwardEvent(obj.(*corev1.Event))
			}
		},
	})
}

// addServiceHandlers connects the host syncer's Service, EndpointSlice and
// dedicated-node events to the Service, slice and DNS syncers.
func (s *syncer) addServiceHandlers() {
	_, _ = s.tenantF.Core().V1().Services().Informer().AddEventHandler(onEvery(func(obj metav1.Object) {
		addKey(s.services)(obj)
		addKey(s.slices)(obj)
		s.clusterDNSChanged(obj)
	}))
	_, _ = s.hostF.Core().V1().Services().Informer().AddEventHandler(onEvery(func(obj metav1.Object) {
		addTenantKey(s.services)(obj)
		addTenantKey(s.slices)(obj)
	}))
	dns := s.serviceSync.dns
	_, _ = s.tenantF.Discovery().V1().EndpointSlices().Informer().AddEventHandler(onEvery(func(obj metav1.Object) {
		dns.Add(hostsKey)
		if svc := obj.GetLabels()[discoveryv1.LabelServiceName]; svc != "" {
			s.slices.Add(obj.GetNamespace() + "/" + svc)
		}
		s.clusterDNSChanged(obj)
	}))
	_, _ = s.hostF.Discovery().V1().EndpointSlices().Informer().AddEventHandler(onEvery(func(obj metav1.Object) {
		if ns, svc := obj.GetLabels()[contract.LabelTenantNamespace], obj.GetLabels()[LabelTenantService]; ns != "" && svc != "" {
			s.slices.Add(ns + "/" + svc)
		}
	}))
	// New dedicated pod CIDRs change which endpoints every Service's host
	// slices may name.
	_, _ = s.dedicatedF.Core().V1().ConfigMaps().Informer().AddEventHandler(onEvery(func(metav1.Object) {
		services, _ := s.serviceSync.tenantServices.List(labels.Everything())
		for _, svc := range services {
			s.slices.Add(svc.Namespace + "/" + svc.Name)
		}
	}))
}

// clusterDNSChanged queues the cluster DNS syncer's key when obj is what
// it keeps or reads: the kube-dns Service and its slice, and the slice of
// the "kubernetes" Service, whose port it repeats.
func (s *syncer) clusterDNSChanged(obj metav1.Object) {
	if s.clusterDNS == nil {
		return
	}
	switch obj.GetNamespace() + "/" + obj.GetName() {
	case clusterDNSKey, ClusterDNSNamespace + "/" + clusterDNSSlice, metav1.NamespaceDefault + "/kubernetes":
		s.clusterDNS.Add(clusterDNSKey)
	}
}

// addSelectorlessServices queues every tenant Service without a selector
// for its endpoints: a host pod's new IP may be one of them, and a finished
// or deleted pod's IP may no longer be.
func (s *syncer) addSelectorlessServices() {
	if s.o.Member != "" {
		return
	}
	services, _ := s.serviceSync.tenantServices.List(labels.Everything())
	for _, svc := range services {
		if len(svc.Spec.Selector) == 0 {
			s.slices.Add(svc.Namespace + "/" + svc.Name)
		}
	}
}

// onEvery calls f with the object of every add, update and delete event,
// tombstones unwrapped.
func onEvery(f func(metav1.Object)) cache.ResourceEventHandlerFuncs {
	call := func(obj any) {
		if m, ok := unwrap(obj).(metav1.Object); ok {
			f(m)
		}
	}
	return cache.ResourceEventHandlerFuncs{AddFunc: call, UpdateFunc: func(_, obj any) { call(obj) }, DeleteFunc: call}
}

// addKey queues a tenant object's "namespace/name".
func addKey(k *kindsync.Syncer) func(metav1.Object) {
	return func(obj metav1.Object) { k.Add(obj.GetNamespace() + "/" + obj.GetName()) }
}

// addTenantKey queues the "namespace/name" of the tenant object a host copy
// stands for, so a copy changed or deleted from outside is put right.
func addTenantKey(k *kindsync.Syncer) func(metav1.Object) {
	return func(obj metav1.Object) {
		if ns, name, ok := contract.TenantKey(obj.GetAnnotations()); ok {
			k.Add(ns + "/" + name)
		}
	}
}

func unwrap(obj any) any {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return d.Obj
	}
	return obj
}

// forwardEvent repeats a host event about a host pod (image pulled, container
// started, probe failed) on the tenant pod, image pull failures reduced to
// their kind (TenantEventMessage). Events older than this syncer
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
		s.recorder.Event(tenant, ev.Type, ev.Reason, TenantEventMessage(ev.Message))
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
