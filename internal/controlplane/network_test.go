package controlplane

import (
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/ipblock"
	"github.com/nestdev/nest/internal/syncer/kinds/networkpolicy"
)

// devNetwork is the local host cluster's addressing.
var devNetwork = HostNetwork{
	PodCIDRs:     []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")},
	ServiceCIDRs: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/16")},
	NodeCIDRs:    []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")},
}

// rules renders a policy's rules one a line, such as
// "ingress from pods(a=b) on TCP/6443", so tests state them exactly.
func rules(p *networkingv1.NetworkPolicy) []string {
	peers := func(ps []networkingv1.NetworkPolicyPeer) string {
		var out []string
		for _, peer := range ps {
			switch {
			case peer.IPBlock != nil:
				s := peer.IPBlock.CIDR
				if len(peer.IPBlock.Except) > 0 {
					s += " except " + strings.Join(peer.IPBlock.Except, ",")
				}
				out = append(out, s)
			case peer.NamespaceSelector != nil:
				out = append(out, "namespace("+labels.Set(peer.NamespaceSelector.MatchLabels).String()+")")
			case peer.PodSelector != nil:
				out = append(out, "pods("+labels.Set(peer.PodSelector.MatchLabels).String()+")")
			}
		}
		if len(out) == 0 {
			return "anywhere"
		}
		return strings.Join(out, " | ")
	}
	ports := func(ps []networkingv1.NetworkPolicyPort) string {
		if len(ps) == 0 {
			return "all ports"
		}
		var out []string
		for _, p := range ps {
			r := fmt.Sprintf("%s/%s", *p.Protocol, p.Port.String())
			if p.EndPort != nil {
				r += fmt.Sprintf("-%d", *p.EndPort)
			}
			out = append(out, r)
		}
		return strings.Join(out, ",")
	}
	selector, err := metav1.LabelSelectorAsSelector(&p.Spec.PodSelector)
	if err != nil {
		return []string{err.Error()}
	}
	out := []string{fmt.Sprintf("select pods(%s) types %v", selector, p.Spec.PolicyTypes)}
	for _, r := range p.Spec.Ingress {
		out = append(out, "ingress from "+peers(r.From)+" on "+ports(r.Ports))
	}
	for _, r := range p.Spec.Egress {
		out = append(out, "egress to "+peers(r.To)+" on "+ports(r.Ports))
	}
	return out
}

func TestNetworkPoliciesFor(t *testing.T) {
	const (
		tenantPods   = "pods(nest.dev/tenant-of=alpha)"
		controlPlane = "pods(app.kubernetes.io/component=control-plane,app.kubernetes.io/managed-by=nest,nest.dev/virtualcluster=alpha)"
		// The API server, DNS, and the node ports nest-syncer serves.
		cpPorts = "TCP/6443,UDP/1053,TCP/1053,TCP/30000-32767"
		private = "10.0.0.0/8,100.64.0.0/10,169.254.0.0/16,172.16.0.0/12,192.168.0.0/16"
	)
	// What tenant pods always have: their control plane.
	tenantAlways := []string{
		"select " + tenantPods + " types [Ingress Egress]",
		"ingress from " + controlPlane + " on all ports",
		"egress to " + controlPlane + " on " + cpPorts,
	}
	// What they have while no tenant NetworkPolicy isolates them.
	openIngress := []string{
		"select pods(!nest.dev/ingress-isolated,nest.dev/tenant-of=alpha) types [Ingress]",
		"ingress from " + tenantPods + " on all ports",
	}
	egressHead := []string{
		"select pods(!nest.dev/egress-isolated,nest.dev/tenant-of=alpha) types [Egress]",
		"egress to " + tenantPods + " on all ports",
	}
	cpHead := []string{
		"select " + controlPlane + " types [Ingress]",
		"ingress from " + tenantPods + " on " + cpPorts,
		// The other replicas' etcd members and helpers; tenant pods never.
		"ingress from " + controlPlane + " on TCP/2379,TCP/2380,TCP/10250,TCP/10270-10277",
		"ingress from namespace(kubernetes.io/metadata.name=nest-system) on TCP/6443",
	}
	nodes := "ingress from 198.51.100.0/24 on TCP/6443,TCP/10257,TCP/10259"
	clusterIP := func(v *nestv1.VirtualCluster) { v.Spec.ControlPlane.Service.Type = "ClusterIP" }
	tests := []struct {
		name         string
		mutate       func(*nestv1.VirtualCluster)
		host         HostNetwork
		egress, cp   []string
		errorMention string
	}{{
		name: "NodePort on the local host cluster",
		host: devNetwork,
		egress: append(slices.Clone(egressHead),
			// 10.244/16 and 10.96/16 lie in 10/8.
			"egress to 0.0.0.0/0 except "+private+",198.51.100.0/24 on all ports"),
		cp: append(slices.Clone(cpHead), nodes, "ingress from 0.0.0.0/0 except 10.244.0.0/16 on TCP/6443"),
	}, {
		name:   "ClusterIP: nothing from outside",
		mutate: clusterIP,
		host:   devNetwork,
		egress: append(slices.Clone(egressHead), "egress to 0.0.0.0/0 except "+private+",198.51.100.0/24 on all ports"),
		cp:     append(slices.Clone(cpHead), nodes),
	}, {
		name: "egress CIDRs minus the host ranges",
		mutate: func(v *nestv1.VirtualCluster) {
			clusterIP(v)
			v.Spec.Network.EgressCIDRs = []string{"203.0.113.0/24", "198.51.0.0/16", "10.244.1.0/24", "10.0.0.0/8"}
		},
		host: devNetwork,
		egress: append(slices.Clone(egressHead),
			// 10.244.1.0/24 is host pods: dropped. Sorted by address.
			"egress to 10.0.0.0/8 except 10.96.0.0/16,10.244.0.0/16 | 198.51.0.0/16 except 198.51.100.0/24 | 203.0.113.0/24 on all ports"),
		cp: append(slices.Clone(cpHead), nodes),
	}, {
		name: "egress CIDRs all inside the host: no rule, which would allow everything",
		mutate: func(v *nestv1.VirtualCluster) {
			clusterIP(v)
			v.Spec.Network.EgressCIDRs = []string{"10.244.3.0/24", "198.51.100.7/32"}
		},
		host:   devNetwork,
		egress: egressHead,
		cp:     append(slices.Clone(cpHead), nodes),
	}, {
		name: "dual-stack host: IPv6 too",
		host: HostNetwork{
			PodCIDRs:  []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:10:244::/56")},
			NodeCIDRs: []netip.Prefix{netip.MustParsePrefix("2001:db8:1::/64")},
		},
		egress: append(slices.Clone(egressHead),
			"egress to 0.0.0.0/0 except "+private+" | ::/0 except 2001:db8:1::/64,fc00::/7,fe80::/10 on all ports"),
		cp: append(slices.Clone(cpHead), "ingress from 2001:db8:1::/64 on TCP/6443,TCP/10257,TCP/10259",
			"ingress from 0.0.0.0/0 except 10.244.0.0/16 | ::/0 except fd00:10:244::/56 on TCP/6443"),
	}, {
		name:   "no host ranges given: private ranges still out, no node rule",
		mutate: clusterIP,
		egress: append(slices.Clone(egressHead), "egress to 0.0.0.0/0 except "+private+" on all ports"),
		cp:     cpHead,
	}, {
		name:         "bad egress CIDR",
		mutate:       func(v *nestv1.VirtualCluster) { v.Spec.Network.EgressCIDRs = []string{"203.0.113.0"} },
		errorMention: "spec.network.egressCIDRs[0]",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			policies, err := NetworkPoliciesFor(vc(tt.mutate), Options{HostNetwork: tt.host, ManagerNamespace: "nest-system"})
			if tt.errorMention != "" {
				if err == nil || !strings.Contains(err.Error(), tt.errorMention) {
					t.Fatalf("error %v, want one naming %s", err, tt.errorMention)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, p := range policies {
				got = append(got, p.Name)
				if p.Namespace != "tenant-a" || p.Labels[LabelVirtualCluster] != "alpha" {
					t.Errorf("%s: namespace %s labels %v", p.Name, p.Namespace, p.Labels)
				}
				checkExcepts(t, p)
			}
			if !slices.Equal(got, names.NetworkPolicies()) {
				t.Fatalf("policies %v, want %v", got, names.NetworkPolicies())
			}
			for i, want := range [][]string{tenantAlways, openIngress, tt.egress, tt.cp, {"select pods() types [Ingress]"}} {
				if got := rules(policies[i]); !slices.Equal(got, want) {
					t.Errorf("%s:\n got  %s\n want %s", policies[i].Name, strings.Join(got, "\n      "), strings.Join(want, "\n      "))
				}
			}
		})
	}
}

// checkExcepts fails when an exception is not strictly inside its block,
// which the API server refuses.
func checkExcepts(t *testing.T, p *networkingv1.NetworkPolicy) {
	t.Helper()
	var peers []networkingv1.NetworkPolicyPeer
	for _, r := range p.Spec.Ingress {
		peers = append(peers, r.From...)
	}
	for _, r := range p.Spec.Egress {
		peers = append(peers, r.To...)
	}
	for _, peer := range peers {
		if peer.IPBlock == nil {
			continue
		}
		block := netip.MustParsePrefix(peer.IPBlock.CIDR)
		for _, e := range peer.IPBlock.Except {
			ex := netip.MustParsePrefix(e)
			if !ipblock.Covers(block, ex) || ex.Bits() <= block.Bits() {
				t.Errorf("%s: except %s is not strictly inside %s", p.Name, e, block)
			}
		}
	}
}

// Pods on dedicated nodes count as the virtual cluster's own: every rule
// that names its pods names their subnets too, and nothing else changes.
func TestNetworkPoliciesWithDedicatedNodes(t *testing.T) {
	o := Options{HostNetwork: devNetwork, ManagerNamespace: "nest-system"}
	plain, err := NetworkPoliciesFor(vc(nil), o)
	if err != nil {
		t.Fatal(err)
	}
	dedicated := []netip.Prefix{netip.MustParsePrefix("10.244.2.0/24"), netip.MustParsePrefix("10.244.1.0/24")}
	with, err := NetworkPoliciesWith(vc(nil), o, dedicated)
	if err != nil {
		t.Fatal(err)
	}
	const tenantPods = "pods(nest.dev/tenant-of=alpha)"
	widened := 0
	for i := range plain {
		before, after := rules(plain[i]), rules(with[i])
		if len(before) != len(after) {
			t.Fatalf("%s: %d rules, then %d", plain[i].Name, len(before), len(after))
		}
		for j := range before {
			want := before[j]
			if !strings.HasPrefix(want, "select ") && strings.Contains(want, tenantPods) {
				want = strings.Replace(want, tenantPods, tenantPods+" | 10.244.1.0/24 | 10.244.2.0/24", 1)
				widened++
			}
			if after[j] != want {
				t.Errorf("%s rule %d:\n got  %s\n want %s", plain[i].Name, j, after[j], want)
			}
		}
		checkExcepts(t, with[i])
	}
	// Tenant ingress and egress, and the control plane's API and DNS ingress.
	if widened != 3 {
		t.Errorf("%d rules name the tenant's pods, want 3", widened)
	}
}

func TestNetworkPoliciesWithMemberGrantsAdmitMemberTrafficToTheViewsAndNodePorts(t *testing.T) {
	o := Options{HostNetwork: devNetwork, ManagerNamespace: "nest-system"}
	plain, err := NetworkPoliciesFor(vc(nil), o)
	if err != nil {
		t.Fatal(err)
	}
	granted := vc(nil)
	granted.Spec.Members = []nestv1.MemberGrant{{Name: "gpu"}}
	with, err := NetworkPoliciesFor(granted, o)
	if err != nil {
		t.Fatal(err)
	}
	const cp = 3 // the control-plane policy, in Names.NetworkPolicies' order
	before, after := rules(plain[cp]), rules(with[cp])
	if len(after) != len(before)+1 || !slices.Equal(after[:len(before)], before) {
		t.Fatalf("control-plane rules with a grant:\n%s\nwant the rules without one plus one", strings.Join(after, "\n"))
	}
	want := "ingress from 0.0.0.0/0 except 10.244.0.0/16 on UDP/1060-1067,TCP/1060-1067,TCP/10280-10287,TCP/30000-32767"
	if got := after[len(after)-1]; got != want {
		t.Errorf("member rule\n got  %s\n want %s", got, want)
	}
	for i := range plain {
		if i != cp && !slices.Equal(rules(plain[i]), rules(with[i])) {
			t.Errorf("%s changed with a grant", plain[i].Name)
		}
	}
}

// nest-syncer cuts tenant ipBlocks with the facts the base policies are
// made of: the egress blocks of <vc>-tenant-egress, and the host's pod
// ranges, which those blocks leave out and where the tenant's pods have
// their addresses. Both reach it through its flags, from the one
// HostNetwork nest-manager holds; if either stopped coming, or came from
// elsewhere, a tenant's "from anywhere" would stop meaning its own pods.
func TestTheSyncerCutsIPBlocksWithTheBasePoliciesRanges(t *testing.T) {
	host := devNetwork
	host.PodCIDRs = append(slices.Clone(host.PodCIDRs), netip.MustParsePrefix("fd00:10:244::/56"))
	o := Options{HostNetwork: host, ManagerNamespace: "nest-system"}
	got := syncerFlags(t, vc(nil), o)
	if !slices.Equal(got.HostPodCIDRs, host.PodCIDRs) {
		t.Errorf("the syncer's pod CIDRs %v, want the manager's %v", got.HostPodCIDRs, host.PodCIDRs)
	}
	policies, err := NetworkPoliciesFor(vc(nil), o)
	if err != nil {
		t.Fatal(err)
	}
	const openEgress = 2 // in Names.NetworkPolicies' order
	var base []networkingv1.IPBlock
	for _, r := range policies[openEgress].Spec.Egress {
		for _, peer := range r.To {
			if peer.IPBlock != nil {
				base = append(base, *peer.IPBlock)
			}
		}
	}
	if !reflect.DeepEqual(got.EgressBlocks, base) {
		t.Errorf("the syncer's egress blocks %v, want the base policy's %v", got.EgressBlocks, base)
	}
	for _, pods := range got.HostPodCIDRs {
		for _, b := range got.EgressBlocks {
			outer := netip.MustParsePrefix(b.CIDR)
			if outer.Overlaps(pods) && !slices.ContainsFunc(b.Except, func(e string) bool { return ipblock.Covers(netip.MustParsePrefix(e), pods) }) {
				t.Errorf("egress block %v reaches the pod range %s", b, pods)
			}
		}
	}

	// The translator nest-syncer makes from those flags: 0.0.0.0/0 and
	// ::/0 are the tenant's own pods and the outside.
	translator := networkpolicy.Translator{VirtualCluster: "alpha", HostNamespace: "tenant-a", Outside: got.EgressBlocks, PodCIDRs: got.HostPodCIDRs}
	for _, cidr := range []string{"0.0.0.0/0", "::/0"} {
		p := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "shop"}, Spec: networkingv1.NetworkPolicySpec{
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress:     []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: cidr}}}}},
		}}
		copied, _, err := translator.Translate(p, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(copied.Spec.Ingress) != 1 || !slices.ContainsFunc(copied.Spec.Ingress[0].From, func(peer networkingv1.NetworkPolicyPeer) bool {
			return peer.PodSelector != nil && labels.Set(peer.PodSelector.MatchLabels).String() == labels.Set(NamesOf(vc(nil)).TenantPodLabels()).String()
		}) {
			t.Errorf("from %s: host rules %+v, want one with the tenant's pods", cidr, copied.Spec.Ingress)
		}
	}
}
