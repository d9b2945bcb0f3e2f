package syncer

import (
	"net/netip"
	"slices"
)

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
