package netagent

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/nestdev/nest/internal/pullproxy"
)

// PullGuard serves the node's pull proxy (package pullproxy) with the host's
// own addresses as its deny list: every node's addresses and pod CIDRs,
// every ServiceCIDR, and every Service's external IPs and LoadBalancer
// addresses, read from the API and kept current, plus Extra. It listens
// only once it has read them, so no pull is served unchecked.
type PullGuard struct {
	// Client reads nodes, ServiceCIDRs and Services.
	Client kubernetes.Interface
	// Address is host:port to listen on.
	Address string
	// Extra are further destinations to deny, such as private ranges the
	// host's pods use that no node's spec.podCIDRs names (CNIs with their
	// own IP address management).
	Extra []netip.Prefix
	// PlainHTTP are registries reached over HTTP (pullproxy.Config).
	PlainHTTP []string
}

// syncTimeout bounds the first read of the host's ranges: past it, Run
// fails (the agent restarts) rather than serve nothing without saying why.
const syncTimeout = 2 * time.Minute

// Run serves until ctx ends; it returns an error when it cannot read the
// host's nodes, ServiceCIDRs or Services within syncTimeout, or cannot
// listen.
func (g *PullGuard) Run(ctx context.Context) error {
	log := klog.FromContext(ctx).WithName("pull-proxy")
	proxy := pullproxy.New(pullproxy.Config{Deny: g.Extra, PlainHTTP: g.PlainHTTP, Log: log})
	factory := informers.NewSharedInformerFactory(g.Client, 0)
	nodes := factory.Core().V1().Nodes()
	cidrs := factory.Networking().V1().ServiceCIDRs()
	services := factory.Core().V1().Services()
	// Handlers run on each informer's goroutine: without the lock an older
	// snapshot could be stored after a newer one.
	var mu sync.Mutex
	update := func() {
		mu.Lock()
		defer mu.Unlock()
		deny := hostRanges(listAll[*corev1.Node](nodes.Informer().GetStore()), listAll[*networkingv1.ServiceCIDR](cidrs.Informer().GetStore()),
			listAll[*corev1.Service](services.Informer().GetStore()))
		proxy.SetDeny(slices.Concat(g.Extra, deny))
	}
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { update() },
		UpdateFunc: func(any, any) { update() },
		DeleteFunc: func(any) { update() },
	}
	for _, inf := range []cache.SharedIndexInformer{nodes.Informer(), cidrs.Informer(), services.Informer()} {
		if _, err := inf.AddEventHandler(handler); err != nil {
			return err
		}
	}
	factory.Start(ctx.Done())
	syncCtx, cancel := context.WithTimeout(ctx, syncTimeout)
	defer cancel()
	for typ, ok := range factory.WaitForCacheSync(syncCtx.Done()) {
		if !ok {
			return fmt.Errorf("pull proxy: could not read the host's %v within %s (RBAC list/watch, or the API serving it): %w", typ, syncTimeout, context.Cause(syncCtx))
		}
	}
	update()
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", g.Address)
	if err != nil {
		return fmt.Errorf("pull proxy: %w", err)
	}
	log.Info("serving", "address", g.Address)
	return pullproxy.Serve(ctx, ln, proxy)
}

func listAll[T any](s cache.Store) []T {
	var out []T
	for _, o := range s.List() {
		if t, ok := o.(T); ok {
			out = append(out, t)
		}
	}
	return out
}

// hostRanges are the host's own destinations: each node's addresses and
// pod CIDRs, each ServiceCIDR's CIDRs, and each Service's external IPs and
// LoadBalancer addresses, which the nodes' kube-proxies forward to host
// pods as they do ClusterIPs. Single addresses are single-address
// prefixes; entries that do not parse are left out.
func hostRanges(nodes []*corev1.Node, cidrs []*networkingv1.ServiceCIDR, services []*corev1.Service) []netip.Prefix {
	var out []netip.Prefix
	add := func(p netip.Prefix, err error) {
		if err == nil {
			out = append(out, p.Masked())
		}
	}
	addAddr := func(s string) {
		if addr, err := netip.ParseAddr(s); err == nil {
			add(addr.Unmap().Prefix(addr.Unmap().BitLen()))
		}
	}
	for _, n := range nodes {
		for _, a := range n.Status.Addresses {
			if a.Type != corev1.NodeInternalIP && a.Type != corev1.NodeExternalIP {
				continue
			}
			addAddr(a.Address)
		}
		for _, c := range n.Spec.PodCIDRs {
			add(netip.ParsePrefix(c))
		}
	}
	for _, sc := range cidrs {
		for _, c := range sc.Spec.CIDRs {
			add(netip.ParsePrefix(c))
		}
	}
	for _, svc := range services {
		for _, ip := range svc.Spec.ExternalIPs {
			addAddr(ip)
		}
		for _, in := range svc.Status.LoadBalancer.Ingress {
			addAddr(in.IP)
		}
	}
	slices.SortFunc(out, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
	return slices.Compact(out)
}
