package controlplane

import (
	"maps"
	"net/netip"
	"slices"
	"testing"

	"github.com/nestdev/nest/internal/syncer/contract"
)

// The ConfigMap nest-manager writes is what nest-syncer reads: the same
// name, and pod CIDRs that parse back to the dedicated nodes' ranges.
func TestDedicatedNodesConfigMapForRoundTrips(t *testing.T) {
	tests := []struct {
		name  string
		cidrs []netip.Prefix
		want  []netip.Prefix
	}{
		{"no dedicated nodes", nil, nil},
		{"one", []netip.Prefix{netip.MustParsePrefix("10.244.2.0/24")}, []netip.Prefix{netip.MustParsePrefix("10.244.2.0/24")}},
		{"several, unmasked and repeated, both families",
			[]netip.Prefix{
				netip.MustParsePrefix("fd00:10:244:2::/64"), netip.MustParsePrefix("10.244.2.0/24"),
				netip.MustParsePrefix("10.244.1.9/24"), netip.MustParsePrefix("10.244.2.0/24"),
			},
			[]netip.Prefix{netip.MustParsePrefix("10.244.1.0/24"), netip.MustParsePrefix("10.244.2.0/24"), netip.MustParsePrefix("fd00:10:244:2::/64")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := vc(nil)
			cm := DedicatedNodesConfigMapFor(v, tt.cidrs)
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
			data, ok := cm.Data[contract.DedicatedPodCIDRsKey]
			if !ok {
				t.Fatalf("data %v lacks %s", cm.Data, contract.DedicatedPodCIDRsKey)
			}
			if got := contract.ParsePodCIDRs(data); !slices.Equal(got, tt.want) {
				t.Errorf("ParsePodCIDRs(%q) = %v, want %v", data, got, tt.want)
			}
		})
	}
}
