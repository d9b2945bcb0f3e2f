package networkpolicy

import (
	"maps"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/nestdev/nest/internal/kindsync"
	"github.com/nestdev/nest/internal/syncer/contract"
	"github.com/nestdev/nest/internal/syncer/kinds"
)

// workers is how many policies, and how many pods' policy labels, are
// synced at once.
const workers = 2

// Register makes the kind's two queues: "networkpolicies" keeps the host
// copies, "networkpolicypods" the policy labels of host pods. outside are
// the VirtualCluster's egress blocks (Translator.Outside), podCIDRs the
// host's pod ranges (Translator.PodCIDRs). It returns the
// policy labels pod translation puts on a new host pod, so a pod is
// isolated from its first packet. Virtual-node syncer only: member clusters
// enforce no tenant policy.
//
// A policy is queued when it, its host copy or any namespace (namespace
// selectors) changes; a pod's labels when the pod's labels or any policy
// change, or its host pod appears or gets its addresses (ipBlocks).
func Register(c *kinds.Context, outside []networkingv1.IPBlock, podCIDRs []netip.Prefix) (kinds.Registration, func(*corev1.Pod) map[string]string) {
	s := &Syncer{
		Translator: Translator{VirtualCluster: c.VirtualCluster, HostNamespace: c.HostNamespace, Outside: outside, PodCIDRs: podCIDRs},
		Host:       c.Host, Recorder: c.Recorder,
		TenantPolicies:   c.TenantInformers.Networking().V1().NetworkPolicies().Lister(),
		TenantNamespaces: c.TenantInformers.Core().V1().Namespaces().Lister(),
		TenantPods:       corelisters.NewPodLister(c.TenantPods.GetIndexer()),
		HostPolicies:     c.HostInformers.Networking().V1().NetworkPolicies().Lister().NetworkPolicies(c.HostNamespace),
		HostPods:         c.HostInformers.Core().V1().Pods().Lister().Pods(c.HostNamespace),
	}
	policies := c.NewQueue("networkpolicies", workers, s.Sync, s.Keys)
	pods := c.NewQueue("networkpolicypods", workers, s.SyncPodLabels, s.PodKeys)
	everyPod := func() {
		for _, k := range s.PodKeys() {
			pods.Add(k)
		}
	}
	_, _ = c.TenantInformers.Networking().V1().NetworkPolicies().Informer().AddEventHandler(kinds.OnEvery(func(p *networkingv1.NetworkPolicy) {
		policies.Add(p.Namespace + "/" + p.Name)
		everyPod()
	}))
	_, _ = c.HostInformers.Networking().V1().NetworkPolicies().Informer().AddEventHandler(kinds.OnEvery(func(p *networkingv1.NetworkPolicy) {
		kinds.AddTenantKey(policies, p)
	}))
	_, _ = c.TenantInformers.Core().V1().Namespaces().Informer().AddEventHandler(kinds.OnEvery(func(*corev1.Namespace) {
		for _, k := range s.Keys() {
			policies.Add(k)
		}
	}))
	_, _ = c.TenantPods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { pods.Add(cache.MetaObjectToName(obj.(*corev1.Pod)).String()) },
		UpdateFunc: func(old, obj any) {
			if !maps.Equal(old.(*corev1.Pod).Labels, obj.(*corev1.Pod).Labels) {
				pods.Add(cache.MetaObjectToName(obj.(*corev1.Pod)).String())
			}
		},
	})
	hostPod := func(obj any) {
		if ns, name, ok := contract.TenantKey(obj.(*corev1.Pod).Annotations); ok {
			pods.Add(ns + "/" + name)
		}
	}
	_, _ = c.HostInformers.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: hostPod,
		UpdateFunc: func(old, obj any) {
			if !slices.Equal(old.(*corev1.Pod).Status.PodIPs, obj.(*corev1.Pod).Status.PodIPs) {
				hostPod(obj)
			}
		},
	})
	podLabels := func(pod *corev1.Pod) map[string]string { return s.View().PodLabels(pod) }
	return kinds.Registration{Queues: []*kindsync.Syncer{policies, pods}}, podLabels
}
