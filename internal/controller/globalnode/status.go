package globalnode

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
)

// Reasons of the HostNodePresent condition.
const (
	// ReasonNodePresent: the host cluster has the GlobalNode's Node.
	ReasonNodePresent = "NodePresent"
	// ReasonNodeAbsent: the host cluster has no Node of the GlobalNode's name.
	ReasonNodeAbsent = "NodeAbsent"
)

// hostNodeCondition is the HostNodePresent condition of gn when its host
// Node is present or not.
func hostNodeCondition(gn *nestv1.GlobalNode, present bool) metav1.Condition {
	c := metav1.Condition{
		Type: nestv1.ConditionHostNodePresent, Status: metav1.ConditionTrue, Reason: ReasonNodePresent,
		Message: fmt.Sprintf("the host cluster has Node %s", gn.Name), ObservedGeneration: gn.Generation,
	}
	if present {
		return c
	}
	c.Status, c.Reason = metav1.ConditionFalse, ReasonNodeAbsent
	switch {
	case gn.Status.VirtualCluster != "":
		c.Message = fmt.Sprintf("the host cluster has no Node %s: the node is away while VirtualCluster %s holds it (state %s)",
			gn.Name, gn.Status.VirtualCluster, gn.Spec.State)
	case gn.Spec.State != nestv1.NodeStateFree:
		c.Message = fmt.Sprintf("the host cluster has no Node %s: the GlobalNode is %s, so it is kept for the node's return", gn.Name, gn.Spec.State)
	default:
		c.Message = fmt.Sprintf("the host cluster has no Node %s: the GlobalNode is kept while its phase is %s", gn.Name, gn.Status.Phase)
	}
	return c
}

// phaseFor is the phase gn should report: a GlobalNode in the host whose
// status was never written is in phase Host. Every other phase is node
// promotion's to set, so it is kept.
func phaseFor(gn *nestv1.GlobalNode) nestv1.NodePhase {
	if gn.Status.Phase == "" && inHost(gn) {
		return nestv1.NodePhaseHost
	}
	return gn.Status.Phase
}
