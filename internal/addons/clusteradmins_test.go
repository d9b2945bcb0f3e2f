package addons

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nestdev/nest/internal/components"
	"github.com/nestdev/nest/internal/testutil"
)

// On a real API server with the tenant's static policies, a tenant
// administrator in nest:cluster-admins is cluster-admin once the binding
// exists, and cannot remove or weaken it, nor the role it grants; nest-syncer
// can.
func TestClusterAdminsAreClusterAdminAndCannotUnbindThemselves(t *testing.T) {
	cfg := startWithStaticAdmission(t)
	ctx := context.Background()
	tenant := as(t, cfg, "nest-admin", components.ClusterAdminsGroup)
	syncer := as(t, cfg, testRules.Owner, components.MastersGroup)

	// Without the binding the group is nothing: its rights are the
	// binding's alone.
	if err := tenant.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "before-binding"}}); !apierrors.IsForbidden(err) {
		t.Fatalf("the administrator creates a namespace before nest-syncer bound its group: %v, want Forbidden", err)
	}
	if err := syncer.Create(ctx, ClusterAdmins()); err != nil {
		t.Fatalf("nest-syncer creates the binding: %v", err)
	}

	// Cluster-admin things: every verb on every resource, impersonation,
	// the node proxy, and granting cluster-admin to others. The RBAC
	// authorizer learns of the binding from its own watch, a moment after
	// the create returns.
	testutil.Eventually(t, 30*time.Second, "the administrator creates a namespace once its group is bound", func() error {
		return tenant.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}})
	})
	if err := tenant.List(ctx, &corev1.SecretList{}); err != nil {
		t.Errorf("the administrator lists every namespace's Secrets: %v", err)
	}
	for _, attrs := range []authorizationv1.ResourceAttributes{
		{Verb: "impersonate", Resource: "users", Name: "someone"},
		{Verb: "impersonate", Resource: "groups", Name: components.MastersGroup},
		{Verb: "get", Resource: "nodes", Subresource: "proxy"},
		{Verb: "escalate", Group: rbacv1.GroupName, Resource: "clusterroles"},
		{Verb: "approve", Group: "certificates.k8s.io", Resource: "signers", Name: "kubernetes.io/kube-apiserver-client"},
	} {
		review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &attrs}}
		if err := tenant.Create(ctx, review); err != nil || !review.Status.Allowed {
			t.Errorf("the administrator may not %s %s/%s %s: %v %s", attrs.Verb, attrs.Resource, attrs.Subresource, attrs.Name, err, review.Status.Reason)
		}
	}
	own := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "team-a-admins"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: ClusterAdminRole},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: "team-a"}},
	}
	if err := tenant.Create(ctx, own); err != nil {
		t.Errorf("the administrator grants another group cluster-admin: %v", err)
	}
	if err := tenant.Delete(ctx, own); err != nil {
		t.Errorf("the administrator deletes a binding of its own: %v", err)
	}

	// What would lock every administrator out is refused, with a message
	// that says what to do instead.
	binding := &rbacv1.ClusterRoleBinding{}
	if err := tenant.Get(ctx, client.ObjectKey{Name: ClusterAdminsName}, binding); err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.ClusterRole{}
	if err := tenant.Get(ctx, client.ObjectKey{Name: ClusterAdminRole}, role); err != nil {
		t.Fatal(err)
	}
	narrowed := binding.DeepCopy()
	narrowed.Subjects = []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "someone-else"}}
	emptied := role.DeepCopy()
	emptied.Rules = nil
	for _, tc := range []struct {
		name  string
		write func() error
	}{
		{"changes the binding's subject", func() error { return tenant.Update(ctx, narrowed) }},
		{"labels the binding (any update)", func() error {
			return tenant.Patch(ctx, binding.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"a":"b"}}}`)))
		}},
		{"empties the cluster-admin role", func() error { return tenant.Update(ctx, emptied) }},
		{"deletes the cluster-admin role", func() error { return tenant.Delete(ctx, role.DeepCopy()) }},
		{"deletes the binding", func() error { return tenant.Delete(ctx, binding.DeepCopy()) }},
		// Admission sees each object of a collection without its name.
		{"deletes every binding of that name", func() error {
			return tenant.DeleteAllOf(ctx, &rbacv1.ClusterRoleBinding{},
				client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("metadata.name", ClusterAdminsName)})
		}},
	} {
		if err := requireGuardRefusal(tc.write()); err != nil {
			t.Errorf("the administrator %s: %v", tc.name, err)
		}
	}
	if err := tenant.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-b"}}); err != nil {
		t.Errorf("the administrator is still cluster-admin after the refusals: %v", err)
	}

	// nest-syncer keeps the binding: it may change and delete it.
	if err := syncer.Get(ctx, client.ObjectKey{Name: ClusterAdminsName}, binding); err != nil {
		t.Fatal(err)
	}
	binding.Labels = map[string]string{"app.kubernetes.io/managed-by": "nest-syncer"}
	if err := syncer.Update(ctx, binding); err != nil {
		t.Errorf("nest-syncer updates the binding: %v", err)
	}
	if err := syncer.Delete(ctx, binding); err != nil {
		t.Errorf("nest-syncer deletes the binding: %v", err)
	}
}

// requireGuardRefusal checks err is ClusterAdminsGuard's refusal.
func requireGuardRefusal(err error) error {
	if err == nil {
		return errors.New("allowed")
	}
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), ClusterAdminsGuardName) || !strings.Contains(err.Error(), "make a ClusterRoleBinding of your own") {
		return fmt.Errorf("%v, want %s's Forbidden", err, ClusterAdminsGuardName)
	}
	return nil
}
