package globalnode

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
)

func node(labels map[string]string, addrs ...corev1.NodeAddress) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: labels}, Status: corev1.NodeStatus{Addresses: addrs}}
}

func internal(ip string) corev1.NodeAddress {
	return corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip}
}

func TestNodeIP(t *testing.T) {
	tests := []struct {
		name  string
		addrs []corev1.NodeAddress
		want  string
	}{
		{"none", nil, ""},
		{"the first InternalIP, after other types", []corev1.NodeAddress{
			{Type: corev1.NodeHostName, Address: "worker-1"}, {Type: corev1.NodeExternalIP, Address: "203.0.113.5"},
			internal("198.51.100.11"), internal("2001:db8::11"),
		}, "198.51.100.11"},
		{"IPv6 first", []corev1.NodeAddress{internal("2001:db8::11"), internal("198.51.100.11")}, "2001:db8::11"},
		{"an ExternalIP only", []corev1.NodeAddress{{Type: corev1.NodeExternalIP, Address: "203.0.113.5"}}, ""},
		{"an empty InternalIP is skipped", []corev1.NodeAddress{internal(""), internal("198.51.100.12")}, "198.51.100.12"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := NodeIP(node(nil, tt.addrs...)); got != tt.want {
				t.Errorf("NodeIP = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestNotPromotable(t *testing.T) {
	ip := internal("198.51.100.11")
	tests := []struct {
		name string
		node *corev1.Node
		// want is a part of the reason, "" when the node may be promoted.
		want string
	}{
		{"worker", node(map[string]string{"node-role.kubernetes.io/worker": ""}, ip), ""},
		{"no labels", node(nil, ip), ""},
		{"control-plane role", node(map[string]string{LabelControlPlane: ""}, ip), LabelControlPlane},
		{"control-plane role with a value", node(map[string]string{LabelControlPlane: "true"}, ip), LabelControlPlane},
		{"legacy master role", node(map[string]string{LabelMaster: ""}, ip), LabelMaster},
		{"a look-alike label is not the role", node(map[string]string{"example.com/control-plane": ""}, ip), ""},
		{"no InternalIP yet", node(nil), "InternalIP"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := notPromotable(tt.node)
			if (got == "") != (tt.want == "") || !strings.Contains(got, tt.want) {
				t.Errorf("notPromotable = %q, want a reason naming %q", got, tt.want)
			}
		})
	}
}

func TestSpecForCopiesTheLabels(t *testing.T) {
	n := node(map[string]string{"zone": "a"}, internal("198.51.100.11"))
	spec := specFor(n)
	if spec.NodeIP != "198.51.100.11" || spec.State != nestv1.NodeStateFree || spec.Labels["zone"] != "a" {
		t.Errorf("spec = %+v", spec)
	}
	n.Labels["zone"] = "b"
	if spec.Labels["zone"] != "a" {
		t.Error("the spec shares its labels map with the Node")
	}
}

// heldBy marks gn with the annotation node assignment records its holder in.
func heldBy(gn *nestv1.GlobalNode, holder string) *nestv1.GlobalNode {
	gn.Annotations = map[string]string{nestv1.AnnotationHeldBy: holder}
	return gn
}

func TestInHost(t *testing.T) {
	gn := func(state nestv1.NodeState, holder string, phase nestv1.NodePhase) *nestv1.GlobalNode {
		return &nestv1.GlobalNode{Spec: nestv1.GlobalNodeSpec{State: state}, Status: nestv1.GlobalNodeStatus{VirtualCluster: holder, Phase: phase}}
	}
	tests := []struct {
		name string
		gn   *nestv1.GlobalNode
		want bool
	}{
		{"free, status not written yet", gn(nestv1.NodeStateFree, "", ""), true},
		{"free in the host", gn(nestv1.NodeStateFree, "", nestv1.NodePhaseHost), true},
		{"reserved", gn(nestv1.NodeStateReserved, "vc-a/a", nestv1.NodePhaseDraining), false},
		{"occupied", gn(nestv1.NodeStateOccupied, "vc-a/a", nestv1.NodePhaseTenant), false},
		{"reserved, holder not written yet", gn(nestv1.NodeStateReserved, "", nestv1.NodePhaseHost), false},
		{"free but a holder is named", gn(nestv1.NodeStateFree, "vc-a/a", nestv1.NodePhaseHost), false},
		{"free while returning", gn(nestv1.NodeStateFree, "", nestv1.NodePhaseReturning), false},
		{"free after a failure", gn(nestv1.NodeStateFree, "", nestv1.NodePhaseFailed), false},
		{"free but the held-by annotation names a holder", heldBy(gn(nestv1.NodeStateFree, "", nestv1.NodePhaseHost), "vc-a/a"), false},
		{"reserved by node assignment, status not written yet", heldBy(gn(nestv1.NodeStateReserved, "", nestv1.NodePhaseHost), "vc-a/a"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := inHost(tt.gn); got != tt.want {
				t.Errorf("inHost = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestNodeChanged(t *testing.T) {
	before := node(map[string]string{"zone": "a"}, internal("198.51.100.11"))
	heartbeat := before.DeepCopy()
	heartbeat.ResourceVersion = "2"
	heartbeat.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now()}}
	relabelled := before.DeepCopy()
	relabelled.Labels["zone"] = "b"
	unlabelled := before.DeepCopy()
	unlabelled.Labels = nil
	readdressed := before.DeepCopy()
	readdressed.Status.Addresses = []corev1.NodeAddress{internal("198.51.100.12")}
	hostname := before.DeepCopy()
	hostname.Status.Addresses = append(hostname.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeHostName, Address: "n"})

	tests := []struct {
		name  string
		after *corev1.Node
		want  bool
	}{
		{"kubelet heartbeat", heartbeat, false},
		{"a label changed", relabelled, true},
		{"labels removed", unlabelled, true},
		{"InternalIP changed", readdressed, true},
		{"another address type added", hostname, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := nodeChanged.Update(event.UpdateEvent{ObjectOld: before, ObjectNew: tt.after}); got != tt.want {
				t.Errorf("Update = %v, want %v", got, tt.want)
			}
		})
	}
	if !nodeChanged.Delete(event.DeleteEvent{Object: before}) || !nodeChanged.Create(event.CreateEvent{Object: before}) {
		t.Error("Node creates and deletes must be reconciled")
	}
}
