package virtualcluster

import (
	"net/netip"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
)

// The node addresses a tenant API server's certificate names stay the same
// while node promotion moves a worker out of the host and back.
func TestHostNodeIPsStayTheSameWhileANodeIsAway(t *testing.T) {
	node := func(name, ip string, cp bool) corev1.Node {
		n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: name}, {Type: corev1.NodeInternalIP, Address: ip}}}}
		if cp {
			n.Labels["node-role.kubernetes.io/control-plane"] = ""
		}
		return n
	}
	gn := func(name, ip string) nestv1.GlobalNode {
		return nestv1.GlobalNode{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: nestv1.GlobalNodeSpec{NodeIP: ip}}
	}
	cp, a, b := node("z-cp", "198.51.100.10", true), node("a-worker", "198.51.100.11", false), node("b-worker", "198.51.100.12", false)
	globalNodes := []nestv1.GlobalNode{gn("a-worker", "198.51.100.11"), gn("b-worker", "198.51.100.12")}
	want := []string{"198.51.100.10", "198.51.100.11", "198.51.100.12"}
	for name, nodes := range map[string][]corev1.Node{
		"all in the host":   {b, a, cp},
		"a-worker promoted": {b, cp},
		"both promoted":     {cp},
	} {
		if got := hostNodeIPs(nodes, globalNodes); !slices.Equal(got, want) {
			t.Errorf("%s: %v, want %v", name, got, want)
		}
	}
	if got := hostNodeIPs([]corev1.Node{cp, a}, nil); !slices.Equal(got, want[:2]) {
		t.Errorf("without GlobalNodes: %v, want %v", got, want[:2])
	}
}

// The NetworkPolicies of a VirtualCluster admit the pod CIDRs of the nodes
// that hold its pods, and only those inside a host pod range and narrower
// than it.
func TestPodCIDRsOfMovedNodesOfTheHolder(t *testing.T) {
	gn := func(name, holder string, phase nestv1.NodePhase, cidr string) nestv1.GlobalNode {
		return nestv1.GlobalNode{ObjectMeta: metav1.ObjectMeta{Name: name},
			Status: nestv1.GlobalNodeStatus{VirtualCluster: holder, Phase: phase, PodCIDR: cidr}}
	}
	nodes := []nestv1.GlobalNode{
		gn("a", "vc-a/a", nestv1.NodePhaseTenant, "10.244.2.0/24"),
		gn("b", "vc-a/a", nestv1.NodePhaseJoining, "10.244.1.7/24"),
		gn("c", "vc-b/b", nestv1.NodePhaseTenant, "10.244.3.0/24"),
		gn("d", "vc-a/a", nestv1.NodePhaseHost, "10.244.4.0/24"),
		gn("e", "vc-a/a", nestv1.NodePhaseTenant, "not a cidr"),
		gn("f", "vc-a/a", nestv1.NodePhaseLeaving, "10.244.5.0/24"),
		gn("g", "vc-a/a", nestv1.NodePhaseReturning, "10.244.6.0/24"),
		gn("h", "vc-a/a", nestv1.NodePhaseReleasing, "10.244.7.0/24"),
		gn("i", "vc-a/a", nestv1.NodePhaseFailed, "10.244.8.0/24"),
		// What an agent on a node a tenant had root on might report.
		gn("j", "vc-a/a", nestv1.NodePhaseTenant, "10.244.0.0/16"),
		gn("k", "vc-a/a", nestv1.NodePhaseTenant, "0.0.0.0/0"),
		gn("l", "vc-a/a", nestv1.NodePhaseTenant, "169.254.169.0/24"),
		gn("m", "vc-a/a", nestv1.NodePhaseTenant, "10.96.0.0/24"),
	}
	var got []string
	for _, p := range podCIDRsOf(nodes, "vc-a/a", []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}) {
		got = append(got, p.String())
	}
	if want := []string{"10.244.1.0/24", "10.244.2.0/24", "10.244.7.0/24", "10.244.8.0/24"}; !slices.Equal(got, want) {
		t.Errorf("podCIDRsOf = %v, want %v", got, want)
	}
}

// The egress proxy lets the tenant API server reach the kubelets of the
// nodes that hold its pods, at their spec.nodeIP: the holder's only, in the
// phases its pods are there, and only what parses as an address.
func TestNodeIPsOfMovedNodesOfTheHolder(t *testing.T) {
	gn := func(name, holder string, phase nestv1.NodePhase, ip string) nestv1.GlobalNode {
		return nestv1.GlobalNode{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: nestv1.GlobalNodeSpec{NodeIP: ip},
			Status: nestv1.GlobalNodeStatus{VirtualCluster: holder, Phase: phase}}
	}
	nodes := []nestv1.GlobalNode{
		gn("a", "vc-a/a", nestv1.NodePhaseTenant, "172.18.0.9"),
		gn("b", "vc-a/a", nestv1.NodePhaseJoining, "172.18.0.3"),
		gn("c", "vc-b/b", nestv1.NodePhaseTenant, "172.18.0.4"),
		gn("d", "vc-a/a", nestv1.NodePhaseHost, "172.18.0.5"),
		gn("e", "vc-a/a", nestv1.NodePhaseTenant, "not an address"),
		gn("f", "vc-a/a", nestv1.NodePhaseLeaving, "172.18.0.6"),
		gn("g", "vc-a/a", nestv1.NodePhaseReturning, "172.18.0.7"),
		gn("h", "vc-a/a", nestv1.NodePhaseReleasing, "::ffff:172.18.0.8"),
		gn("i", "vc-a/a", nestv1.NodePhaseFailed, "fc00::10"),
		gn("j", "", nestv1.NodePhaseTenant, "172.18.0.11"),
		gn("k", "vc-a/a", nestv1.NodePhaseTenant, ""),
	}
	var got []string
	for _, a := range nodeIPsOf(nodes, "vc-a/a") {
		got = append(got, a.String())
	}
	if want := []string{"172.18.0.3", "172.18.0.8", "172.18.0.9", "fc00::10"}; !slices.Equal(got, want) {
		t.Errorf("nodeIPsOf = %v, want %v", got, want)
	}
}
