// Package clusteradmins keeps the tenant's ClusterRoleBinding that makes
// its administrators cluster-admin (addons.ClusterAdmins). The
// administrators' certificates name components.ClusterAdminsGroup, not
// system:masters, so that API Priority and Fairness holds them; their
// rights then live in this one object, which nest-syncer creates as soon
// as it leads and puts back whenever it is deleted or differs. Until it
// exists the administrators' requests are refused; nest-manager's health
// check asks the authorizer whether they are cluster-admin, so it reports a
// new VirtualCluster Ready only once the binding is there. The API server's static policy
// (addons.ClusterAdminsGuard) keeps everyone but nest-syncer from changing
// it in the first place.
package clusteradmins

import (
	"context"
	"fmt"
	"maps"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	rbaclisters "k8s.io/client-go/listers/rbac/v1"

	"github.com/nestdev/nest/internal/addons"
	"github.com/nestdev/nest/internal/kindsync"
	"github.com/nestdev/nest/internal/syncer/contract"
	"github.com/nestdev/nest/internal/syncer/kinds"
)

// Binding is the ClusterRoleBinding nest-syncer keeps: addons.ClusterAdmins,
// labelled as nest-syncer's.
func Binding() *rbacv1.ClusterRoleBinding {
	b := addons.ClusterAdmins()
	b.Labels = map[string]string{contract.LabelManagedBy: contract.ManagedByValue}
	return b
}

// Register keeps Binding (queue "clusteradmins", one key). It follows the
// tenant's ClusterRoleBindings, so a deletion or change is put right at
// once, and the periodic resync catches a missed event.
func Register(c *kinds.Context) kinds.Registration {
	k := &keeper{tenant: c.Tenant, bindings: c.TenantInformers.Rbac().V1().ClusterRoleBindings().Lister()}
	q := c.NewQueue("clusteradmins", 1, k.sync, func() []string { return []string{addons.ClusterAdminsName} })
	_, _ = c.TenantInformers.Rbac().V1().ClusterRoleBindings().Informer().AddEventHandler(kinds.OnEvery(func(b *rbacv1.ClusterRoleBinding) {
		if b.Name == addons.ClusterAdminsName {
			q.Add(addons.ClusterAdminsName)
		}
	}))
	return kinds.Registration{Queues: []*kindsync.Syncer{q}}
}

// keeper writes Binding to the tenant.
type keeper struct {
	tenant   kubernetes.Interface
	bindings rbaclisters.ClusterRoleBindingLister
}

// sync creates Binding when it is missing and writes it back when it
// differs. A binding to another role is deleted, as roleRef cannot change,
// and created anew on the pass its deletion queues.
func (k *keeper) sync(ctx context.Context, _ string) (time.Duration, error) {
	want := Binding()
	client := k.tenant.RbacV1().ClusterRoleBindings()
	have, err := k.bindings.Get(want.Name)
	switch {
	case apierrors.IsNotFound(err):
		_, err = client.Create(ctx, want, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			// The informer has not seen it yet: its event queues a check.
			err = nil
		}
	case err != nil:
	case have.RoleRef != want.RoleRef:
		err = client.Delete(ctx, have.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &have.UID}})
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			err = nil
		}
	case !equality.Semantic.DeepEqual(have.Subjects, want.Subjects) || !maps.Equal(have.Labels, want.Labels) || !maps.Equal(have.Annotations, want.Annotations):
		// The binding is nest-syncer's alone: what it does not write goes.
		upd := have.DeepCopy()
		upd.Subjects, upd.Labels, upd.Annotations = want.Subjects, want.Labels, want.Annotations
		_, err = client.Update(ctx, upd, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			err = nil
		}
	}
	if err != nil {
		return 0, fmt.Errorf("ClusterRoleBinding %s, which makes the tenant's administrators cluster-admin: %w", want.Name, err)
	}
	return 0, nil
}
