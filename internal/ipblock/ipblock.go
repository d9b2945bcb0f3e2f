// Package ipblock is arithmetic on the address ranges of NetworkPolicy
// ipBlocks, shared by Nest's own isolation policies
// (controlplane.NetworkPoliciesFor) and the host copies of tenant policies
// (syncer/kinds/networkpolicy): which range covers which, and a set of
// allowed ranges minus denied ones as ipBlocks the API server accepts.
package ipblock

import (
	"cmp"
	"net/netip"
	"slices"

	networkingv1 "k8s.io/api/networking/v1"
)

// Covers reports whether outer contains every address of inner; an IPv4
// range never covers an IPv6 one, nor the other way round.
func Covers(outer, inner netip.Prefix) bool {
	return outer.Addr().Is4() == inner.Addr().Is4() && outer.Bits() <= inner.Bits() && outer.Contains(inner.Addr())
}

// Subtract returns allow without deny as ipBlocks: an allowed range inside
// a denied one is dropped, and denied ranges inside an allowed one become
// its exceptions (the API accepts only exceptions strictly inside the
// CIDR). Blocks and exceptions are masked, free of duplicates and of ranges
// inside others, and sorted, so the result is stable.
func Subtract(allow, deny []netip.Prefix) []networkingv1.IPBlock {
	deny = Minimal(deny)
	var out []networkingv1.IPBlock
	for _, a := range Minimal(allow) {
		if slices.ContainsFunc(deny, func(d netip.Prefix) bool { return Covers(d, a) }) {
			continue
		}
		b := networkingv1.IPBlock{CIDR: a.String()}
		for _, d := range deny {
			if Covers(a, d) {
				b.Except = append(b.Except, d.String())
			}
		}
		out = append(out, b)
	}
	return out
}

// Minimal masks the prefixes, sorts them by address and length, and drops
// those inside another.
func Minimal(ps []netip.Prefix) []netip.Prefix {
	masked := make([]netip.Prefix, 0, len(ps))
	for _, p := range ps {
		masked = append(masked, p.Masked())
	}
	slices.SortFunc(masked, func(a, b netip.Prefix) int {
		return cmp.Or(a.Addr().Compare(b.Addr()), cmp.Compare(a.Bits(), b.Bits()))
	})
	var out []netip.Prefix
	for _, p := range masked {
		if !slices.ContainsFunc(out, func(q netip.Prefix) bool { return Covers(q, p) }) {
			out = append(out, p)
		}
	}
	return out
}

// Peers are NetworkPolicy peers, one per block.
func Peers(blocks []networkingv1.IPBlock) []networkingv1.NetworkPolicyPeer {
	out := make([]networkingv1.NetworkPolicyPeer, 0, len(blocks))
	for i := range blocks {
		out = append(out, networkingv1.NetworkPolicyPeer{IPBlock: blocks[i].DeepCopy()})
	}
	return out
}
