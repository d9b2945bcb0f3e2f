package hostcopy

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/nestdev/nest/internal/kindsync"
	"github.com/nestdev/nest/internal/syncer/contract"
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
}

// Apply writes the host copy of obj now, for a pod about to use it.
func (k *Kind[T]) Apply(ctx context.Context, obj T) error {
	if err := k.Copies.Apply(ctx, k.Translate(obj)); err != nil {
		return fmt.Errorf("host copy of %s %s: %w", k.Copies.Kind, klog.KObj(obj), err)
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
		k.Recorder.Eventf(obj, corev1.EventTypeWarning, "HostCopyFailed", "Pods on the virtual node keep the previous data until the host copy is written: %v", err)
		return 0, fmt.Errorf("host copy of %s %s: %w", k.Name, key, err)
	}
	return 0, nil
}
