package egress

import (
	"net/netip"
	"slices"
	"sync"
)

// Published is the set of destinations the tenant API server may reach
// through Proxy: what nest-syncer itself published, never what the tenant
// wrote. The syncer replaces each part with its Set method as it learns
// it; Allowed answers for the parts as they are at that moment. The zero
// value allows nothing and is ready to use. It is safe for concurrent use.
//
// Loopback, link-local, unspecified and multicast addresses are refused
// whatever the sets hold (alwaysRefused), as are addresses with an IPv6
// zone and port 0. IPv4-mapped IPv6 addresses (::ffff:a.b.c.d) are taken
// as the IPv4 address they map, both in the sets and in Allowed.
type Published struct {
	mu sync.RWMutex

	controlPlane      map[netip.Addr]bool
	controlPlanePorts map[uint16]bool
	tenantPods        map[netip.Addr]bool
	dedicatedNodes    map[netip.Addr]bool
	kubeletPort       uint16
	podCIDRs          []netip.Prefix
}

// SetControlPlane replaces the control-plane destinations: the IPs of the
// VirtualCluster's control-plane pods (every replica's, since the API
// server reaches the virtual node of whichever replica's syncer leads),
// reachable on ports only: the kubelet API ports nest-syncer serves for
// the virtual node and the member nodes. Invalid and always-refused
// addresses are dropped.
func (p *Published) SetControlPlane(addrs []netip.Addr, ports []uint16) {
	a, ps := addrSet(addrs), make(map[uint16]bool, len(ports))
	for _, port := range ports {
		if port != 0 {
			ps[port] = true
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.controlPlane, p.controlPlanePorts = a, ps
}

// SetTenantPods replaces the tenant's host pod IPs, reachable on any
// port: the tenant's pods, their webhooks and aggregated API servers, as
// the host runs them. Invalid and always-refused addresses are dropped.
func (p *Published) SetTenantPods(addrs []netip.Addr) {
	a := addrSet(addrs)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.tenantPods = a
}

// SetDedicated replaces the dedicated nodes' destinations: the node IPs
// of the host nodes assigned to the tenant, reachable on kubeletPort only
// (0 allows none), and every address in podCIDRs (the pod ranges
// nest-manager assigned those nodes, contract.ParsePodCIDRs) on any port.
// Invalid addresses and prefixes are dropped; prefixes are masked.
func (p *Published) SetDedicated(nodeIPs []netip.Addr, kubeletPort uint16, podCIDRs []netip.Prefix) {
	a := addrSet(nodeIPs)
	cidrs := make([]netip.Prefix, 0, len(podCIDRs))
	for _, c := range podCIDRs {
		if c = unmapPrefix(c); c.IsValid() {
			cidrs = append(cidrs, c.Masked())
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dedicatedNodes, p.kubeletPort, p.podCIDRs = a, kubeletPort, slices.Clip(cidrs)
}

// Allowed reports whether the tenant API server may dial addr: a
// control-plane pod IP on one of its published ports, a tenant host pod
// IP on any port, a dedicated node IP on its kubelet port, or an address
// in a dedicated node's pod CIDR on any port; never an always-refused
// address, an address with an IPv6 zone, or port 0.
func (p *Published) Allowed(addr netip.AddrPort) bool {
	a, port := addr.Addr().Unmap(), addr.Port()
	if !addr.IsValid() || port == 0 || a.Zone() != "" || alwaysRefused(a) {
		return false
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	switch {
	case p.tenantPods[a]:
		return true
	case p.controlPlane[a] && p.controlPlanePorts[port]:
		return true
	case p.dedicatedNodes[a] && p.kubeletPort != 0 && port == p.kubeletPort:
		return true
	}
	for _, c := range p.podCIDRs {
		if c.Contains(a) {
			return true
		}
	}
	return false
}

// alwaysRefused are the addresses no published set may open:
//   - loopback: the control-plane pod's own loopback holds etcd, the API
//     server itself, nest-syncer's metrics and health, and CoreDNS' health,
//     none of which the tenant may reach through its API server;
//   - link-local: the cloud metadata service (169.254.169.254) and
//     node-local services such as NodeLocal DNSCache live there, and they
//     answer for the host node, not the tenant (metadata services outside
//     link-local, such as fd00:ec2::254, are refused as everything
//     unpublished is);
//   - unspecified (0.0.0.0, ::): dialling it reaches the local host;
//   - multicast: never a TCP destination.
func alwaysRefused(a netip.Addr) bool {
	return !a.IsValid() || a.IsLoopback() || a.IsLinkLocalUnicast() || a.IsUnspecified() ||
		a.IsMulticast() || a.IsLinkLocalMulticast() || a.IsInterfaceLocalMulticast()
}

// addrSet is addrs unmapped, without invalid, zoned and always-refused
// addresses.
func addrSet(addrs []netip.Addr) map[netip.Addr]bool {
	s := make(map[netip.Addr]bool, len(addrs))
	for _, a := range addrs {
		if a = a.Unmap(); a.Zone() == "" && !alwaysRefused(a) {
			s[a] = true
		}
	}
	return s
}

// unmapPrefix is p with an IPv4-mapped IPv6 address (::ffff:10.0.0.0/104)
// as the IPv4 prefix it maps (10.0.0.0/8), so it contains the unmapped
// addresses Allowed checks. A mapped prefix shorter than /96 is invalid.
func unmapPrefix(p netip.Prefix) netip.Prefix {
	if !p.IsValid() || !p.Addr().Is4In6() {
		return p
	}
	if p.Bits() < 96 {
		return netip.Prefix{}
	}
	return netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
}
