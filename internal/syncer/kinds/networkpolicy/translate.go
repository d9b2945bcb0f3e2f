// Package networkpolicy enforces a tenant's NetworkPolicies on the host: each
// tenant policy becomes a host NetworkPolicy in the tenant's host namespace,
// whose selectors name host pods by labels Nest writes on them, and which
// never allows more than Nest's own isolation policies already allow.
//
// Kubernetes' model is followed: a pod selected by no policy of a
// direction is open in that direction, a selected pod takes only what some
// policy allows. Nest's base policies (controlplane.NetworkPoliciesFor)
// open tenant pods to each other and to the outside only while they carry
// no isolation label (contract.LabelIngressIsolated,
// contract.LabelEgressIsolated); the syncer sets those labels on the host
// pods that a tenant policy selects, and the host copies of the tenant's
// policies then say what those pods may do. The tenant's own control plane
// (API server, CoreDNS, the kubelet API) keeps reaching its pods and being
// reached from them, as a node's traffic is in most CNIs.
package networkpolicy

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/nestdev/nest/internal/ipblock"
	"github.com/nestdev/nest/internal/syncer/contract"
)

// Labels Nest writes on host pods for the tenant's policies, besides the
// isolation labels (contract.LabelIngressIsolated,
// contract.LabelEgressIsolated). Tenants cannot write keys under nest.dev/,
// so only the syncer sets them.
const (
	// labelKeyPrefix starts the host label that mirrors one tenant label
	// key a policy selects on (LabelKey).
	labelKeyPrefix = contract.ReservedPrefix + "label-"
	// blockKeyPrefix starts the host label on a pod whose address an
	// ipBlock of the tenant's policies holds (BlockLabelKey).
	blockKeyPrefix = contract.ReservedPrefix + "ipblock-"
	// inBlock is that label's value.
	inBlock = "in"
)

// BlockLabelKey is the host pod label that says the pod's address lies in
// a tenant ipBlock, the range want less except (as parseBlock reads them):
// "nest.dev/ipblock-" and a 64-bit hash of the range and its sorted
// exceptions.
func BlockLabelKey(want netip.Prefix, except []netip.Prefix) string {
	parts := []string{want.String()}
	for _, e := range except {
		parts = append(parts, e.String())
	}
	slices.Sort(parts[1:])
	sum := sha256.Sum256([]byte(strings.Join(parts, ",")))
	return blockKeyPrefix + hex.EncodeToString(sum[:8])
}

// LabelKey is the host pod label that carries the value of the tenant pod
// label key: "nest.dev/label-" and a 64-bit hash of the key, a valid label
// key whatever the tenant's key is.
func LabelKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return labelKeyPrefix + hex.EncodeToString(sum[:8])
}

// IsPolicyLabel reports whether a host pod label key is one this package
// manages (mirrored keys and isolation labels).
func IsPolicyLabel(key string) bool {
	return key == contract.LabelIngressIsolated || key == contract.LabelEgressIsolated ||
		len(key) > len(labelKeyPrefix) && strings.HasPrefix(key, labelKeyPrefix) ||
		len(key) > len(blockKeyPrefix) && strings.HasPrefix(key, blockKeyPrefix)
}

// Translator makes host NetworkPolicies from tenant ones.
type Translator struct {
	// VirtualCluster is the VirtualCluster's name, HostNamespace its host
	// namespace.
	VirtualCluster, HostNamespace string
	// Outside is where tenant pods may reach beyond their own cluster: the
	// blocks of Nest's base egress policy. A tenant ipBlock is cut to them,
	// for ingress and egress alike.
	Outside []networkingv1.IPBlock
	// PodCIDRs are the host's pod ranges (contract.Flags.HostPodCIDRs),
	// where the tenant's pods have their addresses; nil when the platform
	// did not give them. Outside never holds them, so an ipBlock alone
	// would never match a tenant pod. A tenant ipBlock that covers every
	// pod address of its family (0.0.0.0/0 above all) therefore also
	// matches all the tenant's own pods, as users and enforcers read
	// "anywhere" (podCoverage).
	PodCIDRs []netip.Prefix
}

// Cut is something of a tenant policy the host copy leaves out, for the
// tenant's Warning event.
type Cut string

// Translate returns the host copy of the tenant policy p and what was cut
// from it. namespaces are the tenant's namespaces, against which namespace
// selectors are evaluated (the host copy names the namespaces they match
// now; the syncer translates again when namespaces change). The copy allows
// only traffic to and from the tenant's own pods on virtual nodes and the
// blocks of Outside: a peer that could mean anything else is cut, and a
// rule whose peers were all cut is dropped, never left to mean "anyone".
func (t Translator) Translate(p *networkingv1.NetworkPolicy, namespaces []*corev1.Namespace) (*networkingv1.NetworkPolicy, []Cut, error) {
	var cuts []Cut
	podSelector, err := t.podsIn(p.Namespace, &p.Spec.PodSelector)
	if err != nil {
		return nil, nil, fmt.Errorf("spec.podSelector: %w", err)
	}
	spec := networkingv1.NetworkPolicySpec{PodSelector: *podSelector, PolicyTypes: slices.Clone(p.Spec.PolicyTypes)}
	for i, r := range p.Spec.Ingress {
		peers, c, keep, err := t.rulePeers(p.Namespace, r.From, namespaces, fmt.Sprintf("spec.ingress[%d]", i), "from")
		if err != nil {
			return nil, nil, err
		}
		cuts = append(cuts, c...)
		if keep {
			spec.Ingress = append(spec.Ingress, networkingv1.NetworkPolicyIngressRule{Ports: slices.Clone(r.Ports), From: peers})
		}
	}
	for i, r := range p.Spec.Egress {
		peers, c, keep, err := t.rulePeers(p.Namespace, r.To, namespaces, fmt.Sprintf("spec.egress[%d]", i), "to")
		if err != nil {
			return nil, nil, err
		}
		cuts = append(cuts, c...)
		if keep {
			spec.Egress = append(spec.Egress, networkingv1.NetworkPolicyEgressRule{Ports: slices.Clone(r.Ports), To: peers})
		}
	}
	host := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{
			Name: contract.HostName(t.VirtualCluster, p.Namespace, p.Name), Namespace: t.HostNamespace,
			Labels:      contract.HostLabels(t.VirtualCluster, p.Namespace),
			Annotations: contract.HostAnnotations(p.Namespace, p.Name, string(p.UID)),
		},
		Spec: spec,
	}
	return host, cuts, nil
}

// rulePeers translates the peers of one rule (field.side, such as
// spec.ingress[0].from). A rule without peers, which means anywhere, gets
// the tenant's own pods and the outside, no more; keep is false for a rule
// whose peers were all cut, which must be dropped rather than left to mean
// anywhere.
func (t Translator) rulePeers(namespace string, in []networkingv1.NetworkPolicyPeer, namespaces []*corev1.Namespace, field, side string) (peers []networkingv1.NetworkPolicyPeer, cuts []Cut, keep bool, err error) {
	if len(in) == 0 {
		return append([]networkingv1.NetworkPolicyPeer{{PodSelector: t.allTenantPods()}}, ipblock.Peers(t.Outside)...), nil, true, nil
	}
	peers, cuts, err = t.peers(namespace, in, namespaces, field+"."+side)
	if err != nil || len(peers) > 0 {
		return peers, cuts, err == nil, err
	}
	return nil, append(cuts, Cut(field+": every peer was cut, so the rule allows nothing")), false, nil
}

// allTenantPods selects every host pod of the virtual cluster.
func (t Translator) allTenantPods() *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchLabels: map[string]string{contract.LabelTenantOf: t.VirtualCluster}}
}

// podsIn selects the host pods of the tenant pods in namespace that
// selector selects.
func (t Translator) podsIn(namespace string, selector *metav1.LabelSelector) (*metav1.LabelSelector, error) {
	out, err := hostSelector(selector)
	if err != nil {
		return nil, err
	}
	if out.MatchLabels == nil {
		out.MatchLabels = map[string]string{}
	}
	out.MatchLabels[contract.LabelTenantOf] = t.VirtualCluster
	out.MatchLabels[contract.LabelTenantNamespace] = namespace
	return out, nil
}

// peers translates one rule's peers; field names them in errors and cuts.
func (t Translator) peers(namespace string, in []networkingv1.NetworkPolicyPeer, namespaces []*corev1.Namespace, field string) ([]networkingv1.NetworkPolicyPeer, []Cut, error) {
	var out []networkingv1.NetworkPolicyPeer
	var cuts []Cut
	allPods := false
	for i, peer := range in {
		at := fmt.Sprintf("%s[%d]", field, i)
		switch {
		case peer.IPBlock != nil:
			want, except, err := parseBlock(*peer.IPBlock)
			if err != nil {
				return nil, nil, fmt.Errorf("%s.ipBlock: %w", at, err)
			}
			blocks, cut := t.cutBlock(want, except)
			pods := t.podCoverage(want, except)
			if pods == allPodAddresses && !allPods {
				// One such peer per rule is enough: the first ipBlock
				// that covers the pod range brings it.
				out = append(out, networkingv1.NetworkPolicyPeer{PodSelector: t.allTenantPods()})
				allPods = true
			}
			switch {
			case !cut:
			case pods == allPodAddresses:
				cuts = append(cuts, Cut(fmt.Sprintf("%s.ipBlock %s: matches all the tenant's own pods and, of other addresses, only those outside the host cluster that the VirtualCluster's egress allows (%s)", at, peer.IPBlock.CIDR, describe(blocks))))
			case pods == somePodAddresses:
				cuts = append(cuts, Cut(fmt.Sprintf("%s.ipBlock %s: matches the tenant's own pods whose addresses it holds and, of other addresses, only those outside the host cluster that the VirtualCluster's egress allows (%s)", at, peer.IPBlock.CIDR, describe(blocks))))
			default:
				cuts = append(cuts, Cut(fmt.Sprintf("%s.ipBlock %s: only the addresses outside the host cluster that the VirtualCluster's egress allows are kept (%s)", at, peer.IPBlock.CIDR, describe(blocks))))
			}
			if pods == somePodAddresses {
				// The tenant's pods whose addresses the block holds now:
				// the syncer labels each host pod by its address.
				out = append(out, networkingv1.NetworkPolicyPeer{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{
					contract.LabelTenantOf: t.VirtualCluster, BlockLabelKey(want, except): inBlock,
				}}})
			}
			out = append(out, ipblock.Peers(blocks)...)
		case peer.NamespaceSelector == nil:
			sel, err := t.podsIn(namespace, peer.PodSelector)
			if err != nil {
				return nil, nil, fmt.Errorf("%s.podSelector: %w", at, err)
			}
			out = append(out, networkingv1.NetworkPolicyPeer{PodSelector: sel})
		default:
			names, err := matchingNamespaces(peer.NamespaceSelector, namespaces)
			if err != nil {
				return nil, nil, fmt.Errorf("%s.namespaceSelector: %w", at, err)
			}
			if len(names) == 0 {
				continue
			}
			sel, err := hostSelector(peer.PodSelector)
			if err != nil {
				return nil, nil, fmt.Errorf("%s.podSelector: %w", at, err)
			}
			if sel.MatchLabels == nil {
				sel.MatchLabels = map[string]string{}
			}
			sel.MatchLabels[contract.LabelTenantOf] = t.VirtualCluster
			sel.MatchExpressions = append(sel.MatchExpressions, metav1.LabelSelectorRequirement{Key: contract.LabelTenantNamespace, Operator: metav1.LabelSelectorOpIn, Values: names})
			out = append(out, networkingv1.NetworkPolicyPeer{PodSelector: sel})
		}
	}
	return out, cuts, nil
}

// matchingNamespaces returns the names of the namespaces selector selects,
// sorted.
func matchingNamespaces(selector *metav1.LabelSelector, namespaces []*corev1.Namespace) ([]string, error) {
	s, err := metav1.LabelSelectorAsSelector(selector)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, ns := range namespaces {
		if s.Matches(labels.Set(ns.Labels)) {
			out = append(out, ns.Name)
		}
	}
	slices.Sort(out)
	return out, nil
}

// hostSelector rewrites a tenant pod selector onto the host labels that
// mirror tenant label keys (LabelKey); nil selects every pod.
func hostSelector(in *metav1.LabelSelector) (*metav1.LabelSelector, error) {
	out := &metav1.LabelSelector{}
	if in == nil {
		return out, nil
	}
	if _, err := metav1.LabelSelectorAsSelector(in); err != nil {
		return nil, err
	}
	if len(in.MatchLabels) > 0 {
		out.MatchLabels = map[string]string{}
		for k, v := range in.MatchLabels {
			out.MatchLabels[LabelKey(k)] = v
		}
	}
	for _, r := range in.MatchExpressions {
		out.MatchExpressions = append(out.MatchExpressions, metav1.LabelSelectorRequirement{Key: LabelKey(r.Key), Operator: r.Operator, Values: slices.Clone(r.Values)})
	}
	return out, nil
}

// SelectedKeys returns the tenant label keys the policy's pod selectors
// use, which host pods must mirror.
func SelectedKeys(p *networkingv1.NetworkPolicy) []string {
	var keys []string
	add := func(s *metav1.LabelSelector) {
		if s == nil {
			return
		}
		keys = append(keys, slices.Collect(maps.Keys(s.MatchLabels))...)
		for _, r := range s.MatchExpressions {
			keys = append(keys, r.Key)
		}
	}
	add(&p.Spec.PodSelector)
	for _, r := range p.Spec.Ingress {
		for _, peer := range r.From {
			add(peer.PodSelector)
		}
	}
	for _, r := range p.Spec.Egress {
		for _, peer := range r.To {
			add(peer.PodSelector)
		}
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}

// parseBlock reads a tenant ipBlock: its range and its exceptions, masked.
func parseBlock(b networkingv1.IPBlock) (want netip.Prefix, except []netip.Prefix, err error) {
	want, err = netip.ParsePrefix(b.CIDR)
	if err != nil {
		return netip.Prefix{}, nil, fmt.Errorf("cidr %q: %w", b.CIDR, err)
	}
	if want.Addr().Is4In6() {
		return netip.Prefix{}, nil, fmt.Errorf("cidr %q: write IPv4 ranges as IPv4, not IPv4-mapped IPv6", b.CIDR)
	}
	for _, e := range b.Except {
		p, err := netip.ParsePrefix(e)
		if err != nil {
			return netip.Prefix{}, nil, fmt.Errorf("except %q: %w", e, err)
		}
		except = append(except, p.Masked())
	}
	return want.Masked(), except, nil
}

// podCover is how much of the tenant's pod addresses an ipBlock holds.
type podCover int

const (
	// noPodAddresses: the block, less its exceptions, holds no pod address.
	noPodAddresses podCover = iota
	// somePodAddresses: it holds some, or may (the pod ranges are not
	// known), but not surely all of its family.
	somePodAddresses
	// allPodAddresses: it holds every pod address of its family.
	allPodAddresses
)

// podCoverage says how much of the pod range the tenant block want, less
// except, holds. A block that holds all of it is "everyone" to users and to
// enforcers that see pod addresses (Calico, Cilium, kube-network-policies),
// so it earns the tenant's own pods; one that holds only part of it earns
// the tenant's pods whose addresses it holds, which the syncer marks on
// their host pods (BlockLabelKey), as those addresses come and go.
//
// Without PodCIDRs the pod addresses could be anywhere in the family: only
// the whole family (0.0.0.0/0, ::/0) with no exception surely holds them,
// and any other block may hold some. A family with no pod range (IPv6 on
// an IPv4 host) holds no pod address, so ::/0 there matches no tenant pod,
// as upstream. Once earned, the pods are matched whatever family they
// connect over: the selector cannot name a family.
func (t Translator) podCoverage(want netip.Prefix, except []netip.Prefix) podCover {
	if len(t.PodCIDRs) == 0 {
		if want.Bits() == 0 && len(except) == 0 {
			return allPodAddresses
		}
		return somePodAddresses
	}
	inFamily, covered, touched := 0, 0, false
	for _, p := range t.PodCIDRs {
		if p.Addr().Is4() != want.Addr().Is4() {
			continue
		}
		inFamily++
		if !want.Overlaps(p) {
			continue
		}
		// Prefixes that overlap nest: their common part is the smaller.
		common := want
		if ipblock.Covers(want, p) {
			common = p
		}
		if !slices.ContainsFunc(except, func(e netip.Prefix) bool { return ipblock.Covers(e, common) }) {
			touched = true
		}
		if common == p && !slices.ContainsFunc(except, p.Overlaps) {
			covered++
		}
	}
	switch {
	case inFamily > 0 && covered == inFamily:
		return allPodAddresses
	case touched:
		return somePodAddresses
	}
	return noPodAddresses
}

// cutBlock intersects a tenant ipBlock, the range want less
// tenantExcept, with Outside: each part of the tenant's range inside an
// allowed block, minus the tenant's and the block's exceptions. cut
// reports whether any address of the tenant's range, less its own
// exceptions, was left out.
func (t Translator) cutBlock(want netip.Prefix, tenantExcept []netip.Prefix) (out []networkingv1.IPBlock, cut bool) {
	cut = true
	for _, allowed := range t.Outside {
		a, err := netip.ParsePrefix(allowed.CIDR)
		if err != nil {
			continue
		}
		var allowedExcept []netip.Prefix
		for _, e := range allowed.Except {
			if p, err := netip.ParsePrefix(e); err == nil {
				allowedExcept = append(allowedExcept, p)
			}
		}
		var part netip.Prefix
		switch {
		case ipblock.Covers(a, want):
			part = want
			// Kept whole unless the allowed block's exceptions take
			// addresses the tenant did not except itself.
			cut = slices.ContainsFunc(allowedExcept, func(e netip.Prefix) bool {
				return e.Overlaps(want) && !slices.ContainsFunc(tenantExcept, func(x netip.Prefix) bool { return ipblock.Covers(x, e) || ipblock.Covers(x, want) })
			})
		case ipblock.Covers(want, a):
			part = a
		default:
			continue
		}
		out = append(out, ipblock.Subtract([]netip.Prefix{part}, slices.Concat(tenantExcept, allowedExcept))...)
	}
	return out, cut
}

func describe(blocks []networkingv1.IPBlock) string {
	if len(blocks) == 0 {
		return "nothing is left"
	}
	// The exceptions are the host's own ranges (pods, Services, nodes) and
	// those the VirtualCluster's egress leaves out: a tenant is told how
	// many, never which, so its events name no host address.
	cidrs, excepted := make([]string, 0, len(blocks)), 0
	for _, b := range blocks {
		cidrs = append(cidrs, b.CIDR)
		excepted += len(b.Except)
	}
	s := "kept: " + strings.Join(cidrs, ", ")
	if excepted > 0 {
		s += fmt.Sprintf(", less %d ranges of the host and of the VirtualCluster's egress exceptions", excepted)
	}
	return s
}

// View is what host pod labels depend on of the tenant's policies: the
// label keys their pod selectors use, which pods they isolate, and the
// ipBlocks pod addresses are checked against.
type View struct {
	keys     []string
	policies []*networkingv1.NetworkPolicy
	blocks   []block
}

// MaxBlockLabels bounds the ipBlock labels on one host pod (PodLabels),
// so a tenant's policies cannot grow its host pods without end: the blocks
// past it, in the order of their labels, do not match the pod (fewer
// allowed, never more), and BlocksPast says so.
const MaxBlockLabels = 32

// BlocksPast is how many ipBlocks that hold one of ips match no pod for
// MaxBlockLabels: 0 normally.
func (v *View) BlocksPast(ips ...netip.Addr) int {
	n := 0
	for _, b := range v.blocks {
		if slices.ContainsFunc(ips, b.holds) {
			n++
		}
	}
	return max(0, n-MaxBlockLabels)
}

// block is one tenant ipBlock, parsed, with its host pod label.
type block struct {
	want   netip.Prefix
	except []netip.Prefix
	key    string
}

// holds says whether the block, less its exceptions, holds ip.
func (b block) holds(ip netip.Addr) bool {
	return b.want.Contains(ip) && !slices.ContainsFunc(b.except, func(e netip.Prefix) bool { return e.Contains(ip) })
}

// NewView is the View of the tenant's policies.
func NewView(policies []*networkingv1.NetworkPolicy) *View {
	v := &View{policies: policies}
	seen := map[string]bool{}
	for _, p := range policies {
		v.keys = append(v.keys, SelectedKeys(p)...)
		for _, b := range ipBlocks(p) {
			want, except, err := parseBlock(b)
			if key := BlockLabelKey(want, except); err == nil && !seen[key] {
				seen[key] = true
				v.blocks = append(v.blocks, block{want: want, except: except, key: key})
			}
		}
	}
	slices.Sort(v.keys)
	v.keys = slices.Compact(v.keys)
	slices.SortFunc(v.blocks, func(a, b block) int { return strings.Compare(a.key, b.key) })
	return v
}

// ipBlocks lists the ipBlock peers of the policy's rules.
func ipBlocks(p *networkingv1.NetworkPolicy) []networkingv1.IPBlock {
	var out []networkingv1.IPBlock
	for _, r := range p.Spec.Ingress {
		for _, peer := range r.From {
			if peer.IPBlock != nil {
				out = append(out, *peer.IPBlock)
			}
		}
	}
	for _, r := range p.Spec.Egress {
		for _, peer := range r.To {
			if peer.IPBlock != nil {
				out = append(out, *peer.IPBlock)
			}
		}
	}
	return out
}

// PodLabels returns the labels the host pod of the tenant pod carries for
// the tenant's policies: the mirror of each label key a policy selects on
// (LabelKey), contract.LabelIngressIsolated or contract.LabelEgressIsolated
// when a policy of that type selects the pod, and the label of each ipBlock
// that holds one of ips, the host pod's own addresses (none before it has
// one; never the tenant pod's status, which the tenant may write).
func (v *View) PodLabels(pod *corev1.Pod, ips ...netip.Addr) map[string]string {
	out := map[string]string{}
	for _, k := range v.keys {
		if value, ok := pod.Labels[k]; ok {
			out[LabelKey(k)] = value
		}
	}
	marked := 0
	for _, b := range v.blocks {
		if slices.ContainsFunc(ips, b.holds) && marked < MaxBlockLabels {
			out[b.key] = inBlock
			marked++
		}
	}
	for _, p := range v.policies {
		if p.Namespace != pod.Namespace {
			continue
		}
		s, err := metav1.LabelSelectorAsSelector(&p.Spec.PodSelector)
		if err != nil || !s.Matches(labels.Set(pod.Labels)) {
			continue
		}
		for _, t := range p.Spec.PolicyTypes {
			switch t {
			case networkingv1.PolicyTypeIngress:
				out[contract.LabelIngressIsolated] = "true"
			case networkingv1.PolicyTypeEgress:
				out[contract.LabelEgressIsolated] = "true"
			}
		}
	}
	return out
}

// WithPodLabels returns host pod labels with the policy labels replaced by
// want: labels this package manages that want lacks are dropped.
func WithPodLabels(host, want map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range host {
		if !IsPolicyLabel(k) {
			out[k] = v
		}
	}
	maps.Copy(out, want)
	return out
}
