package controlplane

import (
	"reflect"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
)

// HostObject is one kind of object a VirtualCluster has in its host
// namespace. HostObjects lists them all, so the controller's watches, cache
// options and deletion derive from one list, and tests check its phases and
// RBAC markers against it.
type HostObject struct {
	// New returns an empty object of the kind: the type watches, the cache
	// and deletion need.
	New func() client.Object
	// Names returns the names of the VirtualCluster's objects of the kind.
	Names func(Names) []string
	// Build returns the objects as Nest wants them, in the order of Names.
	// It is nil where no builder makes whole objects: the controller writes
	// the Secrets' data as ReconcilePKI and the kubeconfig functions issue
	// it, and the StatefulSet controller makes the etcd claim from the
	// StatefulSet's template.
	Build func(vc *nestv1.VirtualCluster, o Options, ips ServiceIPs) ([]client.Object, error)
	// MadeBy says who creates the objects, and so what Nest may do to them.
	MadeBy Maker
	// Deletion is the step of the finalizer in which the objects go.
	Deletion DeletionStep
	// Watched makes a change to one of the objects, or its deletion,
	// reconcile the VirtualCluster at once, so a deleted object comes back
	// without waiting for the periodic reconcile. Only objects MadeByNest
	// carry the VirtualCluster's controller reference that this needs.
	Watched bool
	// CachedByLabel limits the manager's cache of the kind to objects
	// labelled LabelVirtualCluster, so a large host cluster's other objects
	// of the kind (its Secrets above all) are never held in memory. The
	// objects must then carry the label (Names.Labels), or the cache never
	// sees them.
	CachedByLabel bool
}

// Maker says who creates a kind of host object.
type Maker int

const (
	// MadeByNest objects are created, updated and owned (with a controller
	// reference) by the VirtualCluster controller.
	MadeByNest Maker = iota
	// MadeByStatefulSet objects are made by the host's StatefulSet
	// controller from the control-plane StatefulSet; Nest only deletes them.
	MadeByStatefulSet
)

// DeletionStep orders the deletion of a VirtualCluster's host objects: every
// object of one step is gone before the next step starts.
type DeletionStep int

const (
	// DeleteControlPlane goes first: once the control-plane pod is gone, no
	// nest-syncer recreates the tenant's host pods and copies while the
	// finalizer deletes them.
	DeleteControlPlane DeletionStep = iota
	// DeleteRest goes once the tenant's host pods are gone: the
	// NetworkPolicies, LimitRange and quotas confine those pods to the end,
	// and the etcd claim, tenant data, goes only when no pod mounts it.
	DeleteRest
)

// DeletionSteps are the deletion steps in the order they run.
var DeletionSteps = []DeletionStep{DeleteControlPlane, DeleteRest}

// HostObjects are the kinds of host objects of a VirtualCluster.
var HostObjects = []HostObject{
	{
		New:   func() client.Object { return &appsv1.StatefulSet{} },
		Names: func(n Names) []string { return []string{n.StatefulSet()} },
		Build: func(vc *nestv1.VirtualCluster, o Options, ips ServiceIPs) ([]client.Object, error) {
			return []client.Object{StatefulSetFor(vc, o, ips)}, nil
		},
		MadeBy: MadeByNest, Deletion: DeleteControlPlane, Watched: true, CachedByLabel: true,
	},
	{
		New:    func() client.Object { return &policyv1.PodDisruptionBudget{} },
		Names:  func(n Names) []string { return []string{n.PodDisruptionBudget()} },
		Build:  eachOf(PodDisruptionBudgetFor),
		MadeBy: MadeByNest, Deletion: DeleteControlPlane, Watched: true, CachedByLabel: true,
	},
	{
		New:    func() client.Object { return &corev1.PersistentVolumeClaim{} },
		Names:  Names.EtcdClaims,
		MadeBy: MadeByStatefulSet, Deletion: DeleteRest, CachedByLabel: true,
	},
	{
		New:   func() client.Object { return &corev1.Service{} },
		Names: Names.Services,
		Build: func(vc *nestv1.VirtualCluster, o Options, _ ServiceIPs) ([]client.Object, error) {
			return []client.Object{ServiceFor(vc, o.DefaultServiceType), DNSServiceFor(vc), PeerServiceFor(vc)}, nil
		},
		MadeBy: MadeByNest, Deletion: DeleteRest, Watched: true, CachedByLabel: true,
	},
	{
		New:    func() client.Object { return &corev1.Secret{} },
		Names:  Names.Secrets,
		MadeBy: MadeByNest, Deletion: DeleteRest, Watched: true, CachedByLabel: true,
	},
	{
		New:   func() client.Object { return &corev1.ConfigMap{} },
		Names: Names.ConfigMaps,
		Build: func(vc *nestv1.VirtualCluster, _ Options, _ ServiceIPs) ([]client.Object, error) {
			apiServer, err := APIServerConfigMapFor(vc)
			if err != nil {
				return nil, err
			}
			return []client.Object{DNSConfigMapFor(vc), DedicatedNodesConfigMapFor(vc, nil, nil), EtcdBootstrapConfigMapFor(vc, true), apiServer}, nil
		},
		MadeBy: MadeByNest, Deletion: DeleteRest, Watched: true, CachedByLabel: true,
	},
	{
		New:    func() client.Object { return &corev1.ServiceAccount{} },
		Names:  func(n Names) []string { return []string{n.SyncerServiceAccount()} },
		Build:  eachOf(SyncerServiceAccountFor),
		MadeBy: MadeByNest, Deletion: DeleteRest, Watched: true, CachedByLabel: true,
	},
	{
		New:    func() client.Object { return &rbacv1.RoleBinding{} },
		Names:  func(n Names) []string { return []string{n.SyncerServiceAccount()} },
		Build:  eachOf(SyncerRoleBindingFor),
		MadeBy: MadeByNest, Deletion: DeleteRest, Watched: true, CachedByLabel: true,
	},
	{
		New:    func() client.Object { return &corev1.ResourceQuota{} },
		Names:  func(n Names) []string { return []string{n.TenantQuota(), n.ObjectQuota()} },
		Build:  eachOf(TenantQuotaFor, ObjectQuotaFor),
		MadeBy: MadeByNest, Deletion: DeleteRest, Watched: true, CachedByLabel: true,
	},
	{
		New:    func() client.Object { return &corev1.LimitRange{} },
		Names:  func(n Names) []string { return []string{n.LimitRange()} },
		Build:  eachOf(LimitRangeFor),
		MadeBy: MadeByNest, Deletion: DeleteRest, Watched: true, CachedByLabel: true,
	},
	{
		New:   func() client.Object { return &networkingv1.NetworkPolicy{} },
		Names: Names.NetworkPolicies,
		Build: func(vc *nestv1.VirtualCluster, o Options, _ ServiceIPs) ([]client.Object, error) {
			policies, err := NetworkPoliciesFor(vc, o)
			return objects(policies), err
		},
		MadeBy: MadeByNest, Deletion: DeleteRest, Watched: true, CachedByLabel: true,
	},
}

// Kind is the Kubernetes kind of the objects: the scheme registers the
// built-in types under their Go type names.
func (h HostObject) Kind() string {
	return reflect.TypeOf(h.New()).Elem().Name()
}

// Objects returns an empty object of the kind for each of the
// VirtualCluster's objects, named and in its namespace: keys to read and
// delete them by.
func (h HostObject) Objects(n Names) []client.Object {
	var out []client.Object
	for _, name := range h.Names(n) {
		obj := h.New()
		obj.SetName(name)
		obj.SetNamespace(n.Namespace)
		out = append(out, obj)
	}
	return out
}

// eachOf adapts builders of one object from the VirtualCluster alone to
// HostObject.Build.
func eachOf[T client.Object](builders ...func(*nestv1.VirtualCluster) T) func(*nestv1.VirtualCluster, Options, ServiceIPs) ([]client.Object, error) {
	return func(vc *nestv1.VirtualCluster, _ Options, _ ServiceIPs) ([]client.Object, error) {
		out := make([]client.Object, 0, len(builders))
		for _, build := range builders {
			out = append(out, build(vc))
		}
		return out, nil
	}
}

// objects turns a slice of typed objects into client.Objects.
func objects[T client.Object](typed []T) []client.Object {
	out := make([]client.Object, 0, len(typed))
	for _, obj := range typed {
		out = append(out, obj)
	}
	return out
}
