package service

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nestdev/nest/internal/kindsync"
	"github.com/nestdev/nest/internal/syncer/contract"
	"github.com/nestdev/nest/internal/syncer/kinds"
	"github.com/nestdev/nest/internal/syncer/kinds/hostcopy"
)

// serviceWorkers is how many tenant Services are copied at once.
const serviceWorkers = 4

// Register makes the kind's queues: "services" keeps the host copies,
// "dns" the tenant CoreDNS' files, and, with a node IP, "nodeports" the
// tenant's node ports on it. It writes the first hosts file at once, with
// the API server's record, so CoreDNS answers for the API server before
// anything syncs.
func Register(c *kinds.Context, s *Syncer, nodeIP string) (kinds.Registration, error) {
	if err := s.Start(); err != nil {
		return kinds.Registration{}, err
	}
	var reg kinds.Registration
	if nodeIP != "" {
		proxy := &nodePortProxy{ip: nodeIP, tr: s.tr, tenantServices: s.tenantServices,
			hostServices: s.hostServices, listeners: map[int32]*nodePortListener{}}
		s.nodePorts = c.NewQueue("nodeports", 1, proxy.sync, func() []string { return []string{nodePortsKey} })
		reg.Queues = append(reg.Queues, s.nodePorts)
		reg.Runners = append(reg.Runners, func(ctx context.Context) {
			<-ctx.Done()
			proxy.close()
		})
	}
	services := c.NewQueue("services", serviceWorkers, s.SyncService, hostcopy.Keys(s.tenantServices.List, s.hostServices.List))
	reg.Queues = append(reg.Queues, services, s.DNSQueue())
	_, _ = c.TenantInformers.Core().V1().Services().Informer().AddEventHandler(kinds.OnEvery(func(svc *corev1.Service) {
		services.Add(svc.Namespace + "/" + svc.Name)
	}))
	_, _ = c.HostInformers.Core().V1().Services().Informer().AddEventHandler(kinds.OnEvery(func(svc *corev1.Service) { kinds.AddTenantKey(services, svc) }))
	_, _ = c.TenantInformers.Discovery().V1().EndpointSlices().Informer().AddEventHandler(kinds.OnEvery(func(*discoveryv1.EndpointSlice) { s.DNSChanged() }))
	return reg, nil
}

// RegisterClusterDNS keeps the tenant's kube-system/kube-dns Service
// pointing at podIP, the control-plane pod's (queue "clusterdns"); nothing
// without one. It follows the Service, its slice, and the slice of the
// "kubernetes" Service, whose port it repeats.
func RegisterClusterDNS(c *kinds.Context, tr Translator, podIP string) kinds.Registration {
	if podIP == "" {
		return kinds.Registration{}
	}
	dns := &clusterDNSSyncer{tr: tr, podIP: podIP, tenant: c.Tenant,
		services: c.TenantInformers.Core().V1().Services().Lister(), slices: c.TenantInformers.Discovery().V1().EndpointSlices().Lister()}
	q := c.NewQueue("clusterdns", 1, dns.sync, func() []string { return []string{clusterDNSKey} })
	changed := func(obj metav1.Object) {
		switch obj.GetNamespace() + "/" + obj.GetName() {
		case clusterDNSKey, contract.ClusterDNSNamespace + "/" + clusterDNSSlice, metav1.NamespaceDefault + "/kubernetes":
			q.Add(clusterDNSKey)
		}
	}
	_, _ = c.TenantInformers.Core().V1().Services().Informer().AddEventHandler(kinds.OnEvery(func(svc *corev1.Service) { changed(svc) }))
	_, _ = c.TenantInformers.Discovery().V1().EndpointSlices().Informer().AddEventHandler(kinds.OnEvery(func(s *discoveryv1.EndpointSlice) { changed(s) }))
	return kinds.Registration{Queues: []*kindsync.Syncer{q}}
}
