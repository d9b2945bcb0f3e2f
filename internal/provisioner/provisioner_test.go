package provisioner

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v13/controller"
)

func claim() *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "data", Namespace: "ns"},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
}

func TestPersistentVolume(t *testing.T) {
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "standard"}}
	pv, err := PersistentVolume(controller.ProvisionOptions{StorageClass: sc, PVName: "pvc-1", PVC: claim(), SelectedNodeName: "nest-worker"}, "/v/pvc-1")
	if err != nil {
		t.Fatal(err)
	}
	if pv.Spec.Local == nil || pv.Spec.Local.Path != "/v/pvc-1" {
		t.Errorf("local source = %+v", pv.Spec.Local)
	}
	if got := pv.Spec.Capacity[corev1.ResourceStorage]; got.String() != "1Gi" {
		t.Errorf("capacity = %s", got.String())
	}
	term := pv.Spec.NodeAffinity.Required.NodeSelectorTerms[0].MatchExpressions[0]
	if term.Key != hostnameLabel || term.Values[0] != "nest-worker" {
		t.Errorf("node affinity = %+v", term)
	}
	if pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete || pv.Spec.StorageClassName != "standard" {
		t.Errorf("reclaim %s class %s", pv.Spec.PersistentVolumeReclaimPolicy, pv.Spec.StorageClassName)
	}
}

func TestPersistentVolumeRejects(t *testing.T) {
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "standard"}}
	withSelector := claim()
	withSelector.Spec.Selector = &metav1.LabelSelector{}
	noSize := claim()
	noSize.Spec.Resources.Requests = nil
	for name, tc := range map[string]struct {
		opts controller.ProvisionOptions
		want string
	}{
		"no selected node": {controller.ProvisionOptions{StorageClass: sc, PVC: claim()}, "WaitForFirstConsumer"},
		"selector":         {controller.ProvisionOptions{StorageClass: sc, PVC: withSelector, SelectedNodeName: "n"}, "spec.selector"},
		"no size":          {controller.ProvisionOptions{StorageClass: sc, PVC: noSize, SelectedNodeName: "n"}, "requests.storage"},
	} {
		_, err := PersistentVolume(tc.opts, "/v/x")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one naming %q", name, err, tc.want)
		}
	}
}

func TestProvisionAndDelete(t *testing.T) {
	root := t.TempDir()
	p := &Local{Root: root}
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "standard"}}
	pv, _, err := p.Provision(context.Background(), controller.ProvisionOptions{StorageClass: sc, PVName: "pvc-2", PVC: claim(), SelectedNodeName: "n"})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(filepath.Join(root, "pvc-2")); err != nil || st.Mode().Perm() != 0o777 {
		t.Fatalf("volume directory: %v %v", st, err)
	}
	if err := p.Delete(context.Background(), pv); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "pvc-2")); !os.IsNotExist(err) {
		t.Error("directory survived Delete")
	}
	outside := pv.DeepCopy()
	outside.Spec.Local.Path = "/etc"
	if err := p.Delete(context.Background(), outside); err == nil {
		t.Error("Delete accepted a path outside the root")
	}
	sneaky := pv.DeepCopy()
	sneaky.Spec.Local.Path = root + "/../etc"
	if err := p.Delete(context.Background(), sneaky); err == nil {
		t.Error("Delete accepted a path that escapes the root with ..")
	}
}
