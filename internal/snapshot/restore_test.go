package snapshot

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/controlplane"
	"github.com/nestdev/nest/internal/kube"
)

func restoredVC() *nestv1.VirtualCluster {
	return &nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: "alpha", Namespace: "vc-alpha"}, Spec: nestv1.VirtualClusterSpec{KubernetesVersion: "v1.36.3"}}
}

// A restore makes the PKI Secret, labelled for nest-manager's cache, and
// the VirtualCluster marked with the snapshot; run again with the same
// snapshot it goes on; a VirtualCluster made otherwise is refused and left
// as it was.
func TestCreateRestoringMakesThePKIFirstAndGoesOnOnlyWithItsOwnSnapshot(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientBuilder().WithScheme(kube.NewScheme()).Build()
	pki := map[string][]byte{"ca.crt": []byte("CA")}
	if err := createRestoring(ctx, c, restoredVC(), pki, "sum-1", "test"); err != nil {
		t.Fatal(err)
	}
	n := controlplane.NamesOf(restoredVC())
	var secret corev1.Secret
	if err := c.Get(ctx, client.ObjectKey{Namespace: "vc-alpha", Name: n.PKISecret()}, &secret); err != nil || string(secret.Data["ca.crt"]) != "CA" {
		t.Fatalf("PKI Secret %v: %v", secret.Data, err)
	}
	for k, v := range n.Labels() {
		if secret.Labels[k] != v {
			t.Errorf("PKI Secret labels %v lack %s=%s: nest-manager's cache would not see it", secret.Labels, k, v)
		}
	}
	var vc nestv1.VirtualCluster
	if err := c.Get(ctx, client.ObjectKey{Namespace: "vc-alpha", Name: "alpha"}, &vc); err != nil || vc.Annotations[nestv1.AnnotationRestoring] != "sum-1" {
		t.Fatalf("VirtualCluster annotations %v: %v", vc.Annotations, err)
	}
	if err := createRestoring(ctx, c, restoredVC(), pki, "sum-1", "test"); err != nil {
		t.Errorf("again with the same snapshot: %v, want it to go on", err)
	}
	err := createRestoring(ctx, c, restoredVC(), pki, "sum-2", "test")
	if err == nil || !strings.Contains(err.Error(), "delete it first") {
		t.Errorf("another snapshot over it: %v, want refused", err)
	}
}

// A snapshot too big for the etcd volume is refused before anything is
// made, naming the size that fits.
func TestCheckFitsNamesTheSizeThatFits(t *testing.T) {
	if err := CheckFits(400<<20, resource.MustParse("1Gi")); err != nil {
		t.Errorf("400 MiB into 1Gi: %v", err)
	}
	err := CheckFits(500<<20, resource.MustParse("1Gi"))
	if err == nil || !strings.Contains(err.Error(), "--storage-size 2Gi") || !strings.Contains(err.Error(), "spec.datastore.storageSize") {
		t.Errorf("500 MiB into 1Gi: %v, want refused naming --storage-size 2Gi", err)
	}
}
