package syncer

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v13/controller"

	"github.com/nestdev/nest/internal/kindsync"
	"github.com/nestdev/nest/internal/syncer/kinds/persistentvolumeclaim"
)

// provisionWorkers is how many tenant claims are provisioned at once.
const provisionWorkers = 2

// wireStorage makes the tenant's storage (kinds/persistentvolumeclaim):
// the mirror of the StorageClasses the VirtualCluster offers, and the
// provisioner of their claims, which runs
// sig-storage-lib-external-provisioner's claim lifecycle against the tenant
// API server. Host syncer only, and only when classes are offered.
func (s *syncer) wireStorage(ctx context.Context, tenant, host kubernetes.Interface) {
	if len(s.o.StorageClasses) == 0 {
		return
	}
	mirror := &persistentvolumeclaim.ClassMirror{Tenant: tenant, Classes: s.o.StorageClasses}
	s.storageClasses = kindsync.New("storageclasses", 1, mirror.Sync, func() []string { return []string{persistentvolumeclaim.ClassesKey} })
	p := &persistentvolumeclaim.Provisioner{VirtualCluster: s.o.VirtualCluster, HostNamespace: s.o.HostNamespace, Host: host, Classes: s.o.StorageClasses}
	s.provisioner = controller.NewProvisionController(ctx, tenant, persistentvolumeclaim.ProvisionerName, p,
		// Only the leading syncer runs at all (leader.go).
		controller.LeaderElection(false),
		controller.Threadiness(provisionWorkers),
	)
}

// addStorageHandlers makes the mirror right again when the tenant changes
// or deletes a mirrored class.
func (s *syncer) addStorageHandlers() {
	if s.storageClasses == nil {
		return
	}
	_, _ = s.tenantF.Storage().V1().StorageClasses().Informer().AddEventHandler(onEvery(func(metav1.Object) {
		s.storageClasses.Add(persistentvolumeclaim.ClassesKey)
	}))
	_, _ = s.tenantF.Storage().V1().CSIDrivers().Informer().AddEventHandler(onEvery(func(metav1.Object) {
		s.storageClasses.Add(persistentvolumeclaim.ClassesKey)
	}))
}
