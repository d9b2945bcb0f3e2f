package syncer

import (
	"maps"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/nestdev/nest/internal/kindsync"
	"github.com/nestdev/nest/internal/syncer/contract"
	"github.com/nestdev/nest/internal/syncer/kinds/networkpolicy"
)

// networkPolicyWorkers is how many policies, and how many pods' policy
// labels, are synced at once.
const networkPolicyWorkers = 2

// wireNetworkPolicies makes the tenant's NetworkPolicies' syncers
// (kinds/networkpolicy): one for the host copies, one for the policy labels
// of host pods, which pod translation sets too. Host syncer only: member
// clusters enforce no tenant policy.
func (s *syncer) wireNetworkPolicies(host kubernetes.Interface) {
	np := &networkpolicy.Syncer{
		Translator: networkpolicy.Translator{VirtualCluster: s.o.VirtualCluster, HostNamespace: s.o.HostNamespace, Outside: s.o.EgressBlocks},
		Host:       host, Recorder: s.recorder,
		TenantPolicies:   s.tenantF.Networking().V1().NetworkPolicies().Lister(),
		TenantNamespaces: s.tenantF.Core().V1().Namespaces().Lister(),
		TenantPods:       s.pods.Lister(),
		HostPolicies:     s.hostF.Networking().V1().NetworkPolicies().Lister().NetworkPolicies(s.o.HostNamespace),
		HostPods:         s.provider.hostPods,
	}
	s.policySync = np
	s.networkPolicies = kindsync.New("networkpolicies", networkPolicyWorkers, np.Sync, np.Keys)
	s.policyPods = kindsync.New("networkpolicypods", networkPolicyWorkers, np.SyncPodLabels, np.PodKeys)
	s.provider.policyLabels = func(pod *corev1.Pod) map[string]string { return np.View().PodLabels(pod) }
}

// addNetworkPolicyHandlers queues a policy when it, its host copy or any
// namespace (namespace selectors) changes, and a pod's policy labels when
// the pod's labels or any policy change, or its host pod appears.
func (s *syncer) addNetworkPolicyHandlers() {
	everyPod := func() {
		for _, k := range s.policySync.PodKeys() {
			s.policyPods.Add(k)
		}
	}
	_, _ = s.tenantF.Networking().V1().NetworkPolicies().Informer().AddEventHandler(onEvery(func(obj metav1.Object) {
		addKey(s.networkPolicies)(obj)
		everyPod()
	}))
	_, _ = s.hostF.Networking().V1().NetworkPolicies().Informer().AddEventHandler(onEvery(addTenantKey(s.networkPolicies)))
	_, _ = s.tenantF.Core().V1().Namespaces().Informer().AddEventHandler(onEvery(func(metav1.Object) {
		for _, k := range s.policySync.Keys() {
			s.networkPolicies.Add(k)
		}
	}))
	_, _ = s.pods.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { addKey(s.policyPods)(obj.(*corev1.Pod)) },
		UpdateFunc: func(old, obj any) {
			if !maps.Equal(old.(*corev1.Pod).Labels, obj.(*corev1.Pod).Labels) {
				addKey(s.policyPods)(obj.(*corev1.Pod))
			}
		},
	})
	_, _ = s.hostF.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if ns, name, ok := contract.TenantKey(obj.(*corev1.Pod).Annotations); ok {
				s.policyPods.Add(ns + "/" + name)
			}
		},
	})
}
