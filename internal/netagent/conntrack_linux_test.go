package netagent

import (
	"net"
	"net/netip"
	"slices"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// tcpFlow is an established TCP conntrack entry from src:port to
// dst:8080, replied to by replySrc (dst itself without DNAT).
func tcpFlow(src, dst, replySrc string, port uint16) *netlink.ConntrackFlow {
	return &netlink.ConntrackFlow{
		FamilyType: unix.AF_INET,
		Forward:    netlink.IPTuple{SrcIP: net.ParseIP(src).To4(), DstIP: net.ParseIP(dst).To4(), Protocol: unix.IPPROTO_TCP, SrcPort: port, DstPort: 8080},
		Reverse:    netlink.IPTuple{SrcIP: net.ParseIP(replySrc).To4(), DstIP: net.ParseIP(src).To4(), Protocol: unix.IPPROTO_TCP, SrcPort: 8080, DstPort: port},
		TimeOut:    300,
		ProtoInfo:  &netlink.ProtoInfoTCP{State: 3}, // ESTABLISHED
	}
}

func TestForgetConnectionsDeletesEveryEntryAPodTakesPartIn(t *testing.T) {
	requireRoot(t)
	ns := newNetnsFile(t, t.TempDir(), "node", "", "")
	var left []string
	err := inNetns(ns, func() error {
		for _, f := range []*netlink.ConntrackFlow{
			tcpFlow("10.1.0.5", "10.1.0.6", "10.1.0.6", 40000),   // the pod as client
			tcpFlow("10.1.0.7", "10.1.0.5", "10.1.0.5", 40001),   // the pod as server
			tcpFlow("10.1.0.7", "10.96.0.10", "10.1.0.5", 40002), // the pod behind a Service (DNAT)
			tcpFlow("10.1.0.7", "10.1.0.6", "10.1.0.6", 40003),   // not the pod's
		} {
			if err := netlink.ConntrackCreate(netlink.ConntrackTable, unix.AF_INET, f); err != nil {
				return err
			}
		}
		n, err := ForgetConnections([]netip.Addr{netip.MustParseAddr("10.1.0.5")})
		if err != nil {
			return err
		}
		if n != 3 {
			t.Errorf("ForgetConnections deleted %d entries, want the pod's 3", n)
		}
		flows, err := netlink.ConntrackTableList(netlink.ConntrackTable, unix.AF_INET)
		for _, f := range flows {
			left = append(left, f.Forward.SrcIP.String()+">"+f.Forward.DstIP.String())
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(left, []string{"10.1.0.7>10.1.0.6"}) {
		t.Errorf("entries left: %v, want only the one the pod takes no part in", left)
	}
}
