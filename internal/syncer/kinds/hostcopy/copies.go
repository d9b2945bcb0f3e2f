// Package hostcopy is what the kinds that copy tenant objects into the
// host namespace share: writing a copy only over the copy of the same
// tenant object (Copies), the byte budget of ConfigMap and Secret copies
// (Budget), and the sync of a kind whose copies exist only while a pod
// uses them (Kind).
package hostcopy

import (
	"context"
	"maps"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/nestdev/nest/internal/syncer/contract"
)

// Client is what Copies uses of a typed client-go client of one host kind,
// such as typedcorev1.ConfigMapInterface for T *corev1.ConfigMap.
type Client[T any] interface {
	Create(context.Context, T, metav1.CreateOptions) (T, error)
	Get(context.Context, string, metav1.GetOptions) (T, error)
	Update(context.Context, T, metav1.UpdateOptions) (T, error)
	Delete(context.Context, string, metav1.DeleteOptions) error
}

// Copies creates, updates and deletes the host copies of one kind of
// tenant object. It only ever writes a host object that is the copy of the
// same tenant object (contract.IsCopyOf): any other object holding the name
// is left alone and reported (contract.NotOurCopy).
type Copies[T metav1.Object] struct {
	// Kind names the host kind in errors, such as "ConfigMap".
	Kind   string
	Client Client[T]
	// Cached looks a host object up in the host informer cache, which holds
	// only objects labelled as this virtual cluster's.
	Cached func(name string) (T, error)
	// Differs reports whether have needs an update to match want.
	Differs func(have, want T) bool
	// Merged returns a new object: have with the fields the syncer controls
	// taken from want.
	Merged func(have, want T) T
	// Admit, if set, is asked before every create or update; it returns a
	// function that undoes its bookkeeping if the write then fails.
	Admit func(want T) (undo func(), err error)
}

// Apply brings the host copy want in line with its tenant object: missing
// from the cache, it is created; found, it is updated if it differs. An
// object that exists under the name but is not this tenant object's copy is
// an error and is never written.
func (h Copies[T]) Apply(ctx context.Context, want T) error {
	have, err := h.Cached(want.GetName())
	switch {
	case apierrors.IsNotFound(err):
		return h.create(ctx, want)
	case err != nil:
		return err
	}
	return h.update(ctx, have, want)
}

func (h Copies[T]) create(ctx context.Context, want T) error {
	undo, err := h.admit(want)
	if err != nil {
		return err
	}
	_, err = h.Client.Create(ctx, want, metav1.CreateOptions{})
	if err == nil {
		return nil
	}
	undo()
	if !apierrors.IsAlreadyExists(err) {
		return err
	}
	// Not in the cache yet exists: made meanwhile by another worker, or by
	// someone else altogether. The live object tells which.
	have, err := h.Client.Get(ctx, want.GetName(), metav1.GetOptions{})
	if err != nil {
		return err
	}
	return h.update(ctx, have, want)
}

func (h Copies[T]) update(ctx context.Context, have, want T) error {
	if !SameTenantObject(have, want) {
		return contract.NotOurCopy(h.Kind, have, tenantKeyOf(want))
	}
	if !h.Differs(have, want) {
		return nil
	}
	undo, err := h.admit(want)
	if err != nil {
		return err
	}
	if _, err := h.Client.Update(ctx, h.Merged(have, want), metav1.UpdateOptions{}); err != nil {
		undo()
		return err
	}
	return nil
}

func (h Copies[T]) admit(want T) (func(), error) {
	if h.Admit == nil {
		return func() {}, nil
	}
	return h.Admit(want)
}

// Delete removes the host copy name of the tenant object namespace/name of
// virtual cluster vc. A host object under that name that is not the copy
// is left alone. The deletion is bound to the UID that was checked, so an
// object that replaced the copy meanwhile is not deleted either.
func (h Copies[T]) Delete(ctx context.Context, vc, name, tenantNamespace, tenantName string) error {
	have, err := h.Client.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if !contract.IsCopyOf(have, vc, tenantNamespace, tenantName) {
		return contract.NotOurCopy(h.Kind, have, tenantNamespace+"/"+tenantName)
	}
	uid := have.GetUID()
	err = h.Client.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}

// SameTenantObject reports whether the host object have is the copy of
// the tenant object that want, made with Meta, stands for.
func SameTenantObject(have, want metav1.Object) bool {
	ns, name, _ := contract.TenantKey(want.GetAnnotations())
	return contract.IsCopyOf(have, want.GetLabels()[contract.LabelTenantOf], ns, name)
}

// tenantKeyOf is "namespace/name" of the tenant object a host copy stands for.
func tenantKeyOf(copy metav1.Object) string {
	ns, name, _ := contract.TenantKey(copy.GetAnnotations())
	return ns + "/" + name
}

// Meta is the metadata of the host copy of the tenant object m of virtual
// cluster vc: its contract.HostName in hostNamespace, with the labels and
// annotations that say whose copy it is.
func Meta(vc, hostNamespace string, m *metav1.ObjectMeta) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name:        contract.HostName(vc, m.Namespace, m.Name),
		Namespace:   hostNamespace,
		Labels:      contract.HostLabels(vc, m.Namespace),
		Annotations: contract.HostAnnotations(m.Namespace, m.Name, string(m.UID)),
	}
}

// Keys returns the resync keys of one copied kind: the "namespace/name" of
// every tenant object and of the tenant object every host copy stands for,
// so a copy whose tenant object was deleted while the syncer was down is
// found by its key. tenant and host are the List methods of the kind's
// tenant and host listers. Token Secrets are not copies of a tenant Secret
// and are left out.
func Keys[T metav1.Object](tenant, host func(labels.Selector) ([]T, error)) func() []string {
	return func() []string {
		tenantObjs, _ := tenant(labels.Everything())
		hostObjs, _ := host(labels.Everything())
		keys := make([]string, 0, len(tenantObjs)+len(hostObjs))
		for _, obj := range tenantObjs {
			keys = append(keys, obj.GetNamespace()+"/"+obj.GetName())
		}
		for _, obj := range hostObjs {
			if ns, name, ok := contract.TenantKey(obj.GetAnnotations()); ok && obj.GetLabels()[contract.LabelTokenSecret] == "" {
				keys = append(keys, ns+"/"+name)
			}
		}
		return keys
	}
}

// MapsEqualBytes reports whether two maps of byte values are equal.
func MapsEqualBytes(a, b map[string][]byte) bool {
	return maps.EqualFunc(a, b, func(x, y []byte) bool { return string(x) == string(y) })
}
