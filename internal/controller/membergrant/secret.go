package membergrant

import (
	"bytes"
	"context"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/controlplane"
	"github.com/nestdev/nest/internal/syncer/contract"
)

// secretLabels are the labels of the members Secret. The manager's cache
// holds only host Secrets labelled controlplane.LabelVirtualCluster
// (virtualcluster.CacheOptions), so the watch on it sees this one.
func secretLabels(vc *nestv1.VirtualCluster) map[string]string {
	return map[string]string{LabelManagedBy: ManagedByValue, controlplane.LabelVirtualCluster: vc.Name}
}

func secretKey(vc *nestv1.VirtualCluster) client.ObjectKey {
	return client.ObjectKey{Namespace: vc.Namespace, Name: contract.MembersSecret(vc.Name)}
}

// getSecret reads the members Secret of vc, or nil when there is none.
func (r *Reconciler) getSecret(ctx context.Context, vc *nestv1.VirtualCluster) (*corev1.Secret, error) {
	secret := &corev1.Secret{}
	switch err := r.APIReader.Get(ctx, secretKey(vc), secret); {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("get members Secret of %s: %w", klog.KObj(vc), err)
	}
	return secret, nil
}

// putSecret writes data under contract.MembersKey of the members Secret,
// owned by vc (not as its controller: the VirtualCluster controller does
// not manage it) so it goes with the VirtualCluster. It writes nothing
// when the Secret already says so.
func (r *Reconciler) putSecret(ctx context.Context, vc *nestv1.VirtualCluster, data []byte) error {
	key := secretKey(vc)
	secret, err := r.getSecret(ctx, vc)
	if err != nil {
		return err
	}
	if secret == nil {
		secret = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, Labels: secretLabels(vc)},
			Type:       corev1.SecretTypeOpaque,
			Data:       map[string][]byte{contract.MembersKey: data},
		}
		if err := controllerutil.SetOwnerReference(vc, secret, r.Scheme()); err != nil {
			return fmt.Errorf("members Secret %s: %w", klog.KObj(secret), err)
		}
		if err := r.Create(ctx, secret); err != nil {
			return fmt.Errorf("create members Secret %s: %w", klog.KObj(secret), err)
		}
		return nil
	}
	before := secret.DeepCopy()
	if secret.Labels == nil {
		secret.Labels = map[string]string{}
	}
	maps.Copy(secret.Labels, secretLabels(vc))
	if err := controllerutil.SetOwnerReference(vc, secret, r.Scheme()); err != nil {
		return fmt.Errorf("members Secret %s: %w", klog.KObj(secret), err)
	}
	if bytes.Equal(secret.Data[contract.MembersKey], data) && len(secret.Data) == 1 &&
		maps.Equal(before.Labels, secret.Labels) && equality.Semantic.DeepEqual(before.OwnerReferences, secret.OwnerReferences) {
		return nil
	}
	// Only our key: nothing else belongs in it.
	secret.Data = map[string][]byte{contract.MembersKey: data}
	if err := r.Update(ctx, secret); err != nil {
		return fmt.Errorf("update members Secret %s: %w", klog.KObj(secret), err)
	}
	return nil
}

// deleteSecret deletes the members Secret of vc.
func (r *Reconciler) deleteSecret(ctx context.Context, vc *nestv1.VirtualCluster) error {
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: vc.Namespace, Name: contract.MembersSecret(vc.Name)}}
	if err := r.Delete(ctx, secret); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("delete members Secret %s: %w", klog.KObj(secret), err)
	}
	return nil
}

func secretKind() client.Object { return &corev1.Secret{} }

// secretOwner maps a members Secret to its VirtualCluster. Other Secrets of
// the cache (the VirtualCluster controller's) map to nothing.
func secretOwner(_ context.Context, obj client.Object) []reconcile.Request {
	l := obj.GetLabels()
	vc := l[controlplane.LabelVirtualCluster]
	if l[LabelManagedBy] != ManagedByValue || vc == "" || obj.GetName() != contract.MembersSecret(vc) {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: obj.GetNamespace(), Name: vc}}}
}
