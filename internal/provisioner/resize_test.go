package provisioner

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

func resizeFixture(request, capacity, provisionedBy string, claimUID types.UID) (*Resizer, *fake.Clientset) {
	claim := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "data", UID: "uid-data"},
		Spec: corev1.PersistentVolumeClaimSpec{VolumeName: "pv-1",
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(request)}}},
		Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound,
			Capacity:   corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(capacity)},
			Conditions: []corev1.PersistentVolumeClaimCondition{{Type: corev1.PersistentVolumeClaimResizing, Status: corev1.ConditionTrue}}},
	}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pv-1", Annotations: map[string]string{annotationProvisionedBy: provisionedBy}},
		Spec: corev1.PersistentVolumeSpec{Capacity: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(capacity)},
			ClaimRef: &corev1.ObjectReference{Namespace: "ns", Name: "data", UID: claimUID}},
	}
	claims, pvs := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}), cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	_ = claims.Add(claim)
	_ = pvs.Add(pv)
	client := fake.NewClientset(claim, pv)
	return &Resizer{Client: client, Claims: corelisters.NewPersistentVolumeClaimLister(claims), Volumes: corelisters.NewPersistentVolumeLister(pvs)}, client
}

func TestResizerGrowsTheVolumeAndRecordsItOnTheClaim(t *testing.T) {
	r, client := resizeFixture("3Gi", "1Gi", Name, "uid-data")
	if _, err := r.Sync(context.Background(), "ns/data"); err != nil {
		t.Fatal(err)
	}
	pv, _ := client.CoreV1().PersistentVolumes().Get(context.Background(), "pv-1", metav1.GetOptions{})
	if q := pv.Spec.Capacity[corev1.ResourceStorage]; q.String() != "3Gi" {
		t.Errorf("volume capacity = %s, want 3Gi", q.String())
	}
	claim, _ := client.CoreV1().PersistentVolumeClaims("ns").Get(context.Background(), "data", metav1.GetOptions{})
	if q := claim.Status.Capacity[corev1.ResourceStorage]; q.String() != "3Gi" {
		t.Errorf("claim capacity = %s, want 3Gi", q.String())
	}
	if q := claim.Status.AllocatedResources[corev1.ResourceStorage]; q.String() != "3Gi" {
		t.Errorf("claim allocatedResources = %s, want 3Gi", q.String())
	}
	if len(claim.Status.Conditions) != 0 {
		t.Errorf("claim conditions = %+v, want the Resizing condition gone", claim.Status.Conditions)
	}
}

func TestResizerLeavesOtherVolumesAndSettledClaimsAlone(t *testing.T) {
	for name, f := range map[string][4]string{
		"another provisioner's volume":  {"3Gi", "1Gi", "other.example.com/csi", "uid-data"},
		"request within capacity":       {"1Gi", "1Gi", Name, "uid-data"},
		"a volume bound to another one": {"3Gi", "1Gi", Name, "uid-earlier"},
	} {
		t.Run(name, func(t *testing.T) {
			r, client := resizeFixture(f[0], f[1], f[2], types.UID(f[3]))
			if _, err := r.Sync(context.Background(), "ns/data"); err != nil {
				t.Fatal(err)
			}
			if n := len(client.Actions()); n != 0 {
				t.Errorf("%d writes: %v", n, client.Actions())
			}
		})
	}
}
