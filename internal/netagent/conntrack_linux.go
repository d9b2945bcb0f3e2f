package netagent

import (
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// ForgetConnections deletes the conntrack entries of the calling thread's
// network namespace in which any of ips is the source or destination, of
// the original or the reply direction (so before and after NAT), over
// IPv4 and IPv6, and returns how many. Like `conntrack -D`, it needs
// CAP_NET_ADMIN.
func ForgetConnections(ips []netip.Addr) (int, error) {
	f := involving(ips)
	total := 0
	for _, family := range []netlink.InetFamily{unix.AF_INET, unix.AF_INET6} {
		n, err := netlink.ConntrackDeleteFilters(netlink.ConntrackTable, family, f)
		total += int(n)
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// involving matches a conntrack flow in which any of its addresses takes
// part.
type involving []netip.Addr

// MatchConntrackFlow implements netlink.CustomConntrackFilter.
func (f involving) MatchConntrackFlow(flow *netlink.ConntrackFlow) bool {
	for _, ip := range []net.IP{flow.Forward.SrcIP, flow.Forward.DstIP, flow.Reverse.SrcIP, flow.Reverse.DstIP} {
		if a, ok := netip.AddrFromSlice(ip); ok {
			for _, want := range f {
				if a.Unmap() == want {
					return true
				}
			}
		}
	}
	return false
}
