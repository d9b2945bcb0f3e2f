package netagent

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/nestdev/nest/internal/pullproxy"
)

// DefaultPullProxyAddress is where the pull proxy listens on every host
// node, in the node's network namespace: the address the node's containerd
// names as the server of every registry (certs.d/_default/hosts.toml).
const DefaultPullProxyAddress = "127.0.0.1:5015"

// PullGuard serves the node's pull proxy (package pullproxy) with the host's
// own addresses as its deny list: every node's addresses and pod CIDRs and
// every ServiceCIDR, read from the API and kept current, plus Extra. It
// listens only once it has read them, so no pull is served unchecked.
type PullGuard struct {
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

// Run serves until ctx ends; it returns an error when it cannot read the
// host's nodes or ServiceCIDRs or cannot listen.
func (g *PullGuard) Run(ctx context.Context) error {
	log := klog.FromContext(ctx).WithName("pull-proxy")
	proxy := pullproxy.New(pullproxy.Config{Deny: g.Extra, PlainHTTP: g.PlainHTTP, Log: log})
	factory := informers.NewSharedInformerFactory(g.Client, 0)
	nodes := factory.Core().V1().Nodes()
	cidrs := factory.Networking().V1().ServiceCIDRs()
	update := func() {
		deny := hostRanges(listAll[*corev1.Node](nodes.Informer().GetStore()), listAll[*networkingv1.ServiceCIDR](cidrs.Informer().GetStore()))
		proxy.SetDeny(slices.Concat(g.Extra, deny))
	}
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { update() },
		UpdateFunc: func(any, any) { update() },
		DeleteFunc: func(any) { update() },
	}
	for _, inf := range []cache.SharedIndexInformer{nodes.Informer(), cidrs.Informer()} {
		if _, err := inf.AddEventHandler(handler); err != nil {
			return err
		}
	}
	factory.Start(ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("pull proxy: read the host's %v: %w", typ, context.Cause(ctx))
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

// hostRanges are the host's own destinations: each node's addresses (as
// single-address prefixes) and pod CIDRs, and each ServiceCIDR's CIDRs.
// Entries that do not parse are left out.
func hostRanges(nodes []*corev1.Node, cidrs []*networkingv1.ServiceCIDR) []netip.Prefix {
	var out []netip.Prefix
	add := func(p netip.Prefix, err error) {
		if err == nil {
			out = append(out, p.Masked())
		}
	}
	for _, n := range nodes {
		for _, a := range n.Status.Addresses {
			if a.Type != corev1.NodeInternalIP && a.Type != corev1.NodeExternalIP {
				continue
			}
			if addr, err := netip.ParseAddr(a.Address); err == nil {
				add(addr.Unmap().Prefix(addr.Unmap().BitLen()))
			}
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
	slices.SortFunc(out, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
	return slices.Compact(out)
}
