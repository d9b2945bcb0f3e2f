package controlplane

import (
	"context"
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// nest-manager reads a tenant with its own kubeconfig once it exists, with
// the administrator's in-cluster one until then (a tenant an older
// nest-manager made), and reports neither yet with ErrNoManagerKubeconfig.
func TestManagerKubeconfigFallsBackToTheAdmins(t *testing.T) {
	ctx := context.Background()
	v := vc(nil)
	n := NamesOf(v)
	secret := func(name string, data map[string][]byte) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: n.Namespace, Name: name}, Data: data}
	}
	admin := secret(n.KubeconfigSecret(), map[string][]byte{KubeconfigKey: []byte("external"), KubeconfigInternalKey: []byte("admin")})
	own := secret(n.ManagerKubeconfigSecret(), map[string][]byte{KubeconfigKey: []byte("manager")})
	empty := secret(n.ManagerKubeconfigSecret(), nil)

	for _, tt := range []struct {
		name    string
		secrets []*corev1.Secret
		want    string
	}{
		{"both", []*corev1.Secret{admin, own}, "manager"},
		{"the admin's only", []*corev1.Secret{admin}, "admin"},
		{"an empty manager Secret", []*corev1.Secret{admin, empty}, "admin"},
		{"the manager's only", []*corev1.Secret{own}, "manager"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := fake.NewClientBuilder()
			for _, s := range tt.secrets {
				b = b.WithObjects(s.DeepCopy())
			}
			got, err := ManagerKubeconfig(ctx, b.Build(), v)
			if err != nil || string(got) != tt.want {
				t.Errorf("got %q, %v; want %q", got, err, tt.want)
			}
		})
	}
	if _, err := ManagerKubeconfig(ctx, fake.NewClientBuilder().Build(), v); !errors.Is(err, ErrNoManagerKubeconfig) {
		t.Errorf("no Secrets: %v, want ErrNoManagerKubeconfig", err)
	}
}
