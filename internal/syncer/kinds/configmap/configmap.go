// Package configmap copies the tenant ConfigMaps that pods on the virtual
// node use into the host namespace, within the byte budget the copies of
// ConfigMaps and Secrets share, and keeps the copies in step.
package configmap

import (
	"maps"

	corev1 "k8s.io/api/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"

	"github.com/nestdev/nest/internal/syncer/contract"
	"github.com/nestdev/nest/internal/syncer/kinds"
	"github.com/nestdev/nest/internal/syncer/kinds/hostcopy"
)

// workers is how many ConfigMaps are synced at once. Copies are made on
// demand by the pod workers too, so the queue mostly follows changes.
const workers = 4

// Translate is the host copy of the tenant ConfigMap cm of virtual cluster
// vc in hostNamespace: its data, under the copy's name and labels.
func Translate(vc, hostNamespace string, cm *corev1.ConfigMap) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: hostcopy.Meta(vc, hostNamespace, &cm.ObjectMeta),
		Data:       maps.Clone(cm.Data), BinaryData: maps.Clone(cm.BinaryData),
	}
}

// Config is what the kind reads and writes: HostCache lists the host
// copies (the host namespace's objects of this VirtualCluster) and Tenant
// the tenant's ConfigMaps.
type Config struct {
	hostcopy.Target
	HostCache corelisters.ConfigMapNamespaceLister
	Tenant    corelisters.ConfigMapLister
}

// New is the kind as cfg sets it up.
func New(cfg Config) *hostcopy.Kind[*corev1.ConfigMap] {
	return &hostcopy.Kind[*corev1.ConfigMap]{
		Name: hostcopy.KindConfigMap, VirtualCluster: cfg.VirtualCluster,
		Copies: hostcopy.Copies[*corev1.ConfigMap]{
			Kind: "ConfigMap", Client: cfg.Host.CoreV1().ConfigMaps(cfg.HostNamespace), Cached: cfg.HostCache.Get,
			Differs: func(have, want *corev1.ConfigMap) bool {
				return !maps.Equal(have.Data, want.Data) || !hostcopy.MapsEqualBytes(have.BinaryData, want.BinaryData) ||
					have.Annotations[contract.AnnotationTenantUID] != want.Annotations[contract.AnnotationTenantUID]
			},
			Merged: func(have, want *corev1.ConfigMap) *corev1.ConfigMap {
				upd := have.DeepCopy()
				upd.Data, upd.BinaryData, upd.Annotations = want.Data, want.BinaryData, want.Annotations
				return upd
			},
			Admit: func(want *corev1.ConfigMap) (func(), error) {
				return cfg.Budget.Reserve(hostcopy.KindConfigMap, want, hostcopy.ConfigMapSize(want))
			},
		},
		Tenant: func(namespace, name string) (*corev1.ConfigMap, error) {
			return cfg.Tenant.ConfigMaps(namespace).Get(name)
		},
		Translate: func(cm *corev1.ConfigMap) *corev1.ConfigMap {
			return Translate(cfg.VirtualCluster, cfg.HostNamespace, cm)
		},
		Budget:     cfg.Budget,
		Referenced: cfg.Referenced,
		Recorder:   cfg.Recorder,
		Scope:      cfg.Scope(),
	}
}

// Register makes the kind's queue, "configmaps", which tenant ConfigMap
// events and events of their host copies feed. It returns the kind, whose
// Apply pod translation calls for the ConfigMaps a pod needs.
func Register(c *kinds.Context, budget *hostcopy.Budget, referenced func(namespace, name string) bool) (kinds.Registration, *hostcopy.Kind[*corev1.ConfigMap]) {
	tenant, host := c.TenantInformers.Core().V1().ConfigMaps(), c.HostInformers.Core().V1().ConfigMaps()
	k := New(Config{Target: hostcopy.TargetOf(c, budget, referenced), HostCache: host.Lister().ConfigMaps(c.HostNamespace), Tenant: tenant.Lister()})
	inf := hostcopy.Informers[*corev1.ConfigMap]{Tenant: tenant.Informer(), Host: host.Informer(), TenantList: tenant.Lister().List, HostList: host.Lister().List}
	return hostcopy.Register(c, "configmaps", workers, k, inf, nil), k
}
