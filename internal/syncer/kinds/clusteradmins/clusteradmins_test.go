package clusteradmins

import (
	"context"
	"fmt"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nestdev/nest/internal/addons"
	"github.com/nestdev/nest/internal/components"
	"github.com/nestdev/nest/internal/syncer/kinds"
	"github.com/nestdev/nest/internal/testutil"
)

// run starts the kind against tenant, as the runtime does once informers
// have synced.
func run(t *testing.T, tenant *fake.Clientset) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	c := &kinds.Context{VirtualCluster: "alpha", HostNamespace: "vc-alpha", Mode: kinds.VirtualNode, Tenant: tenant,
		TenantInformers: informers.NewSharedInformerFactory(tenant, 0)}
	reg := Register(c)
	c.TenantInformers.Start(ctx.Done())
	c.TenantInformers.WaitForCacheSync(ctx.Done())
	for _, q := range reg.Queues {
		go q.Run(ctx)
	}
}

// kept waits until the tenant holds Binding as nest-syncer writes it.
func kept(t *testing.T, tenant *fake.Clientset, what string) {
	t.Helper()
	want := Binding()
	testutil.Eventually(t, 10*time.Second, what, func() error {
		have, err := tenant.RbacV1().ClusterRoleBindings().Get(context.Background(), addons.ClusterAdminsName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if have.RoleRef != want.RoleRef || !equality.Semantic.DeepEqual(have.Subjects, want.Subjects) ||
			!equality.Semantic.DeepEqual(have.Labels, want.Labels) || !equality.Semantic.DeepEqual(have.Annotations, want.Annotations) {
			return fmt.Errorf("binding %+v, want %+v", have, want)
		}
		return nil
	})
}

func TestBindingMakesTheAdministratorsClusterAdmin(t *testing.T) {
	b := Binding()
	if b.Name != components.ClusterAdminsGroup || b.RoleRef.Kind != "ClusterRole" || b.RoleRef.Name != "cluster-admin" {
		t.Errorf("binding %s to %s %s, want %s to ClusterRole cluster-admin", b.Name, b.RoleRef.Kind, b.RoleRef.Name, components.ClusterAdminsGroup)
	}
	if len(b.Subjects) != 1 || b.Subjects[0].Kind != rbacv1.GroupKind || b.Subjects[0].Name != components.ClusterAdminsGroup {
		t.Errorf("subjects %+v, want the group %s alone", b.Subjects, components.ClusterAdminsGroup)
	}
}

// The binding is made at start, and put back when deleted, narrowed, or
// replaced by one to another role.
func TestBindingIsCreatedAndRepaired(t *testing.T) {
	tenant := fake.NewClientset()
	run(t, tenant)
	kept(t, tenant, "the binding is made at start")
	ctx := context.Background()
	bindings := tenant.RbacV1().ClusterRoleBindings()

	if err := bindings.Delete(ctx, addons.ClusterAdminsName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	kept(t, tenant, "the binding is made again after a deletion")

	narrowed := Binding()
	narrowed.Subjects = []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "someone-else"}}
	narrowed.Annotations = nil
	if _, err := bindings.Update(ctx, narrowed, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	kept(t, tenant, "the binding's subjects and annotations are put back")

	if err := bindings.Delete(ctx, addons.ClusterAdminsName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	view := Binding()
	view.RoleRef.Name = "view"
	if _, err := bindings.Create(ctx, view, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kept(t, tenant, "a binding of that name to another role is replaced")
}
