package controlplane

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/syncer/contract"
)

// Defaults of spec.virtualNode.storage.
var (
	DefaultStorageRequests       = resource.MustParse("10Gi")
	DefaultStorageClaims   int32 = 20
)

// defaultClassAnnotation marks a cluster's default StorageClass.
const defaultClassAnnotation = "storageclass.kubernetes.io/is-default-class"

// StorageClassesFor returns the StorageClasses the tenant sees, from
// spec.virtualNode.storage.classes and the host's classes: unset, the
// host's default class as the tenant's default. missing lists the entries
// that name no host class, as "spec.virtualNode.storage.classes[i]: ...",
// for the VirtualCluster's events; those are left out.
func StorageClassesFor(vc *nestv1.VirtualCluster, host []storagev1.StorageClass) (classes []contract.StorageClass, missing []string) {
	find := func(name string) *storagev1.StorageClass {
		for i := range host {
			if host[i].Name == name {
				return &host[i]
			}
		}
		return nil
	}
	mappings := vc.Spec.VirtualNode.Storage.Classes
	if mappings == nil {
		for i := range host {
			if host[i].Annotations[defaultClassAnnotation] == "true" {
				mappings = []nestv1.StorageClassMapping{{HostName: host[i].Name, Default: true}}
				break
			}
		}
	}
	for i, m := range mappings {
		h := find(m.HostName)
		if h == nil {
			missing = append(missing, fmt.Sprintf("spec.virtualNode.storage.classes[%d]: the host has no StorageClass %q: name one of the host's classes", i, m.HostName))
			continue
		}
		name := m.Name
		if name == "" {
			name = m.HostName
		}
		classes = append(classes, contract.StorageClass{
			Name: name, HostName: h.Name, Default: m.Default,
			ReclaimPolicy:        ptr.Deref(h.ReclaimPolicy, corev1.PersistentVolumeReclaimDelete),
			VolumeBindingMode:    ptr.Deref(h.VolumeBindingMode, storagev1.VolumeBindingImmediate),
			AllowVolumeExpansion: ptr.Deref(h.AllowVolumeExpansion, false),
		})
	}
	return classes, missing
}

// StorageBudget is what spec.virtualNode.storage lets the tenant's claims
// take on the host: their requests together and their number.
func StorageBudget(vc *nestv1.VirtualCluster) (requests resource.Quantity, claims int64) {
	s := vc.Spec.VirtualNode.Storage
	requests = DefaultStorageRequests
	if s.Requests != nil {
		requests = *s.Requests
	}
	return requests, int64(ptr.Deref(s.Claims, DefaultStorageClaims))
}
