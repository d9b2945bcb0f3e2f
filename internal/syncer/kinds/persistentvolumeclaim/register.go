package persistentvolumeclaim

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v13/controller"

	"github.com/nestdev/nest/internal/kindsync"
	"github.com/nestdev/nest/internal/syncer/contract"
	"github.com/nestdev/nest/internal/syncer/kinds"
)

// provisionWorkers is how many tenant claims are provisioned at once, and
// volumeWorkers how many are kept in step with their host claims.
const (
	provisionWorkers = 2
	volumeWorkers    = 2
)

// Register makes the tenant's storage: the mirror of the StorageClasses
// the VirtualCluster offers (queue "storageclasses", made right again when
// the tenant changes or deletes a mirrored class or the CSIDriver), and the
// provisioner of their claims, which runs
// sig-storage-lib-external-provisioner's claim lifecycle against the tenant
// API server. Without classes the kind registers nothing, and tenant claims
// stay Pending as on a cluster without a provisioner. Bound claims are kept
// in step with their host claims (Volumes: queue "persistentvolumeclaims").
// Virtual-node syncer only.
func Register(c *kinds.Context, classes []contract.StorageClass) kinds.Registration {
	if len(classes) == 0 {
		return kinds.Registration{}
	}
	mirror := &ClassMirror{Tenant: c.Tenant, Classes: classes}
	mirrorQueue := c.NewQueue("storageclasses", 1, mirror.Sync, func() []string { return []string{ClassesKey} })
	_, _ = c.TenantInformers.Storage().V1().StorageClasses().Informer().AddEventHandler(kinds.OnEvery(func(*storagev1.StorageClass) {
		mirrorQueue.Add(ClassesKey)
	}))
	_, _ = c.TenantInformers.Storage().V1().CSIDrivers().Informer().AddEventHandler(kinds.OnEvery(func(*storagev1.CSIDriver) {
		mirrorQueue.Add(ClassesKey)
	}))
	volumes := &Volumes{
		VirtualCluster: c.VirtualCluster, HostNamespace: c.HostNamespace, Tenant: c.Tenant, Host: c.Host, Recorder: c.Recorder,
		TenantClaims:  c.TenantInformers.Core().V1().PersistentVolumeClaims().Lister(),
		TenantVolumes: c.TenantInformers.Core().V1().PersistentVolumes().Lister(),
		HostClaims:    c.HostInformers.Core().V1().PersistentVolumeClaims().Lister().PersistentVolumeClaims(c.HostNamespace),
	}
	volumeQueue := c.NewQueue("persistentvolumeclaims", volumeWorkers, volumes.Sync, volumes.Keys)
	_, _ = c.TenantInformers.Core().V1().PersistentVolumeClaims().Informer().AddEventHandler(kinds.OnEvery(func(claim *corev1.PersistentVolumeClaim) {
		volumeQueue.Add(claim.Namespace + "/" + claim.Name)
	}))
	_, _ = c.TenantInformers.Core().V1().PersistentVolumes().Informer().AddEventHandler(kinds.OnEvery(func(pv *corev1.PersistentVolume) {
		if ref := pv.Spec.ClaimRef; ref != nil {
			volumeQueue.Add(ref.Namespace + "/" + ref.Name)
		}
	}))
	_, _ = c.HostInformers.Core().V1().PersistentVolumeClaims().Informer().AddEventHandler(kinds.OnEvery(func(claim *corev1.PersistentVolumeClaim) {
		kinds.AddTenantKey(volumeQueue, claim)
	}))
	p := &Provisioner{VirtualCluster: c.VirtualCluster, HostNamespace: c.HostNamespace, Host: c.Host, Classes: classes}
	return kinds.Registration{
		Queues: []*kindsync.Syncer{mirrorQueue, volumeQueue},
		Runners: []func(context.Context){func(ctx context.Context) {
			controller.NewProvisionController(ctx, c.Tenant, ProvisionerName, p,
				// Only the leading syncer runs at all (internal/syncer/leader.go).
				controller.LeaderElection(false),
				controller.Threadiness(provisionWorkers),
			).Run(ctx)
		}},
	}
}
