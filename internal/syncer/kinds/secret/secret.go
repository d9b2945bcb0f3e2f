// Package secret copies the tenant Secrets that pods on the virtual node
// use into the host namespace, within the byte budget the copies of
// ConfigMaps and Secrets share, and keeps the copies in step. The token
// Secrets Nest makes per pod (contract.LabelTokenSecret) are not copies and
// are left to the token refresher.
package secret

import (
	"maps"

	corev1 "k8s.io/api/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"

	"github.com/nestdev/nest/internal/syncer/contract"
	"github.com/nestdev/nest/internal/syncer/kinds"
	"github.com/nestdev/nest/internal/syncer/kinds/hostcopy"
)

// workers is how many Secrets are synced at once. Copies are made on
// demand by the pod workers too, so the queue mostly follows changes.
const workers = 4

// Translate is the host copy of the tenant Secret s of virtual cluster vc
// in hostNamespace. A service-account-token Secret becomes Opaque: under
// its own type the host's token controller would fill it with a host
// credential.
func Translate(vc, hostNamespace string, s *corev1.Secret) *corev1.Secret {
	typ := s.Type
	if typ == corev1.SecretTypeServiceAccountToken {
		typ = corev1.SecretTypeOpaque
	}
	return &corev1.Secret{ObjectMeta: hostcopy.Meta(vc, hostNamespace, &s.ObjectMeta), Type: typ, Data: maps.Clone(s.Data)}
}

// Config is what the kind reads and writes: HostCache lists the host
// copies (the host namespace's objects of this VirtualCluster) and Tenant
// the tenant's Secrets.
type Config struct {
	hostcopy.Target
	HostCache corelisters.SecretNamespaceLister
	Tenant    corelisters.SecretLister
}

// New is the kind as cfg sets it up.
func New(cfg Config) *hostcopy.Kind[*corev1.Secret] {
	return &hostcopy.Kind[*corev1.Secret]{
		Name: hostcopy.KindSecret, VirtualCluster: cfg.VirtualCluster,
		Copies: hostcopy.Copies[*corev1.Secret]{
			Kind: "Secret", Client: cfg.Host.CoreV1().Secrets(cfg.HostNamespace), Cached: cfg.HostCache.Get,
			Differs: func(have, want *corev1.Secret) bool {
				return !hostcopy.MapsEqualBytes(have.Data, want.Data) || have.Annotations[contract.AnnotationTenantUID] != want.Annotations[contract.AnnotationTenantUID]
			},
			Merged: func(have, want *corev1.Secret) *corev1.Secret {
				upd := have.DeepCopy()
				upd.Data, upd.Annotations = want.Data, want.Annotations
				return upd
			},
			Admit: func(want *corev1.Secret) (func(), error) {
				return cfg.Budget.Reserve(hostcopy.KindSecret, want, hostcopy.SecretSize(want))
			},
		},
		Tenant: func(namespace, name string) (*corev1.Secret, error) {
			return cfg.Tenant.Secrets(namespace).Get(name)
		},
		Translate:  func(s *corev1.Secret) *corev1.Secret { return Translate(cfg.VirtualCluster, cfg.HostNamespace, s) },
		Budget:     cfg.Budget,
		Referenced: cfg.Referenced,
		Recorder:   cfg.Recorder,
		Scope:      cfg.Scope(),
	}
}

// Register makes the kind's queue, "secrets", which tenant Secret events
// and events of their host copies (not of token Secrets) feed. It returns
// the kind, whose Apply pod translation calls for the Secrets a pod needs.
func Register(c *kinds.Context, budget *hostcopy.Budget, referenced func(namespace, name string) bool) (kinds.Registration, *hostcopy.Kind[*corev1.Secret]) {
	tenant, host := c.TenantInformers.Core().V1().Secrets(), c.HostInformers.Core().V1().Secrets()
	k := New(Config{Target: hostcopy.TargetOf(c, budget, referenced), HostCache: host.Lister().Secrets(c.HostNamespace), Tenant: tenant.Lister()})
	inf := hostcopy.Informers[*corev1.Secret]{Tenant: tenant.Informer(), Host: host.Informer(), TenantList: tenant.Lister().List, HostList: host.Lister().List}
	return hostcopy.Register(c, "secrets", workers, k, inf, func(s *corev1.Secret) bool { return s.Labels[contract.LabelTokenSecret] == "true" }), k
}
