package contract

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
)

// HostPodController returns the owner references of the host pod of
// tenant: the VirtualCluster as its controller when tenant has a
// controller of its own and the VirtualCluster's UID is known, nil
// otherwise.
//
// kubectl drain (and other tools that follow its rule, such as the
// cluster autoscaler) evicts only pods that name a controller, and refuses
// the rest without --force, because nothing would replace them. A host pod
// evicted this way is replaced: the syncer deletes its tenant pod
// (HostPodDeleted) and the tenant's controller makes a new one. A bare
// tenant pod's host pod names none, so a drain refuses it as upstream
// refuses a bare pod on a node. The owner is the VirtualCluster, not an
// object the manager may recreate: the host's garbage collector deletes
// the pods only once the VirtualCluster is gone, which its finalizer
// does anyway. No blockOwnerDeletion: it would need the right to update
// the VirtualCluster's finalizers.
func (t Translation) HostPodController(tenant *corev1.Pod) []metav1.OwnerReference {
	if t.VirtualClusterUID == "" || metav1.GetControllerOf(tenant) == nil {
		return nil
	}
	return []metav1.OwnerReference{{
		APIVersion: nestv1.GroupVersion.String(), Kind: nestv1.VirtualClusterKind,
		Name: t.VirtualCluster, UID: t.VirtualClusterUID, Controller: ptr.To(true),
	}}
}
