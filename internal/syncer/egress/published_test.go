package egress

import (
	"net/netip"
	"sync"
	"testing"
)

func addrs(ss ...string) []netip.Addr {
	out := make([]netip.Addr, 0, len(ss))
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

func TestPublishedAllowed(t *testing.T) {
	var p Published
	p.SetControlPlane(addrs("10.244.0.10", "10.244.1.11", "fd00::10", "127.0.0.1", "169.254.169.254"), []uint16{10250, 10270, 0})
	p.SetTenantPods(addrs("10.244.2.20", "::ffff:10.244.2.21", "fd00::20", "0.0.0.0", "::1"))
	p.SetDedicated(addrs("192.168.1.5", "fe80::1"), 10250, []netip.Prefix{
		netip.MustParsePrefix("10.245.7.0/24"),
		netip.MustParsePrefix("::ffff:10.246.0.0/112"), // 10.246.0.0/16
		netip.MustParsePrefix("fd00:1:2::/64"),
	})

	tests := []struct {
		name string
		addr string
		want bool
	}{
		{"control plane, kubelet port", "10.244.0.10:10250", true},
		{"other control-plane replica, member kubelet port", "10.244.1.11:10270", true},
		{"control plane IPv6", "[fd00::10]:10250", true},
		{"control plane, API server port", "10.244.0.10:6443", false},
		{"control plane, etcd", "10.244.0.10:2379", false},
		{"tenant pod on a kubelet port", "10.244.2.20:10250", true},
		{"control-plane port elsewhere", "10.0.0.1:10250", false},

		{"tenant pod, any port", "10.244.2.20:8443", true},
		{"tenant pod given mapped", "10.244.2.21:443", true},
		{"tenant pod asked mapped", "[::ffff:10.244.2.20]:443", true},
		{"tenant pod IPv6", "[fd00::20]:9443", true},
		{"tenant pod, port 0", "10.244.2.20:0", false},
		{"another pod", "10.244.2.99:443", false},

		{"dedicated node, kubelet port", "192.168.1.5:10250", true},
		{"dedicated node, other port", "192.168.1.5:22", false},
		{"dedicated node, control-plane member port", "192.168.1.5:10270", false},
		{"dedicated pod CIDR, any port", "10.245.7.200:8080", true},
		{"dedicated pod CIDR given mapped", "10.246.3.4:80", true},
		{"dedicated pod CIDR IPv6", "[fd00:1:2::99]:80", true},
		{"outside the pod CIDRs", "10.245.8.1:8080", false},

		{"loopback published as control plane", "127.0.0.1:10250", false},
		{"loopback elsewhere", "127.0.0.2:2379", false},
		{"loopback mapped", "[::ffff:127.0.0.1]:10250", false},
		{"IPv6 loopback published as a pod", "[::1]:443", false},
		{"link-local metadata published as control plane", "169.254.169.254:10250", false},
		{"link-local node", "[fe80::1]:10250", false},
		{"unspecified published as a pod", "0.0.0.0:443", false},
		{"multicast", "224.0.0.1:443", false},
		{"IPv6 multicast", "[ff02::1]:443", false},
		{"zoned tenant pod", "[fd00::20%eth0]:443", false},
		{"host API server", "10.96.0.1:443", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := p.Allowed(netip.MustParseAddrPort(tt.addr)); got != tt.want {
				t.Errorf("Allowed(%s) = %v, want %v", tt.addr, got, tt.want)
			}
		})
	}
}

func TestPublishedZeroAndInvalid(t *testing.T) {
	var p Published
	for _, a := range []netip.AddrPort{{}, netip.MustParseAddrPort("10.0.0.1:443")} {
		if p.Allowed(a) {
			t.Errorf("zero Published allows %v", a)
		}
	}
	// A kubelet port of 0 opens no node port.
	p.SetDedicated(addrs("192.168.1.5"), 0, nil)
	for _, port := range []uint16{0, 10250} {
		if a := netip.AddrPortFrom(netip.MustParseAddr("192.168.1.5"), port); p.Allowed(a) {
			t.Errorf("Allowed(%v) with no kubelet port", a)
		}
	}
	// Invalid prefixes (and mapped ones shorter than /96) admit nothing.
	p.SetDedicated(nil, 10250, []netip.Prefix{{}, netip.MustParsePrefix("::ffff:0.0.0.0/80")})
	if a := netip.MustParseAddrPort("10.0.0.1:80"); p.Allowed(a) {
		t.Errorf("Allowed(%v) through an invalid prefix", a)
	}
}

func TestPublishedUpdatesReplace(t *testing.T) {
	var p Published
	old, cur := netip.MustParseAddrPort("10.244.0.10:10250"), netip.MustParseAddrPort("10.244.0.11:10250")
	p.SetControlPlane(addrs("10.244.0.10"), []uint16{10250})
	p.SetControlPlane(addrs("10.244.0.11"), []uint16{10250})
	if p.Allowed(old) || !p.Allowed(cur) {
		t.Errorf("after replacing the control plane: Allowed(old) = %v, Allowed(new) = %v", p.Allowed(old), p.Allowed(cur))
	}
	p.SetControlPlane(addrs("10.244.0.11"), []uint16{10251})
	if p.Allowed(cur) {
		t.Error("a port the control plane no longer has is still allowed")
	}

	pod := netip.MustParseAddrPort("10.244.2.20:443")
	p.SetTenantPods(addrs("10.244.2.20"))
	p.SetTenantPods(nil)
	if p.Allowed(pod) {
		t.Error("a tenant pod that is gone is still allowed")
	}

	node, inCIDR := netip.MustParseAddrPort("192.168.1.5:10250"), netip.MustParseAddrPort("10.245.7.2:80")
	p.SetDedicated(addrs("192.168.1.5"), 10250, []netip.Prefix{netip.MustParsePrefix("10.245.7.0/24")})
	if !p.Allowed(node) || !p.Allowed(inCIDR) {
		t.Fatal("dedicated node or pod CIDR not allowed")
	}
	p.SetDedicated(nil, 10250, nil)
	if p.Allowed(node) || p.Allowed(inCIDR) {
		t.Error("a dedicated node that is gone, or its pod CIDR, is still allowed")
	}
	// The sets are copies: changing the caller's slice changes nothing.
	in := addrs("10.244.2.30")
	p.SetTenantPods(in)
	in[0] = netip.MustParseAddr("10.244.2.31")
	if !p.Allowed(netip.MustParseAddrPort("10.244.2.30:80")) || p.Allowed(netip.MustParseAddrPort("10.244.2.31:80")) {
		t.Error("Published kept the caller's slice")
	}
}

func TestPublishedConcurrent(t *testing.T) {
	var p Published
	var wg sync.WaitGroup
	a := netip.MustParseAddrPort("10.244.2.20:443")
	for i := range 8 {
		wg.Go(func() {
			for range 200 {
				if i%2 == 0 {
					p.SetTenantPods(addrs("10.244.2.20"))
					p.SetDedicated(addrs("192.168.1.5"), 10250, nil)
					p.SetControlPlane(addrs("10.244.0.10"), []uint16{10250})
				} else {
					p.Allowed(a)
				}
			}
		})
	}
	wg.Wait()
	if !p.Allowed(a) {
		t.Error("tenant pod not allowed after concurrent updates")
	}
}
