package devcluster

import (
	"net/netip"
	"strings"
	"testing"
)

// Tests, docs and scripts rely on the default cluster's addresses and names:
// the Addressing of the default cluster must keep them.
func TestDefaultAddressingKeepsTodaysValues(t *testing.T) {
	a := DefaultAddressing()
	got := map[string]string{
		"node subnet":     a.NodeSubnet.String(),
		"cluster CIDR":    a.ClusterCIDR.String(),
		"service CIDR":    a.ServiceCIDR.String(),
		"bridge IP":       a.BridgeIP().String(),
		"DNS IP":          a.DNSIP().String(),
		"bridge":          a.Bridge,
		"netns prefix":    a.NetnsPrefix,
		"veth prefix":     a.HostVethPrefix,
		"cgroup parent":   a.CgroupParent,
		"state directory": a.DefaultStateDir(),
	}
	want := map[string]string{
		"node subnet":     "198.51.100.0/24",
		"cluster CIDR":    "10.244.0.0/16",
		"service CIDR":    "10.96.0.0/16",
		"bridge IP":       "198.51.100.1",
		"DNS IP":          "10.96.0.10",
		"bridge":          "nestdev0",
		"netns prefix":    "nestdev-",
		"veth prefix":     "nestdev-v",
		"cgroup parent":   "nest-dev",
		"state directory": "/var/lib/nest/dev",
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("default %s = %q, want %q", k, got[k], w)
		}
	}
	// The exported constants are the default cluster's.
	if NodeSubnet != want["node subnet"] || ClusterCIDR != want["cluster CIDR"] || ServiceCIDR != want["service CIDR"] ||
		BridgeIP() != a.BridgeIP() || DNSIP() != a.DNSIP() || DefaultStateDir != want["state directory"] {
		t.Error("the exported constants differ from the default cluster's addressing")
	}
	if a.Cluster != "" || a.Slot != 0 {
		t.Errorf("default cluster = %q slot %d", a.Cluster, a.Slot)
	}
	if got, err := AddressingFor("", 0); err != nil || got != a {
		t.Errorf("AddressingFor(\"\", 0) = %+v, %v", got, err)
	}
}

func TestNamedAddressing(t *testing.T) {
	a, err := AddressingFor("gpu", 1)
	if err != nil {
		t.Fatal(err)
	}
	nodes, err := a.Topology("/s", 2)
	if err != nil {
		t.Fatal(err)
	}
	w := nodes[1]
	if w.IP.String() != "198.18.1.11" || w.PodCIDR.String() != "10.245.1.0/24" || w.Netns != "nestgpu-1" ||
		w.HostVeth != "nestgpu-v1" || w.CgroupRoot() != "/nest-dev-gpu/nest-worker" || w.Net != a {
		t.Errorf("worker = %s %s %s %s %s", w.IP, w.PodCIDR, w.Netns, w.HostVeth, w.CgroupRoot())
	}
	if a.Bridge != "nestgpu0" || a.BridgeIP().String() != "198.18.1.1" || a.DNSIP().String() != "10.97.0.10" ||
		a.ServiceCIDR.String() != "10.97.0.0/16" || a.DefaultStateDir() != "/var/lib/nest/dev-gpu" {
		t.Errorf("named addressing = %+v, bridge IP %s, DNS IP %s", a, a.BridgeIP(), a.DNSIP())
	}
}

// No range of a named cluster overlaps one of the default cluster or of a
// cluster in another slot, and no name it makes is one of theirs.
func TestNamedAddressingDoesNotOverlap(t *testing.T) {
	all := []Addressing{DefaultAddressing()}
	for slot := 1; slot <= MaxSlot; slot++ {
		a, err := AddressingFor("c"+string(rune('0'+slot)), slot)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, a)
	}
	ranges := func(a Addressing) []netip.Prefix { return []netip.Prefix{a.NodeSubnet, a.ClusterCIDR, a.ServiceCIDR} }
	for i, a := range all {
		for _, r := range ranges(a) {
			if !r.Addr().Is4() || r.Bits() < 8 {
				t.Errorf("slot %d: bad range %s", a.Slot, r)
			}
		}
		for _, b := range all[i+1:] {
			for _, ra := range ranges(a) {
				for _, rb := range ranges(b) {
					if ra.Overlaps(rb) {
						t.Errorf("slot %d's %s overlaps slot %d's %s", a.Slot, ra, b.Slot, rb)
					}
				}
			}
			for _, pair := range [][2]string{
				{a.Bridge, b.Bridge}, {a.CgroupParent, b.CgroupParent}, {a.ForwardTable, b.ForwardTable},
			} {
				if pair[0] == pair[1] {
					t.Errorf("slots %d and %d share the name %q", a.Slot, b.Slot, pair[0])
				}
			}
			// Teardown finds a cluster's namespaces and veths by prefix.
			for _, p := range [][2]string{{a.NetnsPrefix, b.NetnsPrefix}, {a.HostVethPrefix, b.HostVethPrefix}} {
				if strings.HasPrefix(p[0], p[1]) || strings.HasPrefix(p[1], p[0]) {
					t.Errorf("prefixes %q and %q of slots %d and %d overlap", p[0], p[1], a.Slot, b.Slot)
				}
			}
		}
		if a.Cluster != "" && !namedNodeRange.Contains(a.NodeSubnet.Addr()) {
			t.Errorf("slot %d's node subnet %s is outside %s, which peers route", a.Slot, a.NodeSubnet, namedNodeRange)
		}
		for _, p := range a.peerNodeRanges() {
			if p.Overlaps(a.NodeSubnet) && p.Bits() >= a.NodeSubnet.Bits() {
				t.Errorf("slot %d routes its own subnet %s to peers as %s", a.Slot, a.NodeSubnet, p)
			}
		}
	}
	// The longest name and the highest node index still fit IFNAMSIZ.
	a, err := AddressingFor("abcdef", MaxSlot)
	if err != nil {
		t.Fatal(err)
	}
	nodes, err := a.Topology("/s", MaxNodes)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{a.Bridge, nodes[len(nodes)-1].HostVeth} {
		if len(name) > 15 {
			t.Errorf("interface name %q is longer than 15 characters", name)
		}
	}
}

func TestAddressingRefusesBadNamesAndSlots(t *testing.T) {
	for _, c := range []struct {
		cluster string
		slot    int
		flag    string
	}{
		{"GPU", 1, "--cluster"},
		{"abcdefg", 1, "--cluster"},
		{"a-b", 1, "--cluster"},
		{"a_b", 1, "--cluster"},
		{"gpü", 1, "--cluster"},
		{"dev", 1, "--cluster"},
		{"gpu", 0, "--slot"},
		{"gpu", MaxSlot + 1, "--slot"},
		{"gpu", -1, "--slot"},
		{"", 1, "--slot"},
	} {
		if _, err := AddressingFor(c.cluster, c.slot); err == nil || !strings.Contains(err.Error(), c.flag) {
			t.Errorf("AddressingFor(%q, %d) error = %v, want one naming %s", c.cluster, c.slot, err, c.flag)
		}
	}
}

func TestNamedStateDirIgnoresTheDefaultClustersVariable(t *testing.T) {
	t.Setenv(StateDirEnv, "/from/env")
	a, err := AddressingFor("gpu", 2)
	if err != nil {
		t.Fatal(err)
	}
	if got := a.StateDir(""); got != "/var/lib/nest/dev-gpu" {
		t.Errorf("named state dir = %s", got)
	}
	if got := a.StateDir("/flag"); got != "/flag" {
		t.Errorf("named state dir with the flag = %s", got)
	}
	if got := DefaultAddressing().StateDir(""); got != "/from/env" {
		t.Errorf("default state dir = %s", got)
	}
}

// The forward rules of one cluster name only its own bridge as the way in,
// so they never decide about another cluster's traffic.
func TestForwardRules(t *testing.T) {
	a, err := AddressingFor("gpu", 3)
	if err != nil {
		t.Fatal(err)
	}
	rules := forwardRules(a)
	for _, want := range []string{"table inet nest-dev-gpu", `iifname "nestgpu0" oifname "nestgpu0" accept`, "198.51.100.0/24", `iifname "nestgpu0" drop`} {
		if !strings.Contains(rules, want) {
			t.Errorf("forward rules lack %q:\n%s", want, rules)
		}
	}
	if strings.Count(rules, "iifname") != strings.Count(rules, `iifname "nestgpu0"`) {
		t.Errorf("a rule matches another bridge's traffic:\n%s", rules)
	}
	def := forwardRules(DefaultAddressing())
	if !strings.Contains(def, "198.18.0.0/20") || strings.Contains(def, "{ 198.51.100.0/24") {
		t.Errorf("default cluster's forward rules:\n%s", def)
	}
}
