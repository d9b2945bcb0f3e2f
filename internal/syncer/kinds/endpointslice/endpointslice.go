// Package endpointslice copies the endpoints of tenant Services without a
// selector onto their host copies, admitting only the addresses of the
// tenant's own live host pods and of pods on its dedicated nodes, and adds
// the endpoints on dedicated nodes to Services with a selector.
package endpointslice

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	discoveryclient "k8s.io/client-go/kubernetes/typed/discovery/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/nestdev/nest/internal/kindsync"
	"github.com/nestdev/nest/internal/syncer/contract"
	"github.com/nestdev/nest/internal/syncer/kinds"
	"github.com/nestdev/nest/internal/syncer/kinds/hostcopy"
)

// Tenant Services without a selector have the endpoints the tenant writes
// (EndpointSlices, or Endpoints that the tenant controller-manager mirrors
// into slices). The host cannot compute them, so the syncer copies them onto
// the host copy of the Service, keeping only endpoints that are the
// addresses of the tenant's own host pods or of pods on its dedicated nodes:
// a tenant can point its Service at its pods, never at a host address or
// another tenant's pod. Services with a selector have host slices too once
// the tenant holds dedicated nodes: the host's EndpointSlice controller
// names the host pods, and the syncer adds the endpoints on dedicated nodes.

const (
	// LabelTenantService is the tenant Service a host EndpointSlice belongs
	// to, in the tenant namespace of LabelTenantNamespace.
	LabelTenantService = "nest.dev/tenant-service"
	// MaxHostEndpointSlices bounds the host EndpointSlices of one tenant
	// Service: the tenant's slices past it, in name order, are not copied
	// and an event says so. With the API's 1000 endpoints a slice, a host
	// Service has at most 8000 endpoints.
	MaxHostEndpointSlices = 8
	// MaxHostEndpoints bounds the endpoints of one tenant Service on the
	// host, every slice together, each address once a slice: kube-proxy on
	// every host node programs them.
	MaxHostEndpoints = 1000
)

// HostEndpointSlices returns the host EndpointSlices of a tenant Service
// without a selector whose host copy is hostSvc: one per tenant slice of
// an IP address type, in name order and at most MaxHostEndpointSlices, each
// with the tenant slice's ports and the endpoints whose every address is
// allowed (a tenant host pod's IP), each address once a slice and at most
// MaxHostEndpoints in all. Node names, zones and pod references are
// the tenant's and are dropped. dropped counts what was left out: slices
// past the bound and endpoints with an address not allowed.
func (t Translator) HostEndpointSlices(hostSvc *corev1.Service, tenant []*discoveryv1.EndpointSlice, allowed func(string) bool) (out []*discoveryv1.EndpointSlice, dropped int) {
	total := 0
	tenant = slices.Clone(tenant)
	slices.SortFunc(tenant, func(a, b *discoveryv1.EndpointSlice) int { return strings.Compare(a.Name, b.Name) })
	for _, s := range tenant {
		if s.AddressType != discoveryv1.AddressTypeIPv4 && s.AddressType != discoveryv1.AddressTypeIPv6 {
			continue
		}
		if len(out) == MaxHostEndpointSlices {
			dropped++
			continue
		}
		endpoints := make([]discoveryv1.Endpoint, 0, len(s.Endpoints))
		seen := map[string]bool{}
		for _, e := range s.Endpoints {
			if len(e.Addresses) == 0 || !allAllowed(e.Addresses, allowed) || seen[e.Addresses[0]] || total == MaxHostEndpoints {
				dropped++
				continue
			}
			seen[e.Addresses[0]] = true
			total++
			endpoints = append(endpoints, discoveryv1.Endpoint{Addresses: slices.Clone(e.Addresses), Conditions: *e.Conditions.DeepCopy()})
		}
		meta := hostcopy.Meta(t.VirtualCluster, t.HostNamespace, &s.ObjectMeta)
		maps.Copy(meta.Labels, map[string]string{
			discoveryv1.LabelServiceName: hostSvc.Name,
			discoveryv1.LabelManagedBy:   contract.EndpointSliceManager,
			LabelTenantService:           hostSvc.Annotations[contract.AnnotationTenantName],
		})
		// Owned by the host Service: the host's garbage collector deletes
		// the slices with it, whoever deletes the Service.
		meta.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: hostSvc.Name, UID: hostSvc.UID}}
		var ports []discoveryv1.EndpointPort
		for _, p := range s.Ports {
			ports = append(ports, *p.DeepCopy())
		}
		out = append(out, &discoveryv1.EndpointSlice{ObjectMeta: meta, AddressType: s.AddressType, Endpoints: endpoints, Ports: ports})
	}
	return out, dropped
}

func allAllowed(addresses []string, allowed func(string) bool) bool {
	for _, a := range addresses {
		if !allowed(a) {
			return false
		}
	}
	return true
}

// Translator names the host copies of one VirtualCluster's slices.
type Translator struct {
	VirtualCluster, HostNamespace string
}

// Syncer keeps the host EndpointSlices of each tenant Service
// without a selector in step with the tenant's slices. Its key is the
// tenant Service's "namespace/name".
type Syncer struct {
	tr             Translator
	host           kubernetes.Interface
	recorder       record.EventRecorder
	tenantServices corelisters.ServiceLister
	tenantSlices   discoverylisters.EndpointSliceLister
	hostServices   corelisters.ServiceNamespaceLister
	hostSlices     discoverylisters.EndpointSliceNamespaceLister
	hostPods       corelisters.PodNamespaceLister
	// dedicated returns the pod CIDRs of the tenant's dedicated nodes, as
	// nest-manager records them (contract.DedicatedNodesConfigMap).
	dedicated func() []netip.Prefix
}

// sync writes the host slices the tenant Service key should have and
// deletes the others. A Service whose host copy does not exist yet should
// have none; the host copy's event brings the key back.
func (e *Syncer) Sync(ctx context.Context, key string) (time.Duration, error) {
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return 0, kindsync.Terminal(err)
	}
	have, err := e.hostSlices.List(labels.SelectorFromSet(labels.Set{contract.LabelTenantNamespace: namespace, LabelTenantService: name}))
	if err != nil {
		return 0, err
	}
	want, err := e.wanted(namespace, name)
	if err != nil {
		return 0, err
	}
	copies := e.copies()
	for _, w := range want {
		if h, err := e.hostSlices.Get(w.Name); err == nil && h.AddressType != w.AddressType {
			// The address type is immutable: a tenant slice recreated with
			// another gets a new host slice.
			if err := deleteSlice(ctx, e.host.DiscoveryV1().EndpointSlices(e.tr.HostNamespace), h); err != nil {
				return 0, fmt.Errorf("replace host EndpointSlice %s of Service %s: %w", w.Name, key, err)
			}
			return 0, fmt.Errorf("host EndpointSlice %s of Service %s had address type %s; deleted, to be made again as %s", h.Name, key, h.AddressType, w.AddressType)
		}
		if err := copies.Apply(ctx, w); err != nil {
			return 0, fmt.Errorf("host EndpointSlice %s of Service %s: %w", w.Name, key, err)
		}
	}
	for _, h := range have {
		if slices.ContainsFunc(want, func(w *discoveryv1.EndpointSlice) bool { return w.Name == h.Name }) {
			continue
		}
		ns, sliceName, _ := contract.TenantKey(h.Annotations)
		if err := copies.Delete(ctx, e.tr.VirtualCluster, h.Name, ns, sliceName); err != nil {
			return 0, fmt.Errorf("delete host EndpointSlice %s of Service %s: %w", h.Name, key, err)
		}
	}
	if svc, err := e.tenantServices.Services(namespace).Get(name); err == nil && len(svc.Spec.Selector) == 0 {
		return 0, e.deleteControllerSlices(ctx, namespace, name)
	}
	return 0, nil
}

// copies writes the host slices, as every kind of host copy is written: only
// over the copy of the same tenant slice.
func (e *Syncer) copies() hostcopy.Copies[*discoveryv1.EndpointSlice] {
	return hostcopy.Copies[*discoveryv1.EndpointSlice]{
		Kind: "EndpointSlice", Client: e.host.DiscoveryV1().EndpointSlices(e.tr.HostNamespace), Cached: e.hostSlices.Get,
		Differs: Differs,
		Merged: func(have, want *discoveryv1.EndpointSlice) *discoveryv1.EndpointSlice {
			upd := have.DeepCopy()
			upd.Labels, upd.Annotations, upd.OwnerReferences = want.Labels, want.Annotations, want.OwnerReferences
			upd.Endpoints, upd.Ports = want.Endpoints, want.Ports
			return upd
		},
	}
}

// deleteSlice deletes one host slice that is no tenant slice's copy, bound
// to the UID that was read.
func deleteSlice(ctx context.Context, client discoveryclient.EndpointSliceInterface, s *discoveryv1.EndpointSlice) error {
	uid := s.UID
	err := client.Delete(ctx, s.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}

// deleteControllerSlices deletes the slices the host's EndpointSlice
// controller made for the host copy of a Service that had a selector: it
// leaves them in place once the selector is gone, and their pod IPs would
// keep getting traffic after the pods are gone.
func (e *Syncer) deleteControllerSlices(ctx context.Context, namespace, name string) error {
	client := e.host.DiscoveryV1().EndpointSlices(e.tr.HostNamespace)
	list, err := client.List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(labels.Set{
		discoveryv1.LabelServiceName: contract.HostName(e.tr.VirtualCluster, namespace, name)}).String()})
	if err != nil {
		return fmt.Errorf("list host EndpointSlices of Service %s/%s: %w", namespace, name, err)
	}
	for i := range list.Items {
		if s := &list.Items[i]; s.Labels[discoveryv1.LabelManagedBy] != contract.EndpointSliceManager {
			if err := deleteSlice(ctx, client, s); err != nil {
				return fmt.Errorf("delete the host controller's EndpointSlice %s of Service %s/%s: %w", s.Name, namespace, name, err)
			}
		}
	}
	return nil
}

// wanted returns the host slices of the tenant Service namespace/name, and
// records an event on it when some of its endpoints are not copied.
func (e *Syncer) wanted(namespace, name string) ([]*discoveryv1.EndpointSlice, error) {
	svc, err := e.tenantServices.Services(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	selected := len(svc.Spec.Selector) > 0
	dedicated := e.dedicatedPodCIDRs()
	if selected && len(dedicated) == 0 {
		return nil, nil
	}
	hostSvc, err := e.hostServices.Get(contract.HostName(e.tr.VirtualCluster, namespace, name))
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if !contract.IsCopyOf(hostSvc, e.tr.VirtualCluster, namespace, name) {
		return nil, nil
	}
	tenant, err := e.tenantSlices.EndpointSlices(namespace).List(labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: name}))
	if err != nil {
		return nil, err
	}
	onDedicated := inPrefixes(dedicated)
	if selected {
		// The host's controller has the host pods; only the rest is ours.
		// Slices without such an endpoint go first, so they take no place
		// under MaxHostEndpointSlices.
		tenant = slices.DeleteFunc(slices.Clone(tenant), func(s *discoveryv1.EndpointSlice) bool {
			return !slices.ContainsFunc(s.Endpoints, func(e discoveryv1.Endpoint) bool {
				return len(e.Addresses) > 0 && allAllowed(e.Addresses, onDedicated)
			})
		})
		want, _ := e.tr.HostEndpointSlices(hostSvc, tenant, onDedicated)
		return want, nil
	}
	isPod := e.podIPs()
	want, dropped := e.tr.HostEndpointSlices(hostSvc, tenant, func(a string) bool { return isPod(a) || onDedicated(a) })
	if dropped > 0 {
		e.recorder.Eventf(svc, corev1.EventTypeWarning, "EndpointsNotCopied",
			"%d endpoints or slices of this Service are not served: only the addresses of this cluster's pods are, in at most %d EndpointSlices", dropped, MaxHostEndpointSlices)
	}
	return want, nil
}

// podIPs returns whether an address is the IP of one of the tenant's live
// host pods. It reads the host pods, not the tenant's pod statuses, which
// the tenant can write.
func (e *Syncer) podIPs() func(string) bool {
	pods, _ := e.hostPods.List(labels.Everything())
	ips := map[string]bool{}
	for _, p := range pods {
		if !HoldsItsIP(p) {
			continue
		}
		for _, ip := range p.Status.PodIPs {
			ips[ip.IP] = true
		}
	}
	return func(a string) bool { return ips[a] }
}

// HoldsItsIP reports whether a host pod still holds the IPs its status
// names: a finished or deleted pod's IP goes back to the host's pool, and may
// be another tenant's next.
func HoldsItsIP(p *corev1.Pod) bool {
	return p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}

// dedicatedPodCIDRs are the pod CIDRs of the tenant's dedicated nodes;
// none without the ConfigMap.
func (e *Syncer) dedicatedPodCIDRs() []netip.Prefix {
	if e.dedicated == nil {
		return nil
	}
	return e.dedicated()
}

// keys are the resync keys: every tenant Service without a selector (every
// tenant Service while the tenant has dedicated nodes), and the tenant
// Service of every host slice, so slices left from a Service deleted while
// the syncer was down are found.
func (e *Syncer) Keys() []string {
	var out []string
	all := len(e.dedicatedPodCIDRs()) > 0
	tenant, _ := e.tenantServices.List(labels.Everything())
	for _, svc := range tenant {
		if all || len(svc.Spec.Selector) == 0 {
			out = append(out, svc.Namespace+"/"+svc.Name)
		}
	}
	host, _ := e.hostSlices.List(labels.Everything())
	for _, s := range host {
		if ns, name := s.Labels[contract.LabelTenantNamespace], s.Labels[LabelTenantService]; ns != "" && name != "" {
			out = append(out, ns+"/"+name)
		}
	}
	return out
}

// Differs reports whether the host slice have needs an update to match want.
func Differs(have, want *discoveryv1.EndpointSlice) bool {
	return !maps.Equal(have.Labels, want.Labels) || !apiequality.Semantic.DeepEqual(have.Endpoints, want.Endpoints) ||
		!apiequality.Semantic.DeepEqual(have.Ports, want.Ports) || !apiequality.Semantic.DeepEqual(have.OwnerReferences, want.OwnerReferences) ||
		have.Annotations[contract.AnnotationTenantUID] != want.Annotations[contract.AnnotationTenantUID]
}

// workers is how many tenant Services' slices are synced at once.
const workers = 4

// Register makes the kind's queue, "endpointslices", keyed by tenant
// Service. It follows tenant Services and slices, host Services and
// slices, host pods (a host pod's new IP may be an endpoint, and a finished
// or deleted pod's IP may no longer be), and the dedicated nodes' pod
// CIDRs, which nest-manager writes to a host ConfigMap that dedicated
// watches alone (contract.DedicatedNodesConfigMap): new ranges change
// which endpoints every Service's host slices may name.
func Register(c *kinds.Context, dedicated informers.SharedInformerFactory) kinds.Registration {
	dedicatedName := contract.DedicatedNodesConfigMap(c.VirtualCluster)
	dedicatedConfigMaps := dedicated.Core().V1().ConfigMaps().Lister().ConfigMaps(c.HostNamespace)
	tenantServices := c.TenantInformers.Core().V1().Services()
	e := &Syncer{
		tr: Translator{VirtualCluster: c.VirtualCluster, HostNamespace: c.HostNamespace}, host: c.Host, recorder: c.Recorder,
		tenantServices: tenantServices.Lister(),
		tenantSlices:   c.TenantInformers.Discovery().V1().EndpointSlices().Lister(),
		hostServices:   c.HostInformers.Core().V1().Services().Lister().Services(c.HostNamespace),
		hostSlices:     c.HostInformers.Discovery().V1().EndpointSlices().Lister().EndpointSlices(c.HostNamespace),
		hostPods:       c.HostInformers.Core().V1().Pods().Lister().Pods(c.HostNamespace),
		dedicated: func() []netip.Prefix {
			cm, err := dedicatedConfigMaps.Get(dedicatedName)
			if err != nil {
				return nil
			}
			return contract.ParsePodCIDRs(cm.Data[contract.DedicatedPodCIDRsKey])
		},
	}
	q := c.NewQueue("endpointslices", workers, e.Sync, e.Keys)
	byService := func(svc *corev1.Service) { q.Add(svc.Namespace + "/" + svc.Name) }
	everyService := func(selectorless bool) {
		services, _ := e.tenantServices.List(labels.Everything())
		for _, svc := range services {
			if !selectorless || len(svc.Spec.Selector) == 0 {
				byService(svc)
			}
		}
	}
	_, _ = tenantServices.Informer().AddEventHandler(kinds.OnEvery(byService))
	_, _ = c.HostInformers.Core().V1().Services().Informer().AddEventHandler(kinds.OnEvery(func(svc *corev1.Service) { kinds.AddTenantKey(q, svc) }))
	_, _ = c.TenantInformers.Discovery().V1().EndpointSlices().Informer().AddEventHandler(kinds.OnEvery(func(s *discoveryv1.EndpointSlice) {
		if svc := s.Labels[discoveryv1.LabelServiceName]; svc != "" {
			q.Add(s.Namespace + "/" + svc)
		}
	}))
	_, _ = c.HostInformers.Discovery().V1().EndpointSlices().Informer().AddEventHandler(kinds.OnEvery(func(s *discoveryv1.EndpointSlice) {
		if ns, svc := s.Labels[contract.LabelTenantNamespace], s.Labels[LabelTenantService]; ns != "" && svc != "" {
			q.Add(ns + "/" + svc)
		}
	}))
	_, _ = c.HostInformers.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(old, obj any) {
			if was, is := old.(*corev1.Pod), obj.(*corev1.Pod); was.Status.PodIP != is.Status.PodIP || HoldsItsIP(was) != HoldsItsIP(is) {
				everyService(true)
			}
		},
		DeleteFunc: func(any) { everyService(true) },
	})
	_, _ = dedicated.Core().V1().ConfigMaps().Informer().AddEventHandler(kinds.OnEvery(func(*corev1.ConfigMap) { everyService(false) }))
	return kinds.Registration{Queues: []*kindsync.Syncer{q}}
}

// inPrefixes returns whether an address lies in one of prefixes.
func inPrefixes(prefixes []netip.Prefix) func(string) bool {
	return func(a string) bool {
		addr, err := netip.ParseAddr(a)
		if err != nil {
			return false
		}
		addr = addr.Unmap()
		return slices.ContainsFunc(prefixes, func(p netip.Prefix) bool { return p.Contains(addr) })
	}
}
