package syncer

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/nestdev/nest/internal/kindsync"
	"github.com/nestdev/nest/internal/syncer/contract"
)

// Orphan host pods. virtual-kubelet's pod controller deletes a host pod when
// it sees its tenant pod's delete event, but drops the tombstone an informer
// delivers for a pod deleted while its watch was down (a tenant API server
// restart, say): the host pod would run on with no tenant pod, holding the
// tenant's quota. The orphan syncer, keyed by host pod name, finds such
// pods and deletes them. Tenant pod deletes (tombstones included), host pod
// adds (so a restarted syncer checks every host pod) and the resync queue
// keys.

// syncOrphan deletes the host pod name when the tenant pod it runs is gone.
// Gone means missing from the informer cache and, asked live, not found or
// found with another UID, so a cache that lags behind a create never costs a
// new pod its host pod. A tenant pod is gone only once it was force-deleted
// (a graceful deletion waits for the host pod), so the host pod is deleted
// with ForcedGracePeriodSeconds, as the kubelet kills a pod removed from its
// API server; a deletion already in progress with a longer grace period is
// shortened. A UID precondition spares a newer pod under the name.
func (p *podProvider) syncOrphan(ctx context.Context, name string) (time.Duration, error) {
	host, err := p.hostPods.Get(name)
	if apierrors.IsNotFound(err) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	namespace, tenantName, ok := contract.TenantKey(host.Annotations)
	if !ok || host.Labels[contract.LabelTenantOf] != p.tr.VirtualCluster || endsWithin(host, ForcedGracePeriodSeconds) {
		return 0, nil
	}
	uid := host.Annotations[contract.AnnotationTenantUID]
	if tenant, err := p.tenantPods.Pods(namespace).Get(tenantName); err == nil && string(tenant.UID) == uid {
		return 0, p.ensureTokenSecret(ctx, tenant, host)
	}
	tenant, err := p.tenant.CoreV1().Pods(namespace).Get(ctx, tenantName, metav1.GetOptions{})
	switch {
	case err == nil && string(tenant.UID) == uid:
		return 0, p.ensureTokenSecret(ctx, tenant, host)
	case err != nil && !apierrors.IsNotFound(err):
		return 0, fmt.Errorf("get tenant pod %s/%s: %w", namespace, tenantName, err)
	}
	klog.FromContext(ctx).Info("Deleting host pod whose tenant pod is gone", "hostPod", klog.KObj(host), "pod", klog.KRef(namespace, tenantName), "uid", uid)
	err = p.host.CoreV1().Pods(p.tr.HostNamespace).Delete(ctx, name, metav1.DeleteOptions{
		GracePeriodSeconds: ptr.To(ForcedGracePeriodSeconds), Preconditions: &metav1.Preconditions{UID: &host.UID}})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return 0, nil
	}
	return 0, err
}

// endsWithin reports whether the host pod is being deleted with a grace
// period of at most seconds.
func endsWithin(host *corev1.Pod, seconds int64) bool {
	return host.DeletionTimestamp != nil && ptr.Deref(host.DeletionGracePeriodSeconds, 0) <= seconds
}

// ensureTokenSecret writes the token Secret of a host pod that mounts one
// and has none. A syncer stopped between creating the host pod and writing
// its Secret leaves the pod waiting for the volume for ever: virtual-kubelet
// never calls CreatePod again for a pod that exists. The cache is asked
// first and a live GET confirms a miss.
func (p *podProvider) ensureTokenSecret(ctx context.Context, tenant, host *corev1.Pod) error {
	name := contract.TokenSecretName(host.Name)
	if !mountsSecret(host, name) {
		return nil
	}
	if _, err := p.objects.hostSecrets.Get(name); err == nil {
		return nil
	}
	if _, err := p.host.CoreV1().Secrets(p.tr.HostNamespace).Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		return err
	}
	pt, err := p.tr.TranslatePod(tenant, p.metadata, nil)
	if err != nil {
		return kindsync.Terminal(err)
	}
	secret, err := p.tokens.SecretFor(ctx, p.tr.VirtualCluster, p.tr.HostNamespace, tenant, pt.Pod.Name, pt.Tokens, pt.Identity)
	if err != nil {
		return err
	}
	klog.FromContext(ctx).Info("Writing the missing token Secret of a host pod", "hostPod", klog.KObj(host), "secret", name)
	return p.writeTokenSecret(ctx, secret, host)
}

// mountsSecret reports whether pod has a volume of the Secret name.
func mountsSecret(pod *corev1.Pod, name string) bool {
	for _, v := range pod.Spec.Volumes {
		if v.Secret != nil && v.Secret.SecretName == name {
			return true
		}
		if v.Projected != nil {
			for _, src := range v.Projected.Sources {
				if src.Secret != nil && src.Secret.Name == name {
					return true
				}
			}
		}
	}
	return false
}

// hostPodNames lists the host pods the syncer knows, for the resync.
func (p *podProvider) hostPodNames() []string {
	pods, err := p.hostPods.List(labels.Everything())
	if err != nil {
		return nil
	}
	names := make([]string, 0, len(pods))
	for _, pod := range pods {
		names = append(names, pod.Name)
	}
	return names
}
