package nodepromotion

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
)

// mirrorPodAnnotation marks a static pod's mirror in the API, which the
// kubelet owns and an eviction cannot remove (upstream's
// kubetypes.ConfigMirrorAnnotationKey).
const mirrorPodAnnotation = "kubernetes.io/config.mirror"

// toEvict are the pods a drain must evict from a node, by name, as kubectl
// drain picks them: every pod that has not finished, except mirror pods and
// pods of a DaemonSet, which would come straight back.
func toEvict(pods []corev1.Pod) []corev1.Pod {
	var out []corev1.Pod
	for _, p := range pods {
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		if _, mirror := p.Annotations[mirrorPodAnnotation]; mirror || ownedByDaemonSet(p) {
			continue
		}
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b corev1.Pod) int {
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	return out
}

func ownedByDaemonSet(p corev1.Pod) bool {
	for _, ref := range p.OwnerReferences {
		if ref.Controller != nil && *ref.Controller && ref.Kind == "DaemonSet" {
			return true
		}
	}
	return false
}

// drain evicts the pods on node through the Eviction API of cs and returns
// those that remain (none once the node is drained). An eviction a
// PodDisruptionBudget refuses (429) is tried again on the next pass.
func drain(ctx context.Context, cs kubernetes.Interface, node string) ([]string, error) {
	list, err := cs.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String(),
	})
	if err != nil {
		return nil, fmt.Errorf("list the pods on node %s: %w", node, err)
	}
	var left []string
	for _, p := range toEvict(list.Items) {
		left = append(left, p.Namespace+"/"+p.Name)
		if !p.DeletionTimestamp.IsZero() {
			continue
		}
		ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace}}
		err := evict(ctx, cs, ev)
		switch {
		case err == nil, apierrors.IsNotFound(err), apierrors.IsTooManyRequests(err):
		default:
			return left, fmt.Errorf("evict pod %s/%s from node %s: %w", p.Namespace, p.Name, node, err)
		}
	}
	return left, nil
}

// evictTimeout bounds one eviction: the API server holds a request whose
// PodDisruptionBudget it has not processed yet.
const evictTimeout = 10 * time.Second

func evict(ctx context.Context, cs kubernetes.Interface, ev *policyv1.Eviction) error {
	ctx, cancel := context.WithTimeout(ctx, evictTimeout)
	defer cancel()
	err := cs.CoreV1().Pods(ev.Namespace).EvictV1(ctx, ev)
	if errors.Is(err, context.DeadlineExceeded) {
		return apierrors.NewTooManyRequests("the eviction did not finish in "+evictTimeout.String(), 0)
	}
	return err
}

// cordon marks node unschedulable in cs; a missing node is no error.
func cordon(ctx context.Context, cs kubernetes.Interface, node string, unschedulable bool) error {
	patch := fmt.Sprintf(`{"spec":{"unschedulable":%t}}`, unschedulable)
	_, err := cs.CoreV1().Nodes().Patch(ctx, node, "application/merge-patch+json", []byte(patch), metav1.PatchOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("set node %s unschedulable=%t: %w", node, unschedulable, err)
	}
	return nil
}
