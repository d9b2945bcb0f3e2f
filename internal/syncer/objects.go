package syncer

import (
	"context"
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/nestdev/nest/internal/kindsync"
	"github.com/nestdev/nest/internal/syncer/contract"
)

// HostConfigMap returns the host copy of a tenant ConfigMap.
func (t Translator) HostConfigMap(cm *corev1.ConfigMap) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: t.copyMeta(&cm.ObjectMeta),
		Data:       maps.Clone(cm.Data), BinaryData: maps.Clone(cm.BinaryData),
	}
}

// HostSecret returns the host copy of a tenant Secret. A tenant
// service-account-token Secret becomes Opaque: under its own type the host's
// token controller would fill it with a host credential.
func (t Translator) HostSecret(s *corev1.Secret) *corev1.Secret {
	typ := s.Type
	if typ == corev1.SecretTypeServiceAccountToken {
		typ = corev1.SecretTypeOpaque
	}
	return &corev1.Secret{ObjectMeta: t.copyMeta(&s.ObjectMeta), Type: typ, Data: maps.Clone(s.Data)}
}

func (t Translator) copyMeta(m *metav1.ObjectMeta) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name:        contract.HostName(t.VirtualCluster, m.Namespace, m.Name),
		Namespace:   t.HostNamespace,
		Labels:      contract.HostLabels(t.VirtualCluster, m.Namespace),
		Annotations: contract.HostAnnotations(m.Namespace, m.Name, string(m.UID)),
	}
}

// objectSyncer copies the ConfigMaps and Secrets tenant pods reference to the
// host namespace, and keeps the copies in step with the tenant objects.
type objectSyncer struct {
	tr               Translator
	host             kubernetes.Interface
	recorder         record.EventRecorder
	budget           *dataBudget
	tenantConfigMaps corelisters.ConfigMapLister
	tenantSecrets    corelisters.SecretLister
	hostConfigMaps   corelisters.ConfigMapNamespaceLister
	hostSecrets      corelisters.SecretNamespaceLister
	// pods are the tenant pods on the virtual node, indexed by
	// referencesIndex.
	pods cache.Indexer
}

// ensureFor makes the host copies one translated pod needs. A missing
// non-optional object is an error, so the pod is retried once it exists.
func (o *objectSyncer) ensureFor(ctx context.Context, namespace string, pt *PodTranslation) error {
	for _, name := range pt.ConfigMaps {
		cm, err := o.tenantConfigMaps.ConfigMaps(namespace).Get(name)
		if apierrors.IsNotFound(err) && pt.IsOptional("configmap", name) {
			continue
		}
		if err != nil {
			return fmt.Errorf("configmap %s/%s: %w", namespace, name, err)
		}
		if err := o.applyConfigMap(ctx, cm); err != nil {
			return err
		}
	}
	for _, name := range pt.Secrets {
		s, err := o.tenantSecrets.Secrets(namespace).Get(name)
		if apierrors.IsNotFound(err) && pt.IsOptional("secret", name) {
			continue
		}
		if err != nil {
			return fmt.Errorf("secret %s/%s: %w", namespace, name, err)
		}
		if err := o.applySecret(ctx, s); err != nil {
			return err
		}
	}
	return nil
}

func (o *objectSyncer) configMapCopies() hostCopy[*corev1.ConfigMap] {
	return hostCopy[*corev1.ConfigMap]{
		kind: "ConfigMap", client: o.host.CoreV1().ConfigMaps(o.tr.HostNamespace), cached: o.hostConfigMaps.Get,
		differs: func(have, want *corev1.ConfigMap) bool {
			return !maps.Equal(have.Data, want.Data) || !mapsEqualBytes(have.BinaryData, want.BinaryData) || have.Annotations[contract.AnnotationTenantUID] != want.Annotations[contract.AnnotationTenantUID]
		},
		merged: func(have, want *corev1.ConfigMap) *corev1.ConfigMap {
			upd := have.DeepCopy()
			upd.Data, upd.BinaryData, upd.Annotations = want.Data, want.BinaryData, want.Annotations
			return upd
		},
		admit: func(want *corev1.ConfigMap) (func(), error) {
			return o.budget.reserve(configMapKind, want, configMapSize(want))
		},
	}
}

func (o *objectSyncer) secretCopies() hostCopy[*corev1.Secret] {
	return hostCopy[*corev1.Secret]{
		kind: "Secret", client: o.host.CoreV1().Secrets(o.tr.HostNamespace), cached: o.hostSecrets.Get,
		differs: func(have, want *corev1.Secret) bool {
			return !mapsEqualBytes(have.Data, want.Data) || have.Annotations[contract.AnnotationTenantUID] != want.Annotations[contract.AnnotationTenantUID]
		},
		merged: func(have, want *corev1.Secret) *corev1.Secret {
			upd := have.DeepCopy()
			upd.Data, upd.Annotations = want.Data, want.Annotations
			return upd
		},
		admit: func(want *corev1.Secret) (func(), error) {
			return o.budget.reserve(secretKind, want, secretSize(want))
		},
	}
}

func (o *objectSyncer) applyConfigMap(ctx context.Context, cm *corev1.ConfigMap) error {
	if err := o.configMapCopies().apply(ctx, o.tr.HostConfigMap(cm)); err != nil {
		return fmt.Errorf("host copy of ConfigMap %s: %w", klog.KObj(cm), err)
	}
	return nil
}

func (o *objectSyncer) applySecret(ctx context.Context, s *corev1.Secret) error {
	if err := o.secretCopies().apply(ctx, o.tr.HostSecret(s)); err != nil {
		return fmt.Errorf("host copy of Secret %s: %w", klog.KObj(s), err)
	}
	return nil
}

// hostClient is what the syncer uses of a typed client-go client of one
// host kind, such as typedcorev1.ConfigMapInterface for T *corev1.ConfigMap.
type hostClient[T any] interface {
	Create(context.Context, T, metav1.CreateOptions) (T, error)
	Get(context.Context, string, metav1.GetOptions) (T, error)
	Update(context.Context, T, metav1.UpdateOptions) (T, error)
	Delete(context.Context, string, metav1.DeleteOptions) error
}

// hostCopy creates, updates and deletes the host copies of one kind of
// tenant object. It only ever writes a host object that is the copy of the
// same tenant object (isCopyOf): any other object holding the name is left
// alone and reported.
type hostCopy[T metav1.Object] struct {
	// kind names the host kind in errors, such as "ConfigMap".
	kind   string
	client hostClient[T]
	// cached looks a host object up in the host informer cache, which holds
	// only objects labelled as this virtual cluster's.
	cached func(name string) (T, error)
	// differs reports whether have needs an update to match want.
	differs func(have, want T) bool
	// merged returns a new object: have with the fields the syncer controls
	// taken from want.
	merged func(have, want T) T
	// admit, if set, is asked before every create or update; it returns a
	// function that undoes its bookkeeping if the write then fails.
	admit func(want T) (undo func(), err error)
}

// apply brings the host copy want in line with its tenant object: missing
// from the cache, it is created; found, it is updated if it differs. An
// object that exists under the name but is not this tenant object's copy is
// an error and is never written.
func (h hostCopy[T]) apply(ctx context.Context, want T) error {
	have, err := h.cached(want.GetName())
	switch {
	case apierrors.IsNotFound(err):
		return h.create(ctx, want)
	case err != nil:
		return err
	}
	return h.update(ctx, have, want)
}

func (h hostCopy[T]) create(ctx context.Context, want T) error {
	undo, err := h.admitWrite(want)
	if err != nil {
		return err
	}
	_, err = h.client.Create(ctx, want, metav1.CreateOptions{})
	if err == nil {
		return nil
	}
	undo()
	if !apierrors.IsAlreadyExists(err) {
		return err
	}
	// Not in the cache yet exists: made meanwhile by another worker, or by
	// someone else altogether. The live object tells which.
	have, err := h.client.Get(ctx, want.GetName(), metav1.GetOptions{})
	if err != nil {
		return err
	}
	return h.update(ctx, have, want)
}

func (h hostCopy[T]) update(ctx context.Context, have, want T) error {
	if !sameTenantObject(have, want) {
		return contract.NotOurCopy(h.kind, have, tenantKeyOf(want))
	}
	if !h.differs(have, want) {
		return nil
	}
	undo, err := h.admitWrite(want)
	if err != nil {
		return err
	}
	if _, err := h.client.Update(ctx, h.merged(have, want), metav1.UpdateOptions{}); err != nil {
		undo()
		return err
	}
	return nil
}

func (h hostCopy[T]) admitWrite(want T) (func(), error) {
	if h.admit == nil {
		return func() {}, nil
	}
	return h.admit(want)
}

// delete removes the host copy name of the tenant object namespace/name. A
// host object under that name that is not the copy is left alone. The
// deletion is bound to the UID that was checked, so an object that replaced
// the copy meanwhile is not deleted either.
func (h hostCopy[T]) delete(ctx context.Context, vc, name, tenantNamespace, tenantName string) error {
	have, err := h.client.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if !contract.IsCopyOf(have, vc, tenantNamespace, tenantName) {
		return contract.NotOurCopy(h.kind, have, tenantNamespace+"/"+tenantName)
	}
	uid := have.GetUID()
	err = h.client.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}

// sameTenantObject reports whether the host object have is the copy of the
// tenant object that want, made by copyMeta, stands for.
func sameTenantObject(have, want metav1.Object) bool {
	ns, name, _ := contract.TenantKey(want.GetAnnotations())
	return contract.IsCopyOf(have, want.GetLabels()[contract.LabelTenantOf], ns, name)
}

// tenantKeyOf is "namespace/name" of the tenant object a host copy stands for.
func tenantKeyOf(copy metav1.Object) string {
	ns, name, _ := contract.TenantKey(copy.GetAnnotations())
	return ns + "/" + name
}

// syncConfigMap keeps the host copy of the tenant ConfigMap key
// ("namespace/name") in step: refreshed while the ConfigMap exists and a copy
// exists or a tenant pod references it, deleted once the ConfigMap is gone.
func (o *objectSyncer) syncConfigMap(ctx context.Context, key string) (time.Duration, error) {
	get := func(namespace, name string) (*corev1.ConfigMap, error) {
		return o.tenantConfigMaps.ConfigMaps(namespace).Get(name)
	}
	return 0, syncCopy(ctx, o, key, configMapKind, get, o.configMapCopies(), o.tr.HostConfigMap)
}

// syncSecret is syncConfigMap for tenant Secrets.
func (o *objectSyncer) syncSecret(ctx context.Context, key string) (time.Duration, error) {
	get := func(namespace, name string) (*corev1.Secret, error) {
		return o.tenantSecrets.Secrets(namespace).Get(name)
	}
	return 0, syncCopy(ctx, o, key, secretKind, get, o.secretCopies(), o.tr.HostSecret)
}

// tenantGetter reads one tenant object from an informer cache.
type tenantGetter[T any] func(namespace, name string) (T, error)

// syncCopy is the sync of one copied kind. Only objects a pod references are
// copied, so a tenant object nothing on the virtual node uses costs the host
// nothing. A pod keeps the files of a copy deleted under it, as on a real
// node.
func syncCopy[T interface {
	metav1.Object
	runtime.Object
}](ctx context.Context, o *objectSyncer, key, kind string, tenant tenantGetter[T], copies hostCopy[T], translate func(T) T) error {
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return kindsync.Terminal(err)
	}
	hostName := contract.HostName(o.tr.VirtualCluster, namespace, name)
	_, cacheErr := copies.cached(hostName)
	hasCopy := !apierrors.IsNotFound(cacheErr)
	obj, err := tenant(namespace, name)
	switch {
	case apierrors.IsNotFound(err):
		if !hasCopy {
			return nil
		}
		if err := copies.delete(ctx, o.tr.VirtualCluster, hostName, namespace, name); err != nil {
			return fmt.Errorf("delete the host copy of %s %s: %w", kind, key, err)
		}
		o.budget.forget(kind, hostName)
		return nil
	case err != nil:
		return err
	case !hasCopy && !o.referenced(kind, namespace, name):
		return nil
	}
	if err := copies.apply(ctx, translate(obj)); err != nil {
		o.recorder.Eventf(obj, corev1.EventTypeWarning, "HostCopyFailed", "Pods on the virtual node keep the previous data until the host copy is written: %v", err)
		return fmt.Errorf("host copy of %s %s: %w", kind, key, err)
	}
	return nil
}

// referenced reports whether a tenant pod on the virtual node references
// the ConfigMap or Secret (kind configMapKind or secretKind).
func (o *objectSyncer) referenced(kind, namespace, name string) bool {
	pods, err := o.pods.ByIndex(referencesIndex, referenceKey(kind, namespace, name))
	return err == nil && len(pods) > 0
}

// referencesIndex indexes tenant pods by the ConfigMaps and Secrets they
// reference (referenceKey), as translation finds them.
const referencesIndex = "references"

func referenceKey(kind, namespace, name string) string { return kind + "/" + namespace + "/" + name }

// podReferences is the index function of referencesIndex. A pod that cannot
// be translated never reaches the host and references nothing.
func (t Translator) podReferences(obj any) ([]string, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return nil, nil
	}
	pt, err := t.TranslatePod(pod, MetadataAllowList{}, nil)
	if err != nil {
		return nil, nil
	}
	keys := make([]string, 0, len(pt.ConfigMaps)+len(pt.Secrets))
	for _, name := range pt.ConfigMaps {
		keys = append(keys, referenceKey(configMapKind, pod.Namespace, name))
	}
	for _, name := range pt.Secrets {
		keys = append(keys, referenceKey(secretKind, pod.Namespace, name))
	}
	return keys, nil
}

// copyKeys returns the resync keys of one copied kind: the
// "namespace/name" of every tenant object and of the tenant object every host
// copy stands for, so a copy whose tenant object was deleted while the
// syncer was down is found by its key. tenant and host are the List methods
// of the kind's tenant and host listers.
func copyKeys[T metav1.Object](tenant, host func(labels.Selector) ([]T, error)) func() []string {
	return func() []string {
		tenantObjs, _ := tenant(labels.Everything())
		hostObjs, _ := host(labels.Everything())
		keys := make([]string, 0, len(tenantObjs)+len(hostObjs))
		for _, obj := range tenantObjs {
			keys = append(keys, obj.GetNamespace()+"/"+obj.GetName())
		}
		for _, obj := range hostObjs {
			if ns, name, ok := contract.TenantKey(obj.GetAnnotations()); ok && obj.GetLabels()[LabelTokenSecret] == "" {
				keys = append(keys, ns+"/"+name)
			}
		}
		return keys
	}
}

func mapsEqualBytes(a, b map[string][]byte) bool {
	return maps.EqualFunc(a, b, func(x, y []byte) bool { return string(x) == string(y) })
}
