package hostcopy

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/nestdev/nest/internal/kindsync"
	"github.com/nestdev/nest/internal/syncer/contract"
	"github.com/nestdev/nest/internal/syncer/kinds"
	"github.com/nestdev/nest/internal/syncer/tenantmsg"
)

// Kind is one kind of tenant object copied to the host while a pod on the
// virtual node uses it (ConfigMaps, Secrets). A tenant object nothing on
// the virtual node uses costs the host nothing, and a pod keeps the files
// of a copy deleted under it, as on a real node.
type Kind[T interface {
	metav1.Object
	runtime.Object
}] struct {
	// Name is the kind as Budget and the pod reference index name it
	// (KindConfigMap, KindSecret).
	Name           string
	VirtualCluster string
	Copies         Copies[T]
	// Tenant reads one tenant object from the informer cache.
	Tenant func(namespace, name string) (T, error)
	// Translate is the host copy of a tenant object.
	Translate func(T) T
	// Budget forgets a deleted copy; nil when the kind has none.
	Budget *Budget
	// Referenced reports whether a tenant pod on the virtual node uses the
	// object.
	Referenced func(namespace, name string) bool
	Recorder   record.EventRecorder
	// Scope is what the tenant may read of the host (Target.Scope): the
	// events of a copy that cannot be written name the tenant's object,
	// not its copy.
	Scope tenantmsg.Scope
}

// Apply writes the host copy of obj now, for a pod about to use it. The
// error tells the tenant which of its objects was not copied.
func (k *Kind[T]) Apply(ctx context.Context, obj T) error {
	if err := k.Copies.Apply(ctx, k.Translate(obj)); err != nil {
		return tenantmsg.Wrap(fmt.Errorf("host copy of %s %s: %w", k.Copies.Kind, klog.KObj(obj), err),
			fmt.Sprintf("%s %s could not be copied to the virtual node", k.Copies.Kind, obj.GetName()))
	}
	return nil
}

// Sync keeps the host copy of the tenant object key ("namespace/name") in
// step: refreshed while the object exists and a copy exists or a tenant pod
// references it, deleted once the object is gone. A refused write is a
// Warning event (HostCopyFailed) on the tenant object.
func (k *Kind[T]) Sync(ctx context.Context, key string) (time.Duration, error) {
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return 0, kindsync.Terminal(err)
	}
	hostName := contract.HostName(k.VirtualCluster, namespace, name)
	_, cacheErr := k.Copies.Cached(hostName)
	hasCopy := !apierrors.IsNotFound(cacheErr)
	obj, err := k.Tenant(namespace, name)
	switch {
	case apierrors.IsNotFound(err):
		if !hasCopy {
			return 0, nil
		}
		if err := k.Copies.Delete(ctx, k.VirtualCluster, hostName, namespace, name); err != nil {
			return 0, fmt.Errorf("delete the host copy of %s %s: %w", k.Name, key, err)
		}
		k.Budget.Forget(k.Name, hostName)
		return 0, nil
	case err != nil:
		return 0, err
	case !hasCopy && !k.Referenced(namespace, name):
		return 0, nil
	}
	if err := k.Copies.Apply(ctx, k.Translate(obj)); err != nil {
		k.Recorder.Eventf(obj, corev1.EventTypeWarning, "HostCopyFailed", "Pods on the virtual node keep the previous data until its copy is written: %s", k.Scope.In(namespace).Error(err))
		return 0, fmt.Errorf("host copy of %s %s: %w", k.Name, key, err)
	}
	return 0, nil
}

// Target is where a copied kind writes, and what bounds it: the same for
// ConfigMaps and Secrets.
type Target struct {
	VirtualCluster, HostNamespace string
	// Host writes the copies.
	Host kubernetes.Interface
	// Budget bounds the copies' bytes; Referenced says whether a pod on the
	// virtual node uses a tenant object.
	Budget     *Budget
	Referenced func(namespace, name string) bool
	Recorder   record.EventRecorder
	// Member is the member cluster the copies are written to, "" for the
	// host: a full quota there is the member grant's.
	Member string
}

// TargetOf is the Target of a copied kind registered in c.
func TargetOf(c *kinds.Context, budget *Budget, referenced func(namespace, name string) bool) Target {
	return Target{VirtualCluster: c.VirtualCluster, HostNamespace: c.HostNamespace, Host: c.Host,
		Budget: budget, Referenced: referenced, Recorder: c.Recorder, Member: c.Member}
}

// Scope is what the tenant may read of the host where t writes
// (tenantmsg).
func (t Target) Scope() tenantmsg.Scope {
	return tenantmsg.Scope{VirtualCluster: t.VirtualCluster, HostNamespace: t.HostNamespace, Member: t.Member}
}

// Informers are the tenant and host informers of a copied kind, and the
// List methods of their listers.
type Informers[T metav1.Object] struct {
	Tenant, Host         cache.SharedIndexInformer
	TenantList, HostList func(labels.Selector) ([]T, error)
}

// Register makes the queue name of k, with workers workers: events of
// tenant objects queue them, events of host copies the tenant object they
// stand for, unless skip (may be nil) says the host object is none of k's
// copies. Its resync keys are Keys'.
func Register[T interface {
	metav1.Object
	runtime.Object
}](c *kinds.Context, name string, workers int, k *Kind[T], inf Informers[T], skip func(T) bool) kinds.Registration {
	q := c.NewQueue(name, workers, k.Sync, Keys(inf.TenantList, inf.HostList))
	_, _ = inf.Tenant.AddEventHandler(kinds.OnEvery(func(obj T) { q.Add(obj.GetNamespace() + "/" + obj.GetName()) }))
	_, _ = inf.Host.AddEventHandler(kinds.OnEvery(func(obj T) {
		if skip == nil || !skip(obj) {
			kinds.AddTenantKey(q, obj)
		}
	}))
	return kinds.Registration{Queues: []*kindsync.Syncer{q}}
}
