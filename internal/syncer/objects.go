package syncer

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/nestdev/nest/internal/syncer/contract"
	"github.com/nestdev/nest/internal/syncer/kinds/hostcopy"
	"github.com/nestdev/nest/internal/syncer/tenantmsg"
)

// objectSyncer makes the host copies of the ConfigMaps and Secrets a pod
// needs before its host pod is created (kinds/configmap, kinds/secret,
// whose rows set configMaps and secrets), and indexes tenant pods by what
// they reference, so those kinds copy only what pods use.
type objectSyncer struct {
	tr               Translator
	budget           *hostcopy.Budget
	tenantConfigMaps corelisters.ConfigMapLister
	tenantSecrets    corelisters.SecretLister
	hostSecrets      corelisters.SecretNamespaceLister
	configMaps       *hostcopy.Kind[*corev1.ConfigMap]
	secrets          *hostcopy.Kind[*corev1.Secret]
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
			// The tenant's own cache: its words are the tenant's.
			return tenantmsg.AsIs(fmt.Errorf("configmap %s/%s: %w", namespace, name, err))
		}
		if err := o.configMaps.Apply(ctx, cm); err != nil {
			return err
		}
	}
	for _, name := range pt.Secrets {
		s, err := o.tenantSecrets.Secrets(namespace).Get(name)
		if apierrors.IsNotFound(err) && pt.IsOptional("secret", name) {
			continue
		}
		if err != nil {
			// The tenant's own cache: its words are the tenant's.
			return tenantmsg.AsIs(fmt.Errorf("secret %s/%s: %w", namespace, name, err))
		}
		if err := o.secrets.Apply(ctx, s); err != nil {
			return err
		}
	}
	return nil
}

// referenced reports whether a tenant pod on the virtual node references
// the ConfigMap or Secret (kind hostcopy.KindConfigMap or KindSecret).
func (o *objectSyncer) referenced(kind, namespace, name string) bool {
	pods, err := o.pods.ByIndex(referencesIndex, referenceKey(kind, namespace, name))
	return err == nil && len(pods) > 0
}

// referencer is referenced for one kind, as kinds/configmap and
// kinds/secret ask it.
func (o *objectSyncer) referencer(kind string) func(namespace, name string) bool {
	return func(namespace, name string) bool { return o.referenced(kind, namespace, name) }
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
	pt, err := t.TranslatePod(pod, contract.MetadataAllowList{}, nil)
	if err != nil {
		return nil, nil
	}
	keys := make([]string, 0, len(pt.ConfigMaps)+len(pt.Secrets))
	for _, name := range pt.ConfigMaps {
		keys = append(keys, referenceKey(hostcopy.KindConfigMap, pod.Namespace, name))
	}
	for _, name := range pt.Secrets {
		keys = append(keys, referenceKey(hostcopy.KindSecret, pod.Namespace, name))
	}
	return keys, nil
}
