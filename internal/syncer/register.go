package syncer

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/nestdev/nest/internal/kindsync"
	"github.com/nestdev/nest/internal/syncer/contract"
	"github.com/nestdev/nest/internal/syncer/kinds"
	"github.com/nestdev/nest/internal/syncer/kinds/clusteradmins"
	"github.com/nestdev/nest/internal/syncer/kinds/configmap"
	"github.com/nestdev/nest/internal/syncer/kinds/endpointslice"
	"github.com/nestdev/nest/internal/syncer/kinds/hostcopy"
	"github.com/nestdev/nest/internal/syncer/kinds/networkpolicy"
	"github.com/nestdev/nest/internal/syncer/kinds/persistentvolumeclaim"
	"github.com/nestdev/nest/internal/syncer/kinds/secret"
	"github.com/nestdev/nest/internal/syncer/kinds/service"
	"github.com/nestdev/nest/internal/syncer/kinds/serviceaccounttoken"
)

// kindRow is one synced kind: the syncers it runs in and how it is wired.
type kindRow struct {
	// name names the kind in registration errors.
	name string
	// modes are the syncers the kind runs in.
	modes kinds.Mode
	// register makes the kind's queues and event handlers for syncer s.
	register func(s *syncer, c *kinds.Context) (kinds.Registration, error)
}

// kindTable is every kind nest-syncer syncs, in the order they are wired.
// Pods themselves go through virtual-kubelet's pod controller (runNode);
// the "pods" row is what follows host pods and tenant pod deletions. Adding
// a kind is its folder under kinds/ and one row here. It is a function
// because the members row starts member syncers, which read the table.
func kindTable() []kindRow {
	return []kindRow{
		{"pods", kinds.VirtualNode | kinds.Member, (*syncer).registerPods},
		{"events", kinds.VirtualNode | kinds.Member, (*syncer).registerEvents},
		{"configmaps", kinds.VirtualNode | kinds.Member, func(s *syncer, c *kinds.Context) (kinds.Registration, error) {
			reg, k := configmap.Register(c, s.provider.objects.budget, s.provider.objects.referencer(hostcopy.KindConfigMap))
			s.configMaps, s.provider.objects.configMaps = reg.Queues[0], k
			return reg, nil
		}},
		{"secrets", kinds.VirtualNode | kinds.Member, func(s *syncer, c *kinds.Context) (kinds.Registration, error) {
			reg, k := secret.Register(c, s.provider.objects.budget, s.provider.objects.referencer(hostcopy.KindSecret))
			s.secrets, s.provider.objects.secrets = reg.Queues[0], k
			return reg, nil
		}},
		{"serviceaccounttokens", kinds.VirtualNode | kinds.Member, func(s *syncer, c *kinds.Context) (kinds.Registration, error) {
			reg := serviceaccounttoken.Register(c, s.provider.tokens)
			s.tokens = reg.Queues[0]
			return reg, nil
		}},
		{"services", kinds.VirtualNode, func(s *syncer, c *kinds.Context) (kinds.Registration, error) {
			return service.Register(c, s.serviceSync, s.o.NodeIP)
		}},
		{"endpointslices", kinds.VirtualNode, func(s *syncer, c *kinds.Context) (kinds.Registration, error) {
			return endpointslice.Register(c, s.dedicatedF), nil
		}},
		{"clusterdns", kinds.VirtualNode, func(s *syncer, c *kinds.Context) (kinds.Registration, error) {
			return service.RegisterClusterDNS(c, service.Translator{Translation: s.o.Translation}, s.o.NodeIP), nil
		}},
		{"clusteradmins", kinds.VirtualNode, func(_ *syncer, c *kinds.Context) (kinds.Registration, error) {
			return clusteradmins.Register(c), nil
		}},
		{"nodenetwork", kinds.VirtualNode, (*syncer).registerNodeNetwork},
		{"members", kinds.VirtualNode, (*syncer).registerMembers},
		{"heldpods", kinds.Member, (*syncer).registerGatekeeper},
		{"networkpolicies", kinds.VirtualNode, func(s *syncer, c *kinds.Context) (kinds.Registration, error) {
			reg, podLabels := networkpolicy.Register(c, s.o.EgressBlocks, s.o.HostPodCIDRs)
			s.provider.policyLabels = podLabels
			return reg, nil
		}},
		{"persistentvolumeclaims", kinds.VirtualNode, func(s *syncer, c *kinds.Context) (kinds.Registration, error) {
			return persistentvolumeclaim.Register(c, s.o.StorageClasses), nil
		}},
	}
}

// mode is the mode this syncer runs in.
func (s *syncer) mode() kinds.Mode {
	if s.o.Member != "" {
		return kinds.Member
	}
	return kinds.VirtualNode
}

// registerKinds wires every row of kindTable that runs in this syncer's
// mode into s.registration.
func (s *syncer) registerKinds(c *kinds.Context) error {
	for _, row := range kindTable() {
		if row.modes&c.Mode == 0 {
			continue
		}
		reg, err := row.register(s, c)
		if err != nil {
			return fmt.Errorf("register kind %s: %w", row.name, err)
		}
		s.registration.Add(reg)
	}
	return nil
}

// kindContext is what every kind of this syncer is wired from.
func (s *syncer) kindContext(tenant, host kubernetes.Interface) *kinds.Context {
	return &kinds.Context{
		VirtualCluster: s.o.VirtualCluster, HostNamespace: s.o.HostNamespace,
		Mode: s.mode(), Member: s.o.Member,
		Tenant: tenant, Host: host,
		TenantInformers: s.tenantF, HostInformers: s.hostF,
		TenantPods: s.pods.Informer(), Recorder: s.recorder,
	}
}

// orphanWorkers is how many host pods are checked for a tenant pod, and
// how many tenant pod deletions are passed on, at once.
const orphanWorkers = 2

// registerPods follows host pods (status, network, helper failures) and
// deletes the host pods of tenant pods that are gone: orphans catches those
// virtual-kubelet missed, tenantDeletes ends a force-deleted pod's at once.
func (s *syncer) registerPods(c *kinds.Context) (kinds.Registration, error) {
	p := s.provider
	s.orphans = c.NewQueue("orphanpods", orphanWorkers, p.syncOrphan, p.hostPodNames)
	// A delete is one-shot: there is nothing to resync.
	s.tenantDeletes = c.NewQueue("tenantpoddeletes", orphanWorkers, p.syncTenantDelete, func() []string { return nil })
	p.tenantDeletes = s.tenantDeletes
	_, _ = c.HostInformers.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
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
		},
		DeleteFunc: func(obj any) {
			if pod, ok := unwrap(obj).(*corev1.Pod); ok {
				p.hostPodDeleted(pod)
			}
		},
	})
	// virtual-kubelet drops the tombstones of pods deleted while the watch
	// was down; the orphan syncer catches their host pods.
	_, _ = c.TenantPods.AddEventHandler(cache.ResourceEventHandlerFuncs{
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
	return kinds.Registration{Queues: []*kindsync.Syncer{s.orphans, s.tenantDeletes}}, nil
}

// registerEvents repeats host events about host pods on the tenant pods
// (forwardEvent).
func (s *syncer) registerEvents(*kinds.Context) (kinds.Registration, error) {
	_, _ = s.events.Core().V1().Events().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { s.forwardEvent(obj.(*corev1.Event)) },
		UpdateFunc: func(old, obj any) {
			if obj.(*corev1.Event).Count != old.(*corev1.Event).Count {
				s.forwardEvent(obj.(*corev1.Event))
			}
		},
	})
	return kinds.Registration{}, nil
}

// registerNodeNetwork keeps the node network of hostNetwork pods, per
// virtual node (nodenetwork.go), when Options.NodeNetwork asks for it.
func (s *syncer) registerNodeNetwork(*kinds.Context) (kinds.Registration, error) {
	if !s.o.NodeNetwork {
		return kinds.Registration{}, nil
	}
	s.nodeNetworks = kindsync.New("nodenetwork", 1, s.syncNodeNetwork, func() []string { return slices.Clone(s.nodes) })
	s.provider.nodeNetwork = s.nodeNetwork
	return kinds.Registration{Queues: []*kindsync.Syncer{s.nodeNetworks}}, nil
}
