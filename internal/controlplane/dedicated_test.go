package controlplane

import (
	"maps"
	"net/netip"
	"slices"
	"testing"

	"github.com/nestdev/nest/internal/syncer/contract"
)

// The ConfigMap nest-manager writes is what nest-syncer reads: the same
// name, and pod CIDRs and node IPs that parse back to the dedicated nodes'.
func TestDedicatedNodesConfigMapForRoundTrips(t *testing.T) {
	tests := []struct {
		name      string
		cidrs     []netip.Prefix
		ips       []netip.Addr
		wantCIDRs []netip.Prefix
		wantIPs   []netip.Addr
	}{
		{"no dedicated nodes", nil, nil, nil, nil},
		{"one", []netip.Prefix{netip.MustParsePrefix("10.244.2.0/24")}, []netip.Addr{netip.MustParseAddr("172.18.0.4")},
			[]netip.Prefix{netip.MustParsePrefix("10.244.2.0/24")}, []netip.Addr{netip.MustParseAddr("172.18.0.4")}},
		{"several, unmasked and repeated, both families",
			[]netip.Prefix{
				netip.MustParsePrefix("fd00:10:244:2::/64"), netip.MustParsePrefix("10.244.2.0/24"),
				netip.MustParsePrefix("10.244.1.9/24"), netip.MustParsePrefix("10.244.2.0/24"),
			},
			[]netip.Addr{netip.MustParseAddr("fc00:f853:ccd:e793::4"), netip.MustParseAddr("172.18.0.5"), netip.MustParseAddr("172.18.0.4"), netip.MustParseAddr("172.18.0.5")},
			[]netip.Prefix{netip.MustParsePrefix("10.244.1.0/24"), netip.MustParsePrefix("10.244.2.0/24"), netip.MustParsePrefix("fd00:10:244:2::/64")},
			[]netip.Addr{netip.MustParseAddr("172.18.0.4"), netip.MustParseAddr("172.18.0.5"), netip.MustParseAddr("fc00:f853:ccd:e793::4")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := vc(nil)
			cm := DedicatedNodesConfigMapFor(v, tt.cidrs, tt.ips)
			n := NamesOf(v)
			if cm.Name != contract.DedicatedNodesConfigMap(v.Name) || cm.Name != n.DedicatedNodesConfigMap() || cm.Namespace != v.Namespace {
				t.Errorf("ConfigMap %s/%s, want %s/%s, the one nest-syncer watches", cm.Namespace, cm.Name, v.Namespace, contract.DedicatedNodesConfigMap(v.Name))
			}
			if !slices.Contains(n.ConfigMaps(), cm.Name) {
				t.Errorf("Names.ConfigMaps() = %v lacks %s", n.ConfigMaps(), cm.Name)
			}
			if !maps.Equal(cm.Labels, n.Labels()) {
				t.Errorf("labels %v, want %v: the manager caches ConfigMaps by label", cm.Labels, n.Labels())
			}
			cidrs, ok := cm.Data[contract.DedicatedPodCIDRsKey]
			if !ok {
				t.Fatalf("data %v lacks %s", cm.Data, contract.DedicatedPodCIDRsKey)
			}
			if got := contract.ParsePodCIDRs(cidrs); !slices.Equal(got, tt.wantCIDRs) {
				t.Errorf("ParsePodCIDRs(%q) = %v, want %v", cidrs, got, tt.wantCIDRs)
			}
			ips, ok := cm.Data[contract.DedicatedNodeIPsKey]
			if !ok {
				t.Fatalf("data %v lacks %s", cm.Data, contract.DedicatedNodeIPsKey)
			}
			if got := contract.ParseNodeIPs(ips); !slices.Equal(got, tt.wantIPs) {
				t.Errorf("ParseNodeIPs(%q) = %v, want %v", ips, got, tt.wantIPs)
			}
		})
	}
}
