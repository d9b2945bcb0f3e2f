package networkpolicy

import (
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/nestdev/nest/internal/ipblock"
	"github.com/nestdev/nest/internal/syncer/contract"
)

// outside is the local host cluster's default egress: everywhere but the
// private ranges, which hold the host's own.
var outside = []networkingv1.IPBlock{{CIDR: "0.0.0.0/0", Except: []string{"10.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12", "192.168.0.0/16"}}}

// podCIDRs is the local host cluster's pod range, inside 10.0.0.0/8.
var podCIDRs = []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}

var tr = Translator{VirtualCluster: "alpha", HostNamespace: "vc-alpha", Outside: outside, PodCIDRs: podCIDRs}

func namespaces(nameLabels map[string]map[string]string) []*corev1.Namespace {
	var out []*corev1.Namespace
	for name, l := range nameLabels {
		out = append(out, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l}})
	}
	return out
}

var tenantNamespaces = namespaces(map[string]map[string]string{"shop": {"team": "shop"}, "billing": {"team": "money"}, "default": nil})

func policy(spec networkingv1.NetworkPolicySpec) *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "shop", UID: "uid-p"}, Spec: spec}
}

var (
	ingress = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
	egress  = []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}
)

// selects reports whether a host peer selector selects a host pod with
// labels.
func selects(s *metav1.LabelSelector, l map[string]string) bool {
	sel, err := metav1.LabelSelectorAsSelector(s)
	return err == nil && sel.Matches(labels.Set(l))
}

// hostPodLabels are the labels of the host pod of a tenant pod in namespace
// with tenant labels, under policies.
func hostPodLabels(namespace string, tenantLabels map[string]string, policies ...*networkingv1.NetworkPolicy) map[string]string {
	out := contract.HostLabels("alpha", namespace)
	for k, v := range NewView(policies).PodLabels(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Labels: tenantLabels}}) {
		out[k] = v
	}
	return out
}

// Every peer of a host copy names only the tenant's own pods or addresses
// inside Outside: whatever the tenant writes, its policy cannot open what
// Nest's isolation policies close.
func checkConfined(t *testing.T, p *networkingv1.NetworkPolicy) {
	t.Helper()
	var peers []networkingv1.NetworkPolicyPeer
	for _, r := range p.Spec.Ingress {
		if len(r.From) == 0 {
			t.Errorf("an ingress rule without peers allows anyone: %+v", r)
		}
		peers = append(peers, r.From...)
	}
	for _, r := range p.Spec.Egress {
		if len(r.To) == 0 {
			t.Errorf("an egress rule without peers allows anywhere: %+v", r)
		}
		peers = append(peers, r.To...)
	}
	for _, peer := range peers {
		switch {
		case peer.NamespaceSelector != nil:
			t.Errorf("a peer names host namespaces: %+v", peer)
		case peer.PodSelector != nil:
			if peer.PodSelector.MatchLabels[contract.LabelTenantOf] != "alpha" {
				t.Errorf("a pod peer is not limited to the tenant's pods: %+v", peer.PodSelector)
			}
		case peer.IPBlock != nil:
			block := netip.MustParsePrefix(peer.IPBlock.CIDR)
			if block.Bits() == 0 && !slices.Contains(peer.IPBlock.Except, "10.0.0.0/8") {
				t.Errorf("ipBlock %+v reaches the private ranges", peer.IPBlock)
			}
			for _, private := range []string{"10.0.0.0/8", "192.168.0.0/16", "169.254.0.0/16"} {
				pr := netip.MustParsePrefix(private)
				if pr.Contains(block.Addr()) {
					t.Errorf("ipBlock %+v lies in %s", peer.IPBlock, private)
				}
			}
		}
	}
	if p.Spec.PodSelector.MatchLabels[contract.LabelTenantOf] != "alpha" || p.Spec.PodSelector.MatchLabels[contract.LabelTenantNamespace] != "shop" {
		t.Errorf("the policy selects pods beyond the tenant namespace's: %+v", p.Spec.PodSelector)
	}
}

func TestTranslate(t *testing.T) {
	web := map[string]string{"app": "web"}
	client := map[string]string{"role": "client"}
	tests := []struct {
		name string
		spec networkingv1.NetworkPolicySpec
		// Host pods, by tenant namespace and labels, that the copy's rule
		// 0 must admit, and must not.
		admit, refuse []map[string]string
		admitNS       string
		wantRules     int
		wantCut       string
	}{
		{name: "default deny ingress", spec: networkingv1.NetworkPolicySpec{PolicyTypes: ingress}, wantRules: 0},
		{name: "from pods of the same namespace", wantRules: 1,
			spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: web}, PolicyTypes: ingress,
				Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: client}}}}}},
			admitNS: "shop", admit: []map[string]string{client}, refuse: []map[string]string{web, nil}},
		{name: "from every namespace", wantRules: 1,
			spec: networkingv1.NetworkPolicySpec{PolicyTypes: ingress,
				Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{}}}}}},
			admitNS: "billing", admit: []map[string]string{client, nil}},
		{name: "from namespaces by label", wantRules: 1,
			spec: networkingv1.NetworkPolicySpec{PolicyTypes: ingress,
				Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "money"}},
					PodSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "role", Operator: metav1.LabelSelectorOpExists}}}}}}}},
			admitNS: "billing", admit: []map[string]string{client}, refuse: []map[string]string{nil}},
		{name: "namespaces that match none: the rule is dropped, not left open", wantRules: 0, wantCut: "every peer was cut",
			spec: networkingv1.NetworkPolicySpec{PolicyTypes: ingress,
				Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "none"}}}}}}}},
		{name: "ipBlock of a pod's address: the tenant's pod there, by address", wantRules: 1, wantCut: "10.244.1.5/32",
			spec: networkingv1.NetworkPolicySpec{PolicyTypes: egress,
				Egress: []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "10.244.1.5/32"}}}}}}},
		{name: "ipBlock of a private range the host keeps: cut, the rule dropped", wantRules: 0, wantCut: "192.168.0.0/16",
			spec: networkingv1.NetworkPolicySpec{PolicyTypes: egress,
				Egress: []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "192.168.0.0/16"}}}}}}},
		{name: "ipBlock of everywhere: cut to the outside", wantRules: 1, wantCut: "0.0.0.0/0",
			spec: networkingv1.NetworkPolicySpec{PolicyTypes: egress,
				Egress: []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0"}}}}}}},
		{name: "a public ipBlock with the tenant's exception is kept", wantRules: 1,
			spec: networkingv1.NetworkPolicySpec{PolicyTypes: egress,
				Egress: []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "203.0.113.0/24", Except: []string{"203.0.113.128/25"}}}}}}}},
		{name: "egress anywhere on a port: the tenant's pods and the outside", wantRules: 1,
			spec: networkingv1.NetworkPolicySpec{PolicyTypes: egress,
				Egress: []networkingv1.NetworkPolicyEgressRule{{Ports: []networkingv1.NetworkPolicyPort{{Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromInt32(443))}}}}},
			admitNS: "billing", admit: []map[string]string{nil}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := policy(tt.spec)
			host, cuts, err := tr.Translate(p, tenantNamespaces)
			if err != nil {
				t.Fatal(err)
			}
			checkConfined(t, host)
			if host.Name != contract.HostName("alpha", "shop", "p") || host.Namespace != "vc-alpha" || !contract.IsCopyOf(host, "alpha", "shop", "p") {
				t.Errorf("host copy %s/%s is not named and marked as the copy", host.Namespace, host.Name)
			}
			rules := len(host.Spec.Ingress) + len(host.Spec.Egress)
			if rules != tt.wantRules {
				t.Fatalf("%d rules, want %d: %+v", rules, tt.wantRules, host.Spec)
			}
			var cutText []string
			for _, c := range cuts {
				cutText = append(cutText, string(c))
			}
			if got := strings.Join(cutText, "; "); (tt.wantCut == "") != (got == "") || !strings.Contains(got, tt.wantCut) {
				t.Errorf("cuts %q, want %q", got, tt.wantCut)
			}
			peers := func() []networkingv1.NetworkPolicyPeer {
				if len(host.Spec.Ingress) > 0 {
					return host.Spec.Ingress[0].From
				}
				return host.Spec.Egress[0].To
			}
			for _, l := range tt.admit {
				if !slices.ContainsFunc(peers(), func(peer networkingv1.NetworkPolicyPeer) bool {
					return peer.PodSelector != nil && selects(peer.PodSelector, hostPodLabels(tt.admitNS, l, p))
				}) {
					t.Errorf("no peer admits the host pod of %s %v", tt.admitNS, l)
				}
			}
			for _, l := range tt.refuse {
				if slices.ContainsFunc(peers(), func(peer networkingv1.NetworkPolicyPeer) bool {
					return peer.PodSelector != nil && selects(peer.PodSelector, hostPodLabels(tt.admitNS, l, p))
				}) {
					t.Errorf("a peer admits the host pod of %s %v", tt.admitNS, l)
				}
			}
			// Another tenant's pods never match, even with the same labels.
			other := hostPodLabels("shop", client, p)
			other[contract.LabelTenantOf] = "beta"
			if len(host.Spec.Ingress)+len(host.Spec.Egress) > 0 && slices.ContainsFunc(peers(), func(peer networkingv1.NetworkPolicyPeer) bool {
				return peer.PodSelector != nil && selects(peer.PodSelector, other)
			}) {
				t.Error("a peer admits another tenant's pod")
			}
		})
	}
}

// A rule without peers means anyone (ingress: [{}]) or anywhere
// (egress: [{}]): every pod of the tenant, in any of its namespaces, and
// the outside; never another tenant's pods.
func TestTranslateRuleWithoutPeers(t *testing.T) {
	for _, tt := range []struct {
		name string
		spec networkingv1.NetworkPolicySpec
	}{
		{"ingress", networkingv1.NetworkPolicySpec{PolicyTypes: ingress, Ingress: []networkingv1.NetworkPolicyIngressRule{{}}}},
		{"egress", networkingv1.NetworkPolicySpec{PolicyTypes: egress, Egress: []networkingv1.NetworkPolicyEgressRule{{}}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			host, cuts, err := tr.Translate(policy(tt.spec), tenantNamespaces)
			if err != nil {
				t.Fatal(err)
			}
			checkConfined(t, host)
			if len(cuts) > 0 {
				t.Errorf("cuts %v, want none", cuts)
			}
			want := append([]networkingv1.NetworkPolicyPeer{{PodSelector: tr.allTenantPods()}}, ipblock.Peers(outside)...)
			if got := rulePeersOf(host); !equality(got, want) {
				t.Errorf("peers %+v, want %+v", got, want)
			}
		})
	}
}

// An ipBlock that covers every pod address of its family means everyone,
// as users and enforcers read it: it matches all the tenant's own pods
// besides the outside. One that covers only part of the pod range matches
// the tenant's pods whose addresses it holds, by the label the syncer puts
// on their host pods, and the outside it may keep. Ingress and egress
// alike.
func TestTranslateIPBlockOverThePodRange(t *testing.T) {
	v4v6 := append(slices.Clone(podCIDRs), netip.MustParsePrefix("fd00:10:244::/56"))
	outside6 := append(slices.Clone(outside), networkingv1.IPBlock{CIDR: "::/0", Except: []string{"fc00::/7", "fe80::/10"}})
	tests := []struct {
		name     string
		block    networkingv1.IPBlock
		podCIDRs []netip.Prefix
		outside  []networkingv1.IPBlock
		// allPods: the copy's rule has the all-tenant-pods peer; blocks
		// are its ipBlock peers.
		allPods bool
		blocks  []networkingv1.IPBlock
		// cut is in the Cut message ("" for no Cut); byAddress says whether
		// the rule has the peer of the tenant's pods whose addresses the
		// block holds, and the cut says so.
		cut       string
		byAddress bool
	}{
		{name: "0.0.0.0/0: the tenant's pods and the outside",
			block: networkingv1.IPBlock{CIDR: "0.0.0.0/0"}, allPods: true, blocks: outside, cut: "matches all the tenant's own pods"},
		{name: "10.0.0.0/8 around the pod range: the tenant's pods, nothing outside",
			block: networkingv1.IPBlock{CIDR: "10.0.0.0/8"}, allPods: true, cut: "nothing is left"},
		{name: "exactly the pod range",
			block: networkingv1.IPBlock{CIDR: "10.244.0.0/16"}, allPods: true, cut: "matches all the tenant's own pods"},
		{name: "0.0.0.0/0 with an exception outside the pod range",
			block:   networkingv1.IPBlock{CIDR: "0.0.0.0/0", Except: []string{"203.0.113.0/24"}},
			allPods: true, blocks: []networkingv1.IPBlock{{CIDR: "0.0.0.0/0", Except: []string{"10.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12", "192.168.0.0/16", "203.0.113.0/24"}}},
			cut: "matches all the tenant's own pods"},
		{name: "0.0.0.0/0 with an exception taking part of the pod range: the pods by address",
			block:  networkingv1.IPBlock{CIDR: "0.0.0.0/0", Except: []string{"10.244.1.0/24"}},
			blocks: outside, cut: "only those outside the host cluster", byAddress: true},
		{name: "0.0.0.0/0 except the whole pod range: no pods, no hint",
			block:  networkingv1.IPBlock{CIDR: "0.0.0.0/0", Except: []string{"10.0.0.0/8"}},
			blocks: outside, cut: "only the addresses outside the host cluster"},
		{name: "part of the pod range: the pods by address",
			block: networkingv1.IPBlock{CIDR: "10.244.1.0/24"}, cut: "10.244.1.0/24", byAddress: true},
		{name: "one pod's address: that pod by address",
			block: networkingv1.IPBlock{CIDR: "10.244.1.5/32"}, cut: "10.244.1.5/32", byAddress: true},
		{name: "a private range beside the pod range: no pods, no hint",
			block: networkingv1.IPBlock{CIDR: "192.168.0.0/16"}, cut: "192.168.0.0/16"},
		{name: "a public /32: unchanged",
			block: networkingv1.IPBlock{CIDR: "203.0.113.7/32"}, blocks: []networkingv1.IPBlock{{CIDR: "203.0.113.7/32"}}},
		{name: "::/0 on an IPv4 host holds no pod",
			block: networkingv1.IPBlock{CIDR: "::/0"}, cut: "::/0"},
		{name: "0.0.0.0/0 on a dual-stack host holds the IPv4 pods",
			block: networkingv1.IPBlock{CIDR: "0.0.0.0/0"}, podCIDRs: v4v6, outside: outside6, allPods: true, blocks: outside, cut: "matches all the tenant's own pods"},
		{name: "::/0 on a dual-stack host holds the IPv6 pods",
			block: networkingv1.IPBlock{CIDR: "::/0"}, podCIDRs: v4v6, outside: outside6, allPods: true, blocks: outside6[1:], cut: "matches all the tenant's own pods"},
		{name: "pod ranges not known: 0.0.0.0/0 holds them whatever they are",
			block: networkingv1.IPBlock{CIDR: "0.0.0.0/0"}, podCIDRs: []netip.Prefix{}, allPods: true, blocks: outside, cut: "matches all the tenant's own pods"},
		{name: "pod ranges not known: an exception may take some",
			block: networkingv1.IPBlock{CIDR: "0.0.0.0/0", Except: []string{"10.0.0.0/8"}}, podCIDRs: []netip.Prefix{},
			blocks: outside, cut: "only those outside the host cluster", byAddress: true},
		{name: "pod ranges not known: a public /32 unchanged, and a pod there matched",
			block: networkingv1.IPBlock{CIDR: "203.0.113.7/32"}, podCIDRs: []netip.Prefix{}, blocks: []networkingv1.IPBlock{{CIDR: "203.0.113.7/32"}}, byAddress: true},
	}
	for _, tt := range tests {
		for _, direction := range []string{"ingress", "egress"} {
			t.Run(tt.name+"/"+direction, func(t *testing.T) {
				tr := tr
				if tt.podCIDRs != nil {
					tr.PodCIDRs = tt.podCIDRs
				}
				if tt.outside != nil {
					tr.Outside = tt.outside
				}
				peers := []networkingv1.NetworkPolicyPeer{{IPBlock: tt.block.DeepCopy()}}
				spec := networkingv1.NetworkPolicySpec{PolicyTypes: ingress, Ingress: []networkingv1.NetworkPolicyIngressRule{{From: peers}}}
				field := "spec.ingress[0].from[0].ipBlock " + tt.block.CIDR + ": "
				if direction == "egress" {
					spec = networkingv1.NetworkPolicySpec{PolicyTypes: egress, Egress: []networkingv1.NetworkPolicyEgressRule{{To: peers}}}
					field = "spec.egress[0].to[0].ipBlock " + tt.block.CIDR + ": "
				}
				host, cuts, err := tr.Translate(policy(spec), tenantNamespaces)
				if err != nil {
					t.Fatal(err)
				}
				var want []networkingv1.NetworkPolicyPeer
				if tt.allPods {
					want = append(want, networkingv1.NetworkPolicyPeer{PodSelector: tr.allTenantPods()})
				}
				if tt.byAddress {
					b, except, _ := parseBlock(tt.block)
					want = append(want, networkingv1.NetworkPolicyPeer{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{
						contract.LabelTenantOf: "alpha", BlockLabelKey(b, except): "in"}}})
				}
				want = append(want, ipblock.Peers(tt.blocks)...)
				if got := rulePeersOf(host); !equality(got, want) {
					t.Errorf("peers %+v, want %+v", got, want)
				}
				if len(want) == 0 && len(host.Spec.Ingress)+len(host.Spec.Egress) > 0 {
					t.Errorf("a rule whose peers were all cut is kept: %+v", host.Spec)
				}
				var text []string
				for _, c := range cuts {
					text = append(text, string(c))
				}
				got := strings.Join(text, "; ")
				switch {
				case tt.cut == "" && got != "":
					t.Errorf("cuts %q, want none", got)
				case tt.cut != "" && (!strings.HasPrefix(got, field) || !strings.Contains(got, tt.cut)):
					t.Errorf("cuts %q, want %q naming %q", got, field, tt.cut)
				}
				if told := strings.Contains(got, "the tenant's own pods whose addresses it holds"); told != (tt.byAddress && tt.cut != "") {
					t.Errorf("cuts %q: tells of the pods by address %v, want %v", got, told, tt.byAddress && tt.cut != "")
				}
				if tt.allPods && slices.ContainsFunc(rulePeersOf(host), func(p networkingv1.NetworkPolicyPeer) bool {
					return p.PodSelector != nil && selects(p.PodSelector, map[string]string{contract.LabelTenantOf: "beta", contract.LabelTenantNamespace: "shop"})
				}) {
					t.Error("a peer admits another tenant's pod")
				}
			})
		}
	}
}

// rulePeersOf returns the peers of the host copy's first rule, nil when it
// has none.
func rulePeersOf(host *networkingv1.NetworkPolicy) []networkingv1.NetworkPolicyPeer {
	switch {
	case len(host.Spec.Ingress) > 0:
		return host.Spec.Ingress[0].From
	case len(host.Spec.Egress) > 0:
		return host.Spec.Egress[0].To
	}
	return nil
}

// equality compares peers, an empty list and nil alike.
func equality(a, b []networkingv1.NetworkPolicyPeer) bool {
	return len(a) == len(b) && (len(a) == 0 || reflect.DeepEqual(a, b))
}

// The policy's own selector picks the tenant pods it isolates, through the
// labels pod translation puts on host pods.
func TestViewIsolatesTheSelectedPods(t *testing.T) {
	deny := policy(networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}, PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}})
	host, _, err := tr.Translate(deny, tenantNamespaces)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		namespace string
		labels    map[string]string
		isolated  bool
	}{
		{"shop", map[string]string{"app": "web", "tier": "x"}, true},
		{"shop", map[string]string{"app": "db"}, false},
		{"billing", map[string]string{"app": "web"}, false},
	} {
		l := hostPodLabels(tt.namespace, tt.labels, deny)
		if got := l[contract.LabelIngressIsolated] == "true" && l[contract.LabelEgressIsolated] == "true"; got != tt.isolated {
			t.Errorf("%s %v: isolated %v, want %v (labels %v)", tt.namespace, tt.labels, got, tt.isolated, l)
		}
		if got := selects(&host.Spec.PodSelector, l); got != tt.isolated {
			t.Errorf("%s %v: the host copy selects it %v, want %v", tt.namespace, tt.labels, got, tt.isolated)
		}
		if _, ok := l[LabelKey("tier")]; ok {
			t.Errorf("a label key no policy selects on is mirrored: %v", l)
		}
	}
	if got := WithPodLabels(map[string]string{"app": "web", contract.LabelIngressIsolated: "true", LabelKey("app"): "web"}, map[string]string{LabelKey("app"): "web"}); len(got) != 2 || got[contract.LabelIngressIsolated] != "" {
		t.Errorf("WithPodLabels kept a stale isolation label: %v", got)
	}
}

// IPv4-mapped IPv6 ranges could read as IPv4 to a network plugin: refused.
func TestTranslateRefusesIPv4MappedBlocks(t *testing.T) {
	p := policy(networkingv1.NetworkPolicySpec{PolicyTypes: egress,
		Egress: []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "::ffff:0:0/96"}}}}}})
	if _, _, err := tr.Translate(p, tenantNamespaces); err == nil || !strings.Contains(err.Error(), "spec.egress[0].to[0].ipBlock") {
		t.Errorf("Translate = %v, want a refusal naming the ipBlock", err)
	}
}

func TestLabelKeyIsReservedAndValid(t *testing.T) {
	k := LabelKey("example.com/" + strings.Repeat("x", 63))
	if !strings.HasPrefix(k, contract.ReservedPrefix) || len(k) > 63+len("nest.dev/") || !IsPolicyLabel(k) {
		t.Errorf("LabelKey = %q", k)
	}
	if IsPolicyLabel("app") || IsPolicyLabel(contract.LabelTenantOf) {
		t.Error("IsPolicyLabel claims labels it does not manage")
	}
}

// A cut's text names the kept ranges, never the host's ranges excepted
// from them.
func TestCutsNameNoHostRange(t *testing.T) {
	p := policy(networkingv1.NetworkPolicySpec{PolicyTypes: egress, Egress: []networkingv1.NetworkPolicyEgressRule{
		{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/1"}}}},
		{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0"}}}},
	}})
	_, cuts, err := tr.Translate(p, tenantNamespaces)
	if err != nil {
		t.Fatal(err)
	}
	if len(cuts) == 0 {
		t.Fatal("no cut for a block that takes host ranges")
	}
	for _, c := range cuts {
		for _, b := range tr.Outside {
			for _, e := range b.Except {
				if strings.Contains(string(c), e) {
					t.Errorf("cut %q names host range %s", c, e)
				}
			}
		}
		if !strings.Contains(string(c), "less ") {
			t.Errorf("cut %q does not say ranges were taken out", c)
		}
	}
}

// A pod in more ipBlocks than MaxBlockLabels carries the first labels
// only: the others do not match it, and BlocksPast counts them.
func TestPodLabelsBoundTheBlocksOfOnePod(t *testing.T) {
	var policies []*networkingv1.NetworkPolicy
	for i := range MaxBlockLabels + 3 {
		policies = append(policies, &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: fmt.Sprint("p", i)},
			Spec: networkingv1.NetworkPolicySpec{Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{
				{IPBlock: &networkingv1.IPBlock{CIDR: fmt.Sprintf("10.244.1.0/%d", 24+i%6), Except: []string{fmt.Sprintf("10.244.1.%d/32", 100+i)}}}}}}}})
	}
	v := NewView(policies)
	ip := netip.MustParseAddr("10.244.1.5")
	n := 0
	for k := range v.PodLabels(&corev1.Pod{}, ip) {
		if strings.HasPrefix(k, blockKeyPrefix) {
			n++
		}
	}
	if n != MaxBlockLabels || v.BlocksPast(ip) != 3 {
		t.Errorf("%d block labels and %d past the bound, want %d and 3", n, v.BlocksPast(ip), MaxBlockLabels)
	}
	if v.BlocksPast(netip.MustParseAddr("10.244.2.5")) != 0 {
		t.Error("a pod in no block is counted past the bound")
	}
}
