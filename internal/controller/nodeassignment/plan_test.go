package nodeassignment

import (
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
)

const me = "vc-me/me"

// node is a free GlobalNode in the host with its Node present, changed by opts.
func node(name string, labels map[string]string, opts ...func(*nestv1.GlobalNode)) nestv1.GlobalNode {
	gn := nestv1.GlobalNode{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       nestv1.GlobalNodeSpec{NodeIP: "198.51.100.11", State: nestv1.NodeStateFree, Labels: labels},
		Status: nestv1.GlobalNodeStatus{Phase: nestv1.NodePhaseHost, Conditions: []metav1.Condition{
			{Type: nestv1.ConditionHostNodePresent, Status: metav1.ConditionTrue, Reason: "NodePresent"},
		}},
	}
	for _, o := range opts {
		o(&gn)
	}
	return gn
}

// held marks a node as node assignment does when holder claims it.
func held(holder string) func(*nestv1.GlobalNode) {
	return func(gn *nestv1.GlobalNode) {
		gn.Annotations = map[string]string{nestv1.AnnotationHeldBy: holder}
		gn.Spec.State = nestv1.NodeStateReserved
		gn.Status.VirtualCluster = holder
	}
}

func pool(p string) map[string]string { return map[string]string{"pool": p} }

func policies(ps ...nestv1.PromotePolicy) request {
	var req request
	vc := &nestv1.VirtualCluster{Spec: nestv1.VirtualClusterSpec{PromotePolicies: ps}}
	req, err := requestOf(vc)
	if err != nil {
		panic(err)
	}
	return req
}

func poolOf(p string, count int32) nestv1.PromotePolicy {
	return nestv1.PromotePolicy{LabelSelector: metav1.LabelSelector{MatchLabels: pool(p)}, NodeCount: count}
}

func TestUnavailable(t *testing.T) {
	deleting := metav1.Now()
	tests := []struct {
		name string
		gn   nestv1.GlobalNode
		want string // a part of the reason; "" when the node may be claimed
	}{
		{"free in the host", node("a", nil), ""},
		{"status never written", node("a", nil, func(gn *nestv1.GlobalNode) { gn.Status = nestv1.GlobalNodeStatus{} }), ""},
		{"held by a VirtualCluster", node("a", nil, held("vc-x/x")), "VirtualCluster vc-x/x holds it"},
		{"annotation only", node("a", nil, func(gn *nestv1.GlobalNode) { gn.Annotations = map[string]string{nestv1.AnnotationHeldBy: "vc-x/x"} }), "vc-x/x"},
		{"status names a holder", node("a", nil, func(gn *nestv1.GlobalNode) { gn.Status.VirtualCluster = "vc-x/x" }), "vc-x/x"},
		{"reserved without a holder", node("a", nil, func(gn *nestv1.GlobalNode) { gn.Spec.State = nestv1.NodeStateReserved }), "state is reserved"},
		{"in the tenant", node("a", nil, func(gn *nestv1.GlobalNode) { gn.Status.Phase = nestv1.NodePhaseTenant }), "phase Tenant"},
		{"host Node absent", node("a", nil, func(gn *nestv1.GlobalNode) { gn.Status.Conditions[0].Status = metav1.ConditionFalse }), "no Node a"},
		{"being deleted", node("a", nil, func(gn *nestv1.GlobalNode) { gn.DeletionTimestamp = &deleting }), "being deleted"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := unavailable(&tt.gn)
			if (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
				t.Errorf("unavailable = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestPlanFor(t *testing.T) {
	everything := nestv1.PromotePolicy{NodeCount: 1}
	tests := []struct {
		name                 string
		req                  request
		nodes                []nestv1.GlobalNode
		keep, claim, release []string
		reason               string // "" when met
		message              []string
	}{
		{
			name:  "the lowest free matching names are claimed",
			req:   policies(poolOf("gpu", 2)),
			nodes: []nestv1.GlobalNode{node("c", pool("gpu")), node("b", pool("cpu")), node("d", pool("gpu")), node("a", pool("gpu"))},
			claim: []string{"a", "c"},
		},
		{
			name:  "held nodes are kept before free ones are claimed",
			req:   policies(poolOf("gpu", 2)),
			nodes: []nestv1.GlobalNode{node("a", pool("gpu")), node("z", pool("gpu"), held(me))},
			keep:  []string{"z"}, claim: []string{"a"},
		},
		{
			name:  "a lower count releases the highest names",
			req:   policies(poolOf("gpu", 1)),
			nodes: []nestv1.GlobalNode{node("c", pool("gpu"), held(me)), node("a", pool("gpu"), held(me)), node("b", pool("gpu"), held(me))},
			keep:  []string{"a"}, release: []string{"b", "c"},
		},
		{
			name:    "too few matching nodes claims nothing",
			req:     policies(poolOf("gpu", 2)),
			nodes:   []nestv1.GlobalNode{node("a", pool("gpu")), node("b", pool("cpu"))},
			reason:  ReasonInsufficientNodes,
			message: []string{"spec.promotePolicies[0]", "pool=gpu", "wants 2 nodes, found 1", "no node is claimed"},
		},
		{
			name:    "too few keeps what is held and claims nothing more",
			req:     policies(poolOf("gpu", 3)),
			nodes:   []nestv1.GlobalNode{node("a", pool("gpu"), held(me)), node("b", pool("gpu"))},
			keep:    []string{"a"},
			reason:  ReasonInsufficientNodes,
			message: []string{"wants 3 nodes, found 2"},
		},
		{
			name: "nodes others hold or that are not in the host are not candidates",
			req:  policies(poolOf("gpu", 1)),
			nodes: []nestv1.GlobalNode{
				node("a", pool("gpu"), held("vc-x/x")),
				node("b", pool("gpu"), func(gn *nestv1.GlobalNode) { gn.Spec.State = nestv1.NodeStateReserved }),
				node("c", pool("gpu"), func(gn *nestv1.GlobalNode) { gn.Status.Phase = nestv1.NodePhaseFailed }),
				node("d", pool("gpu"), func(gn *nestv1.GlobalNode) { gn.Status.Conditions[0].Status = metav1.ConditionFalse }),
			},
			reason:  ReasonInsufficientNodes,
			message: []string{"found 0"},
		},
		{
			name:  "an empty selector matches every node",
			req:   policies(everything),
			nodes: []nestv1.GlobalNode{node("b", pool("cpu")), node("a", nil)},
			claim: []string{"a"},
		},
		{
			name:  "a named node is claimed, and a policy takes another",
			req:   request{nodeNames: []string{"a"}, policies: policies(poolOf("gpu", 1)).policies},
			nodes: []nestv1.GlobalNode{node("a", pool("gpu")), node("b", pool("gpu"))},
			claim: []string{"a", "b"},
		},
		{
			name:  "a named node already held is kept",
			req:   request{nodeNames: []string{"a"}},
			nodes: []nestv1.GlobalNode{node("a", nil, held(me))},
			keep:  []string{"a"},
		},
		{
			name:  "a node no longer named is released",
			req:   request{nodeNames: []string{"b"}},
			nodes: []nestv1.GlobalNode{node("a", nil, held(me)), node("b", nil)},
			claim: []string{"b"}, release: []string{"a"},
		},
		{
			name:    "a named node without a GlobalNode is refused",
			req:     request{nodeNames: []string{"gone"}},
			nodes:   []nestv1.GlobalNode{node("a", nil)},
			reason:  ReasonNodeUnavailable,
			message: []string{"spec.promoteResources.nodeInfos[0]", "no GlobalNode gone"},
		},
		{
			name:    "a named node another holds is refused, and nothing else is claimed",
			req:     request{nodeNames: []string{"b", "a"}},
			nodes:   []nestv1.GlobalNode{node("a", nil, held("vc-x/x")), node("b", nil)},
			reason:  ReasonNodeUnavailable,
			message: []string{"spec.promoteResources.nodeInfos[1]", "GlobalNode a", "VirtualCluster vc-x/x holds it"},
		},
		{
			name: "a refusal still releases held nodes the spec no longer asks for",
			req:  request{nodeNames: []string{"gone"}, policies: policies(poolOf("gpu", 1)).policies},
			nodes: []nestv1.GlobalNode{
				node("a", pool("gpu"), held(me)), node("b", pool("cpu"), held(me)),
			},
			keep: []string{"a"}, release: []string{"b"},
			reason: ReasonNodeUnavailable,
		},
		{
			name:  "overlapping selectors are served greedily, in spec order",
			req:   policies(everything, poolOf("gpu", 1)),
			nodes: []nestv1.GlobalNode{node("a", pool("gpu")), node("b", pool("cpu"))},
			// The first policy takes a, which the second needed.
			reason:  ReasonInsufficientNodes,
			message: []string{"spec.promotePolicies[1]", "found 0"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := planFor(tt.req, me, tt.nodes)
			if !slices.Equal(p.keep, tt.keep) || !slices.Equal(p.claim, tt.claim) || !slices.Equal(p.release, tt.release) {
				t.Errorf("keep %v claim %v release %v, want %v %v %v", p.keep, p.claim, p.release, tt.keep, tt.claim, tt.release)
			}
			if p.met != (tt.reason == "") || p.reason != tt.reason {
				t.Errorf("met %v reason %q, want reason %q", p.met, p.reason, tt.reason)
			}
			for _, w := range tt.message {
				if !strings.Contains(p.message, w) {
					t.Errorf("message %q does not contain %q", p.message, w)
				}
			}
		})
	}
}

func TestAssess(t *testing.T) {
	vc := func(name string, spec nestv1.VirtualClusterSpec) *nestv1.VirtualCluster {
		return &nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "vc-me"}, Spec: spec}
	}
	invalid := nestv1.PromotePolicy{NodeCount: 1, LabelSelector: metav1.LabelSelector{
		MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "pool", Operator: metav1.LabelSelectorOpIn}},
	}}
	nodes := []nestv1.GlobalNode{node("a", pool("gpu"), held(me)), node("b", pool("gpu"))}
	tests := []struct {
		name            string
		vc              *nestv1.VirtualCluster
		nsHolder        string
		keep, release   []string
		claim           []string
		met             bool
		reason, message string
	}{
		{
			name: "a policy is planned", vc: vc("me", nestv1.VirtualClusterSpec{PromotePolicies: []nestv1.PromotePolicy{poolOf("gpu", 2)}}), nsHolder: "me",
			keep: []string{"a"}, claim: []string{"b"}, met: true,
		},
		{
			name: "nothing asked for releases what is held", vc: vc("me", nestv1.VirtualClusterSpec{}), nsHolder: "me",
			release: []string{"a"}, met: true, reason: ReasonNoneRequested,
		},
		{
			name: "a zero nodeCount asks for nothing", vc: vc("me", nestv1.VirtualClusterSpec{PromotePolicies: []nestv1.PromotePolicy{poolOf("gpu", 0)}}), nsHolder: "me",
			release: []string{"a"}, met: true, reason: ReasonNoneRequested,
		},
		{
			name: "an invalid selector names the field and keeps what is held", vc: vc("me", nestv1.VirtualClusterSpec{PromotePolicies: []nestv1.PromotePolicy{poolOf("gpu", 1), invalid}}), nsHolder: "me",
			keep: []string{"a"}, reason: ReasonInvalidPolicy, message: "spec.promotePolicies[1].labelSelector: ",
		},
		{
			name: "a VirtualCluster refused its namespace holds nothing", vc: vc("me", nestv1.VirtualClusterSpec{PromotePolicies: []nestv1.PromotePolicy{poolOf("gpu", 1)}}), nsHolder: "first",
			release: []string{"a"}, reason: ReasonNamespaceInUse, message: "already holds VirtualCluster first",
		},
		{
			name: "a name a GlobalNode cannot record is refused", vc: vc("me.x", nestv1.VirtualClusterSpec{PromotePolicies: []nestv1.PromotePolicy{poolOf("gpu", 1)}}), nsHolder: "me.x",
			reason: ReasonInvalidName, message: "metadata.name: ",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := assess(tt.vc, tt.nsHolder, nodes)
			if !slices.Equal(p.keep, tt.keep) || !slices.Equal(p.claim, tt.claim) || !slices.Equal(p.release, tt.release) {
				t.Errorf("keep %v claim %v release %v, want %v %v %v", p.keep, p.claim, p.release, tt.keep, tt.claim, tt.release)
			}
			if p.met != tt.met || p.reason != tt.reason || !strings.Contains(p.message, tt.message) {
				t.Errorf("met %v reason %q message %q, want %v %q containing %q", p.met, p.reason, p.message, tt.met, tt.reason, tt.message)
			}
		})
	}
}

func TestCondition(t *testing.T) {
	tests := []struct {
		name    string
		p       plan
		status  metav1.ConditionStatus
		reason  string
		message string
	}{
		{"met", plan{met: true, claim: []string{"a"}}, metav1.ConditionTrue, ReasonAssigned, "holds the 2 GlobalNodes its"},
		{"nothing asked for", plan{met: true, reason: ReasonNoneRequested, message: "none"}, metav1.ConditionTrue, ReasonNoneRequested, "none"},
		{"not met", plan{reason: ReasonInsufficientNodes, message: "too few"}, metav1.ConditionFalse, ReasonInsufficientNodes, "too few"},
		{"too long a message is cut", plan{reason: ReasonNodeUnavailable, message: strings.Repeat("x", maxConditionMessage+10)}, metav1.ConditionFalse, ReasonNodeUnavailable, "xxx"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := condition(tt.p, 2, 7)
			if c.Type != nestv1.ConditionNodesAssigned || c.Status != tt.status || c.Reason != tt.reason || !strings.Contains(c.Message, tt.message) || c.ObservedGeneration != 7 {
				t.Errorf("condition = %+v, want %s %s containing %q at generation 7", c, tt.status, tt.reason, tt.message)
			}
			if len(c.Message) > maxConditionMessage {
				t.Errorf("message of %d bytes, want at most %d", len(c.Message), maxConditionMessage)
			}
		})
	}
}

func TestWaiting(t *testing.T) {
	asks := nestv1.VirtualClusterSpec{PromotePolicies: []nestv1.PromotePolicy{poolOf("gpu", 1)}}
	with := func(spec nestv1.VirtualClusterSpec, status metav1.ConditionStatus) *nestv1.VirtualCluster {
		vc := &nestv1.VirtualCluster{Spec: spec}
		if status != "" {
			vc.Status.Conditions = []metav1.Condition{{Type: nestv1.ConditionNodesAssigned, Status: status}}
		}
		return vc
	}
	deleting := with(asks, metav1.ConditionFalse)
	now := metav1.Now()
	deleting.DeletionTimestamp = &now
	tests := []struct {
		name string
		vc   *nestv1.VirtualCluster
		want bool
	}{
		{"refused", with(asks, metav1.ConditionFalse), true},
		{"not assessed yet", with(asks, ""), true},
		{"assigned", with(asks, metav1.ConditionTrue), false},
		{"asks for nothing", with(nestv1.VirtualClusterSpec{}, metav1.ConditionFalse), false},
		{"names a node", with(nestv1.VirtualClusterSpec{PromoteResources: nestv1.PromoteResources{NodeInfos: []nestv1.NodeInfo{{NodeName: "a"}}}}, ""), true},
		{"being deleted", deleting, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := waiting(tt.vc); got != tt.want {
				t.Errorf("waiting = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestHolderKey(t *testing.T) {
	key := types.NamespacedName{Namespace: "vc-a", Name: "a"}
	if got := holderKey(key); got != "vc-a/a" {
		t.Errorf("holderKey = %q", got)
	}
	if got, ok := parseHolder(holderKey(key)); !ok || got != key {
		t.Errorf("parseHolder(holderKey) = %v %v, want %v", got, ok, key)
	}
	for _, bad := range []string{"", "a", "/a", "a/"} {
		if _, ok := parseHolder(bad); ok {
			t.Errorf("parseHolder(%q) accepted it", bad)
		}
	}
}
