package syncer

import (
	"context"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/klog/v2"
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
		Name:        HostName(t.VirtualCluster, m.Namespace, m.Name),
		Namespace:   t.HostNamespace,
		Labels:      hostLabels(t.VirtualCluster, m.Namespace),
		Annotations: hostAnnotations(m.Namespace, m.Name, string(m.UID)),
	}
}

// objectSyncer copies the ConfigMaps and Secrets tenant pods reference to the
// host namespace, and keeps the copies in step with the tenant objects.
type objectSyncer struct {
	tr               Translator
	host             kubernetes.Interface
	tenantConfigMaps corelisters.ConfigMapLister
	tenantSecrets    corelisters.SecretLister
	hostConfigMaps   corelisters.ConfigMapNamespaceLister
	hostSecrets      corelisters.SecretNamespaceLister
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

func (o *objectSyncer) applyConfigMap(ctx context.Context, cm *corev1.ConfigMap) error {
	want := o.tr.HostConfigMap(cm)
	client := o.host.CoreV1().ConfigMaps(want.Namespace)
	have, err := o.hostConfigMaps.Get(want.Name)
	err = createOrUpdate(err,
		func() bool {
			return !maps.Equal(have.Data, want.Data) || !mapsEqualBytes(have.BinaryData, want.BinaryData) || have.Annotations[AnnotationTenantUID] != want.Annotations[AnnotationTenantUID]
		},
		func() error { _, err := client.Create(ctx, want, metav1.CreateOptions{}); return err },
		func() error {
			upd := have.DeepCopy()
			upd.Data, upd.BinaryData, upd.Annotations = want.Data, want.BinaryData, want.Annotations
			_, err := client.Update(ctx, upd, metav1.UpdateOptions{})
			return err
		})
	if err != nil {
		return fmt.Errorf("host copy of ConfigMap %s: %w", klog.KObj(cm), err)
	}
	return nil
}

func (o *objectSyncer) applySecret(ctx context.Context, s *corev1.Secret) error {
	want := o.tr.HostSecret(s)
	client := o.host.CoreV1().Secrets(want.Namespace)
	have, err := o.hostSecrets.Get(want.Name)
	err = createOrUpdate(err,
		func() bool {
			return !mapsEqualBytes(have.Data, want.Data) || have.Annotations[AnnotationTenantUID] != want.Annotations[AnnotationTenantUID]
		},
		func() error { _, err := client.Create(ctx, want, metav1.CreateOptions{}); return err },
		func() error {
			upd := have.DeepCopy()
			upd.Data, upd.Annotations = want.Data, want.Annotations
			_, err := client.Update(ctx, upd, metav1.UpdateOptions{})
			return err
		})
	if err != nil {
		return fmt.Errorf("host copy of Secret %s: %w", klog.KObj(s), err)
	}
	return nil
}

// createOrUpdate brings one host object in line with what the syncer wants,
// given the error of looking it up in the host informer cache: missing, it
// is created (one made meanwhile by another worker counts as created); found
// and differing, it is updated.
func createOrUpdate(lookupErr error, differs func() bool, create, update func() error) error {
	switch {
	case apierrors.IsNotFound(lookupErr):
		if err := create(); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		return nil
	case lookupErr != nil:
		return lookupErr
	case differs():
		return update()
	}
	return nil
}

// tenantConfigMapChanged refreshes a host copy, if there is one: only objects
// a pod referenced are copied.
func (o *objectSyncer) tenantConfigMapChanged(ctx context.Context, cm *corev1.ConfigMap) {
	if _, err := o.hostConfigMaps.Get(HostName(o.tr.VirtualCluster, cm.Namespace, cm.Name)); err != nil {
		return
	}
	if err := o.applyConfigMap(ctx, cm); err != nil {
		klog.FromContext(ctx).Error(err, "Refresh host ConfigMap", "configMap", klog.KObj(cm))
	}
}

func (o *objectSyncer) tenantSecretChanged(ctx context.Context, s *corev1.Secret) {
	if _, err := o.hostSecrets.Get(HostName(o.tr.VirtualCluster, s.Namespace, s.Name)); err != nil {
		return
	}
	if err := o.applySecret(ctx, s); err != nil {
		klog.FromContext(ctx).Error(err, "Refresh host Secret", "secret", klog.KObj(s))
	}
}

// tenantObjectDeleted removes the host copy of a deleted tenant ConfigMap or
// Secret; pods that still mount it keep their files, as on a real node.
func (o *objectSyncer) tenantObjectDeleted(ctx context.Context, kind, namespace, name string) {
	hostName := HostName(o.tr.VirtualCluster, namespace, name)
	var err error
	if kind == "configmap" {
		err = o.host.CoreV1().ConfigMaps(o.tr.HostNamespace).Delete(ctx, hostName, metav1.DeleteOptions{})
	} else {
		err = o.host.CoreV1().Secrets(o.tr.HostNamespace).Delete(ctx, hostName, metav1.DeleteOptions{})
	}
	if err != nil && !apierrors.IsNotFound(err) {
		klog.FromContext(ctx).Error(err, "Delete host copy", "kind", kind, "namespace", namespace, "name", name)
	}
}

func mapsEqualBytes(a, b map[string][]byte) bool {
	return maps.EqualFunc(a, b, func(x, y []byte) bool { return string(x) == string(y) })
}
