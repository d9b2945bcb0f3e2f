package virtualcluster

import (
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nestdev/nest/internal/controlplane"
)

// CacheOptions limits the manager's informers for the host object kinds
// cached by label (controlplane.HostObjects) to the objects Nest made (those
// labelled with the VirtualCluster's name), so a large host cluster's other
// Secrets are never held in the manager's memory. Every cached object is kept
// without its managedFields, which nest-manager never reads and which are a
// large share of a host object's bytes (a pod's are several kilobytes): a
// smaller cache is less manager memory per tenant.
func CacheOptions() cache.Options {
	req, err := labels.NewRequirement(controlplane.LabelVirtualCluster, selection.Exists, nil)
	if err != nil {
		panic(err) // a constant key: cannot fail
	}
	own := cache.ByObject{Label: labels.NewSelector().Add(*req)}
	byObject := map[client.Object]cache.ByObject{}
	for _, h := range controlplane.HostObjects {
		if h.CachedByLabel {
			byObject[h.New()] = own
		}
	}
	return cache.Options{ByObject: byObject, DefaultTransform: cache.TransformStripManagedFields()}
}
