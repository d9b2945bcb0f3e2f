package netagent

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// FindNetns returns the one network namespace file under dir (such as
// /var/run/netns/cni-...) with an interface holding ip. It fails when none
// does (the pod's sandbox is not set up yet, or is gone) and when more than
// one does: a namespace the agent cannot tie to one pod is never set up.
func FindNetns(dir string, ip netip.Addr) (string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", fmt.Errorf("list network namespaces: %w", err)
	}
	var found []string
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		if holds(p, ip) {
			found = append(found, p)
		}
	}
	switch len(found) {
	case 0:
		return "", fmt.Errorf("no network namespace under %s holds %s yet", dir, ip)
	case 1:
		return found[0], nil
	}
	return "", fmt.Errorf("%d network namespaces under %s hold %s (%v): refusing to choose", len(found), dir, ip, found)
}

// holds reports whether the network namespace at path has ip on one of its
// interfaces; a file that is not a network namespace holds nothing.
func holds(path string, ip netip.Addr) bool {
	ns, err := netns.GetFromPath(path)
	if err != nil {
		return false
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return false
	}
	defer h.Close()
	family := netlink.FAMILY_V4
	if ip.Is6() {
		family = netlink.FAMILY_V6
	}
	addrs, err := h.AddrList(nil, family)
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if got, ok := netip.AddrFromSlice(a.IP); ok && got.Unmap() == ip {
			return true
		}
	}
	return false
}
