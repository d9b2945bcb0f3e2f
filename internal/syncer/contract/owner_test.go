package contract

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
)

func TestHostPodControllerOnlyForControlledTenantPods(t *testing.T) {
	withUID := tr
	withUID.VirtualClusterUID = "vc-uid"
	controlled := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-1", OwnerReferences: []metav1.OwnerReference{
		{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web", UID: "rs-uid", Controller: ptr.To(true)}}}}
	// An owner that is not a controller does not make a pod replicated.
	bare := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "debug", OwnerReferences: []metav1.OwnerReference{
		{APIVersion: "v1", Kind: "ConfigMap", Name: "keeper", UID: "cm-uid"}}}}

	refs := withUID.HostPodController(controlled)
	if len(refs) != 1 {
		t.Fatalf("owner references %+v, want the VirtualCluster alone", refs)
	}
	got := refs[0]
	if got.APIVersion != nestv1.GroupVersion.String() || got.Kind != nestv1.VirtualClusterKind || got.Name != "alpha" || got.UID != "vc-uid" ||
		!ptr.Deref(got.Controller, false) || got.BlockOwnerDeletion != nil {
		t.Errorf("owner reference %+v, want the VirtualCluster alpha (vc-uid) as controller, without blockOwnerDeletion", got)
	}
	if refs := withUID.HostPodController(bare); refs != nil {
		t.Errorf("a tenant pod with no controller: owner references %+v, want none (kubectl drain refuses it, as upstream)", refs)
	}
	if refs := tr.HostPodController(controlled); refs != nil {
		t.Errorf("no VirtualCluster UID: owner references %+v, want none", refs)
	}
}
