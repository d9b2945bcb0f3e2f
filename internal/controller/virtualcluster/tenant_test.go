package virtualcluster

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/nestdev/nest/internal/addons"
	"github.com/nestdev/nest/internal/components"
	"github.com/nestdev/nest/internal/controlplane"
)

// nest-manager, in system:masters, is allowed everything from the start, so
// its health check asks the authorizer about the administrators: they are
// cluster-admin only once nest-syncer's binding is there and the RBAC
// authorizer has seen it.
func TestAdministratorsAuthorizedFollowsTheirBinding(t *testing.T) {
	env := &envtest.Environment{}
	cfg, err := env.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	manager, err := env.AddUser(envtest.User{Name: controlplane.ManagerUser, Groups: []string{components.MastersGroup}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := manager.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := (APITenants{}).AdministratorsAuthorized(ctx, kubeconfig); err == nil {
		t.Error("the administrators are reported cluster-admin before their binding exists")
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, addons.ClusterAdmins(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the administrators are cluster-admin", func() error {
		return APITenants{}.AdministratorsAuthorized(ctx, kubeconfig)
	})
}
