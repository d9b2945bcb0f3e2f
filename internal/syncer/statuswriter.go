package syncer

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
)

// gatedStatusPods is the tenant pod client virtual-kubelet writes pod
// statuses with. virtual-kubelet writes the whole status the provider last
// reported, at the resource version of its own informer's copy. The
// conditions of a pod's readiness gates are the tenant's, though: a
// tenant controller sets them, and the status the provider reported read
// them from the syncer's informer, which may not have seen the latest
// change yet. Written as they are, they would undo it (a lost update: the
// tenant's False stays True). So, as the kubelet's status manager reads
// the pod from the API server before it patches, the status of a pod with
// readiness gates takes their conditions from the pod read just before the
// write, and is written at that pod's resource version: a change between
// the two is a conflict, which virtual-kubelet retries.
type gatedStatusPods struct{ corev1client.PodsGetter }

// Pods returns the namespace's pod client, its UpdateStatus as above.
func (g gatedStatusPods) Pods(namespace string) corev1client.PodInterface {
	return gatedStatusPodClient{g.PodsGetter.Pods(namespace)}
}

type gatedStatusPodClient struct{ corev1client.PodInterface }

// UpdateStatus writes pod's status, its readiness gates' conditions and
// its Ready taken from the tenant pod as the API server has it now. A pod
// replaced since (another UID) is NotFound, which virtual-kubelet ignores.
func (c gatedStatusPodClient) UpdateStatus(ctx context.Context, pod *corev1.Pod, opts metav1.UpdateOptions) (*corev1.Pod, error) {
	if len(pod.Spec.ReadinessGates) == 0 {
		return c.PodInterface.UpdateStatus(ctx, pod, opts)
	}
	cur, err := c.Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	if cur.UID != pod.UID {
		return nil, apierrors.NewNotFound(corev1.Resource("pods"), pod.Name)
	}
	pod = pod.DeepCopy()
	// A write virtual-kubelet makes unconditional (no resource version, as
	// for a provider's error) stays so: it does not retry a conflict.
	if pod.ResourceVersion != "" {
		pod.ResourceVersion = cur.ResourceVersion
	}
	pod.Status.Conditions = withCurrentGates(pod.Status.Conditions, cur)
	return c.PodInterface.UpdateStatus(ctx, pod, opts)
}

// withCurrentGates returns a tenant status' conditions with the readiness
// gates' conditions of cur, the tenant pod as it is now, and Ready following
// them: False while one is not True where the host said True, and back to
// the host's True once they all are. A gate named like one of the kubelet's
// own conditions stays the host's (withTenantConditions).
func withCurrentGates(conditions []corev1.PodCondition, cur *corev1.Pod) []corev1.PodCondition {
	out := make([]corev1.PodCondition, 0, len(conditions)+len(cur.Spec.ReadinessGates))
	gates := map[corev1.PodConditionType]bool{}
	for _, g := range cur.Spec.ReadinessGates {
		gates[g.ConditionType] = !kubeletConditions[g.ConditionType]
	}
	for _, c := range conditions {
		if !gates[c.Type] {
			out = append(out, c)
		}
	}
	for _, c := range cur.Status.Conditions {
		if gates[c.Type] {
			out = append(out, c)
		}
	}
	gateReady(out, cur)
	return out
}

// kubeletConditions are the pod conditions a kubelet sets itself.
var kubeletConditions = map[corev1.PodConditionType]bool{
	corev1.PodScheduled: true, corev1.PodReady: true, corev1.ContainersReady: true,
	corev1.PodInitialized: true, corev1.PodReadyToStartContainers: true, corev1.DisruptionTarget: true,
	corev1.PodResizePending: true, corev1.PodResizeInProgress: true,
}

// gateReady makes the Ready condition among conditions follow the tenant
// pod's readiness gates, as the kubelet does (the host pod has no gates,
// so the host's Ready is its containers'): a True Ready becomes False
// while a gate's condition is not True; a Ready made False for that alone
// is True again once every gate's condition is.
func gateReady(conditions []corev1.PodCondition, tenant *corev1.Pod) {
	gate, unmet := unmetReadinessGate(tenant)
	for i := range conditions {
		c := &conditions[i]
		if c.Type != corev1.PodReady {
			continue
		}
		switch {
		case unmet && c.Status == corev1.ConditionTrue:
			c.Status, c.Reason = corev1.ConditionFalse, readinessGatesNotReady
			c.Message = fmt.Sprintf("corresponding condition of pod readiness gate %q is not True", gate)
			c.LastTransitionTime = gateTransition(tenant, gate, c.LastTransitionTime)
		case !unmet && c.Status == corev1.ConditionFalse && c.Reason == readinessGatesNotReady:
			c.Status, c.Reason, c.Message = corev1.ConditionTrue, "", ""
			c.LastTransitionTime = lastGateTransition(tenant, c.LastTransitionTime)
		}
	}
}

// gateTransition is when the tenant's condition of gate last changed, or
// host (the host's Ready transition) when that is later or unknown: Ready
// went False at the later of the two.
func gateTransition(tenant *corev1.Pod, gate corev1.PodConditionType, host metav1.Time) metav1.Time {
	for _, c := range tenant.Status.Conditions {
		if c.Type == gate && host.Before(&c.LastTransitionTime) {
			return c.LastTransitionTime
		}
	}
	return host
}

// lastGateTransition is when the last of the tenant pod's readiness gates'
// conditions became what it is, or host when that is later: Ready went
// True then (a Deployment's minReadySeconds counts from it).
func lastGateTransition(tenant *corev1.Pod, host metav1.Time) metav1.Time {
	latest := host
	for _, g := range tenant.Spec.ReadinessGates {
		latest = gateTransition(tenant, g.ConditionType, latest)
	}
	return latest
}

// readinessGatesNotReady is the kubelet's reason for a pod whose containers
// are ready but a readiness gate's condition is not True.
const readinessGatesNotReady = "ReadinessGatesNotReady"
