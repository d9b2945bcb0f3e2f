package globalnode

import (
	"maps"

	corev1 "k8s.io/api/core/v1"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
)

// Role labels of control-plane nodes. Either one, with any value, keeps a
// node out of the inventory: tenant control planes run there, and a host
// must keep its own control plane.
const (
	LabelControlPlane = "node-role.kubernetes.io/control-plane"
	// LabelMaster is the control-plane role label before Kubernetes v1.20;
	// older installers still set it.
	LabelMaster = "node-role.kubernetes.io/master"
)

// notPromotable says why node may not be promoted, or "" when it may. A node
// that may be promoted gets a GlobalNode.
func notPromotable(node *corev1.Node) string {
	for _, l := range []string{LabelControlPlane, LabelMaster} {
		if _, ok := node.Labels[l]; ok {
			return "it has the control-plane role (label " + l + ")"
		}
	}
	if NodeIP(node) == "" {
		return "it has reported no InternalIP, where its nest-agent would be reached"
	}
	return ""
}

// NodeIP is the node's first InternalIP, or "" when it reported none.
func NodeIP(node *corev1.Node) string {
	for _, a := range node.Status.Addresses {
		if a.Type == corev1.NodeInternalIP && a.Address != "" {
			return a.Address
		}
	}
	return ""
}

// specFor is the spec of a free GlobalNode for node.
func specFor(node *corev1.Node) nestv1.GlobalNodeSpec {
	return nestv1.GlobalNodeSpec{NodeIP: NodeIP(node), State: nestv1.NodeStateFree, Labels: maps.Clone(node.Labels)}
}

// inHost is true when no VirtualCluster holds gn and its node is in the host
// cluster: the only GlobalNodes this controller changes or deletes. A holder
// is named by the nest.dev/held-by annotation (node assignment sets it with
// state reserved, in one write) or status.virtualCluster. Any other state or
// phase is node promotion's to change. An empty phase is a GlobalNode whose
// status was not written yet.
func inHost(gn *nestv1.GlobalNode) bool {
	return gn.Spec.State == nestv1.NodeStateFree && gn.Status.VirtualCluster == "" && gn.Annotations[nestv1.AnnotationHeldBy] == "" &&
		(gn.Status.Phase == "" || gn.Status.Phase == nestv1.NodePhaseHost)
}
