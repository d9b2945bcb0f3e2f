package kube

import corev1 "k8s.io/api/core/v1"

// NodeReady reports whether node is Ready: its NodeReady condition has
// status True. A node without that condition, or whose condition is False
// or Unknown (the node lifecycle controller's word for a kubelet that
// stopped reporting), is not. It follows upstream's IsNodeReady
// (k8s.io/kubernetes/pkg/util/node), which reads the first NodeReady
// condition only. Whether the node takes new pods (spec.unschedulable,
// taints) is the caller's to check.
func NodeReady(node *corev1.Node) bool {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
