package controlplane

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
)

// ErrNoManagerKubeconfig is returned by ManagerKubeconfig while neither
// nest-manager's own kubeconfig nor the administrator's is written yet.
var ErrNoManagerKubeconfig = errors.New("the tenant kubeconfig is not written yet")

// ManagerKubeconfig returns the kubeconfig nest-manager reaches vc's API
// server with: its own (ManagerKubeconfigSecret) once the VirtualCluster
// reconciler has issued it, else the administrator's in-cluster one, which
// is all a tenant made by an older nest-manager has until its next
// reconcile.
func ManagerKubeconfig(ctx context.Context, c client.Reader, vc *nestv1.VirtualCluster) ([]byte, error) {
	n := NamesOf(vc)
	for _, source := range []struct{ secret, key string }{
		{n.ManagerKubeconfigSecret(), KubeconfigKey},
		{n.KubeconfigSecret(), KubeconfigInternalKey},
	} {
		var s corev1.Secret
		err := c.Get(ctx, client.ObjectKey{Namespace: n.Namespace, Name: source.secret}, &s)
		if client.IgnoreNotFound(err) != nil {
			return nil, fmt.Errorf("get Secret %s/%s: %w", n.Namespace, source.secret, err)
		}
		if data := s.Data[source.key]; err == nil && len(data) > 0 {
			return data, nil
		}
	}
	return nil, ErrNoManagerKubeconfig
}
