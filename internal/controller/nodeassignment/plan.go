package nodeassignment

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/controlplane"
)

// holderKey is how a VirtualCluster is recorded as the holder of a GlobalNode,
// in its nest.dev/held-by annotation and its status.virtualCluster:
// "namespace/name".
func holderKey(vc types.NamespacedName) string { return vc.Namespace + "/" + vc.Name }

// parseHolder is the VirtualCluster a holder key names.
func parseHolder(key string) (types.NamespacedName, bool) {
	ns, name, ok := strings.Cut(key, "/")
	if !ok || ns == "" || name == "" {
		return types.NamespacedName{}, false
	}
	return types.NamespacedName{Namespace: ns, Name: name}, true
}

// heldBy is the holder gn's annotation records, "" when none.
func heldBy(gn *nestv1.GlobalNode) string { return gn.Annotations[nestv1.AnnotationHeldBy] }

// unavailable says why gn may not be claimed, or "" when it may: it must be
// free, name no holder, be in the host (phase Host, or not written yet) with
// its host Node present, and not be on its way out of the inventory.
func unavailable(gn *nestv1.GlobalNode) string {
	switch h := heldBy(gn); {
	case !gn.DeletionTimestamp.IsZero():
		return "it is being deleted"
	case h != "":
		return "VirtualCluster " + h + " holds it"
	case gn.Status.VirtualCluster != "":
		return "VirtualCluster " + gn.Status.VirtualCluster + " holds it"
	case gn.Spec.State != nestv1.NodeStateFree:
		return fmt.Sprintf("its state is %s, not free", gn.Spec.State)
	case gn.Status.Phase != "" && gn.Status.Phase != nestv1.NodePhaseHost:
		return fmt.Sprintf("it is in phase %s, not Host", gn.Status.Phase)
	case meta.IsStatusConditionFalse(gn.Status.Conditions, nestv1.ConditionHostNodePresent):
		return "the host cluster has no Node " + gn.Name
	}
	return ""
}

// policy is one validated entry of spec.promotePolicies.
type policy struct {
	selector labels.Selector
	count    int
}

// request is what a VirtualCluster's spec asks for: nodes by name
// (promoteResources.nodeInfos), then nodes by policy, in spec order.
type request struct {
	nodeNames []string
	policies  []policy
}

// empty is true when the request asks for no node at all.
func (r request) empty() bool {
	if len(r.nodeNames) > 0 {
		return false
	}
	for _, p := range r.policies {
		if p.count > 0 {
			return false
		}
	}
	return true
}

// requestOf validates vc's promotePolicies and nodeInfos. The error names the
// field at fault, as the API server would: it is the NodesAssigned message.
func requestOf(vc *nestv1.VirtualCluster) (request, error) {
	var req request
	for _, ni := range vc.Spec.PromoteResources.NodeInfos {
		req.nodeNames = append(req.nodeNames, ni.NodeName)
	}
	for i, p := range vc.Spec.PromotePolicies {
		sel, err := metav1.LabelSelectorAsSelector(&p.LabelSelector)
		if err != nil {
			return request{}, fmt.Errorf("spec.promotePolicies[%d].labelSelector: %w", i, err)
		}
		req.policies = append(req.policies, policy{selector: sel, count: int(p.NodeCount)})
	}
	return req, nil
}

// selectorText shows a policy's selector in a message.
func selectorText(s labels.Selector) string {
	if s.Empty() {
		return "{} (every node)"
	}
	return s.String()
}

// Reasons of the NodesAssigned condition.
const (
	// ReasonAssigned: the VirtualCluster holds every node it asks for.
	ReasonAssigned = "Assigned"
	// ReasonNoneRequested: the VirtualCluster asks for no node.
	ReasonNoneRequested = "NoneRequested"
	// ReasonInsufficientNodes: a promote policy selects fewer available
	// GlobalNodes than its nodeCount.
	ReasonInsufficientNodes = "InsufficientNodes"
	// ReasonNodeUnavailable: a node named in nodeInfos has no GlobalNode, or
	// another VirtualCluster holds it, or it is not free in the host.
	ReasonNodeUnavailable = "NodeUnavailable"
	// ReasonInvalidPolicy: a promote policy cannot be evaluated, such as an
	// invalid labelSelector; the message names the field.
	ReasonInvalidPolicy = "InvalidPolicy"
	// ReasonInvalidName: the VirtualCluster's name cannot be recorded as a
	// GlobalNode's holder (it has a '.').
	ReasonInvalidName = "InvalidName"
	// ReasonNamespaceInUse: another VirtualCluster holds the host namespace,
	// so this one runs nothing and holds no node.
	ReasonNamespaceInUse = "NamespaceInUse"
	// ReasonDeleting: the VirtualCluster is being deleted; its nodes are released.
	ReasonDeleting = "Deleting"
)

// plan is what one reconcile does with the GlobalNodes of one VirtualCluster.
type plan struct {
	// keep are held nodes the spec still asks for; claim are free nodes to
	// take (only when every request is met: all or nothing); release are
	// held nodes it no longer asks for. Each is sorted by name.
	keep, claim, release []string
	// met is true when every request is met once claim is taken.
	met bool
	// reason and message are the NodesAssigned condition's when not met, or
	// when nothing is requested.
	reason, message string
}

// planFor resolves req for the VirtualCluster holder against nodes.
//
// Named nodes (nodeInfos) are served first, then the policies in spec order;
// a node serves one of them only. Each takes the nodes holder already holds
// first, then free candidates, each in name order: when a policy's nodeCount
// falls, the nodes of the highest names are released. Overlapping selectors
// are served greedily in that order, so a later policy may find too few
// nodes even where another split would fit: give policies disjoint
// selectors.
//
// When some request cannot be met, nothing is claimed. Held nodes the spec
// still selects are kept; those it no longer asks for are released.
func planFor(req request, holder string, nodes []nestv1.GlobalNode) plan {
	byName := make(map[string]*nestv1.GlobalNode, len(nodes))
	names := make([]string, 0, len(nodes))
	for i := range nodes {
		byName[nodes[i].Name] = &nodes[i]
		names = append(names, nodes[i].Name)
	}
	slices.Sort(names)
	var held []string
	for _, n := range names {
		if heldBy(byName[n]) == holder {
			held = append(held, n)
		}
	}

	var p plan
	used := map[string]bool{}
	fail := func(reason, format string, args ...any) {
		if p.reason == "" {
			p.reason, p.message = reason, fmt.Sprintf(format, args...)
		}
	}
	take := func(n string) {
		used[n] = true
		if heldBy(byName[n]) == holder {
			p.keep = append(p.keep, n)
		} else {
			p.claim = append(p.claim, n)
		}
	}

	for i, n := range req.nodeNames {
		gn := byName[n]
		switch {
		case gn == nil:
			fail(ReasonNodeUnavailable, "spec.promoteResources.nodeInfos[%d]: there is no GlobalNode %s: the host has no node of that name that may be promoted", i, n)
		case used[n]:
			// Listed twice: the API server refuses that, so only a stale read gets here.
		case heldBy(gn) == holder:
			take(n)
		default:
			if why := unavailable(gn); why != "" {
				fail(ReasonNodeUnavailable, "spec.promoteResources.nodeInfos[%d]: GlobalNode %s is not available: %s", i, n, why)
				continue
			}
			take(n)
		}
	}
	for i, pol := range req.policies {
		got := 0
		// Held nodes first, then free candidates: a lower count keeps the
		// lowest names.
		for _, pass := range []func(*nestv1.GlobalNode) bool{
			func(gn *nestv1.GlobalNode) bool { return heldBy(gn) == holder },
			func(gn *nestv1.GlobalNode) bool { return unavailable(gn) == "" },
		} {
			for _, n := range names {
				if got == pol.count {
					break
				}
				gn := byName[n]
				if used[n] || !pass(gn) || !pol.selector.Matches(labels.Set(gn.Spec.Labels)) {
					continue
				}
				take(n)
				got++
			}
		}
		if got < pol.count {
			fail(ReasonInsufficientNodes, "spec.promotePolicies[%d] (labelSelector %s) wants %s, found %d (GlobalNodes that match, free or held by it, and that no earlier policy or nodeInfo took)",
				i, selectorText(pol.selector), count(pol.count, "node"), got)
		}
	}

	for _, n := range held {
		if !used[n] {
			p.release = append(p.release, n)
		}
	}
	slices.Sort(p.keep)
	slices.Sort(p.claim)
	p.met = p.reason == ""
	if !p.met {
		p.claim = nil
		p.message += "; no node is claimed until every request can be met"
	}
	return p
}

// assess is the plan for vc, given every GlobalNode and the name of the
// VirtualCluster that holds vc's host namespace.
func assess(vc *nestv1.VirtualCluster, namespaceHolder string, nodes []nestv1.GlobalNode) plan {
	holder := holderKey(types.NamespacedName{Namespace: vc.Namespace, Name: vc.Name})
	var held []string
	for i := range nodes {
		if heldBy(&nodes[i]) == holder {
			held = append(held, nodes[i].Name)
		}
	}
	slices.Sort(held)
	if namespaceHolder != vc.Name {
		return plan{release: held, reason: ReasonNamespaceInUse,
			message: controlplane.NamespaceInUseMessage(vc.Namespace, namespaceHolder, vc.Name) + "; it holds no node"}
	}
	req, err := requestOf(vc)
	if err != nil {
		// Nothing can be said about what the spec wants: keep what is held.
		return plan{keep: held, reason: ReasonInvalidPolicy, message: err.Error() + "; no node is claimed or released until it is fixed"}
	}
	if req.empty() {
		return plan{release: held, met: true, reason: ReasonNoneRequested,
			message: "spec.promotePolicies and spec.promoteResources.nodeInfos ask for no node"}
	}
	// A GlobalNode's status.virtualCluster takes namespace/name of DNS labels.
	if errs := validation.IsDNS1123Label(vc.Name); len(errs) > 0 {
		return plan{keep: held, reason: ReasonInvalidName, message: fmt.Sprintf(
			"metadata.name: %q cannot hold nodes: a GlobalNode records its holder by a name of lower-case letters, digits and '-' (%s); create the VirtualCluster under such a name",
			vc.Name, strings.Join(errs, "; "))}
	}
	return planFor(req, holder, nodes)
}

// condition is the NodesAssigned condition of a plan, once carried out: the
// VirtualCluster then holds assigned nodes.
func condition(p plan, assigned int, generation int64) metav1.Condition {
	c := metav1.Condition{Type: nestv1.ConditionNodesAssigned, Status: metav1.ConditionFalse, Reason: p.reason, Message: p.message, ObservedGeneration: generation}
	switch {
	case p.met && p.reason == ReasonNoneRequested:
		c.Status = metav1.ConditionTrue
	case p.met:
		c.Status, c.Reason = metav1.ConditionTrue, ReasonAssigned
		c.Message = fmt.Sprintf("holds the %s its promotePolicies and nodeInfos ask for (status.assignedNodes); "+
			"node promotion moves them into the tenant cluster (see each GlobalNode's phase)", count(assigned, "GlobalNode"))
	}
	if len(c.Message) > maxConditionMessage {
		c.Message = c.Message[:maxConditionMessage]
	}
	return c
}

// count is n things, as "1 node" or "2 nodes".
func count(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

// maxConditionMessage is metav1.Condition's limit on Message.
const maxConditionMessage = 32768
