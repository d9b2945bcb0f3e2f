package persistentvolumeclaim

import (
	"context"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v13/controller"

	"github.com/nestdev/nest/internal/syncer/contract"
)

var standard = contract.StorageClass{Name: "fast", HostName: "standard", ReclaimPolicy: corev1.PersistentVolumeReclaimDelete, VolumeBindingMode: storagev1.VolumeBindingWaitForFirstConsumer, Default: true}

func claim(mutate ...func(*corev1.PersistentVolumeClaim)) *corev1.PersistentVolumeClaim {
	c := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "data-db-0", UID: "uid-c"},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: ptr.To("fast"),
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	for _, m := range mutate {
		m(c)
	}
	return c
}

func options(c *corev1.PersistentVolumeClaim, class string) controller.ProvisionOptions {
	return controller.ProvisionOptions{PVC: c, PVName: "pvc-uid-c", StorageClass: &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: class}}}
}

func TestProvisionMakesTheHostClaimAndATenantVolume(t *testing.T) {
	host := fake.NewClientset()
	p := &Provisioner{VirtualCluster: "alpha", HostNamespace: "vc-alpha", Host: host, Classes: []contract.StorageClass{standard}}
	pv, state, err := p.Provision(context.Background(), options(claim(), "fast"))
	if err != nil || state != controller.ProvisioningFinished {
		t.Fatalf("Provision = %v, %v", state, err)
	}
	name := contract.HostName("alpha", "shop", "data-db-0")
	hc, err := host.CoreV1().PersistentVolumeClaims("vc-alpha").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !contract.IsCopyOf(hc, "alpha", "shop", "data-db-0") || ptr.Deref(hc.Spec.StorageClassName, "") != "standard" || hc.Spec.Selector != nil || hc.Spec.VolumeName != "" {
		t.Errorf("host claim %+v", hc)
	}
	if got := hc.Spec.Resources.Requests[corev1.ResourceStorage]; got.Cmp(resource.MustParse("1Gi")) != 0 {
		t.Errorf("host request %s", got.String())
	}
	if pv.Spec.CSI == nil || pv.Spec.CSI.Driver != DriverName || pv.Spec.CSI.VolumeHandle != name || pv.Spec.StorageClassName != "fast" ||
		pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete {
		t.Errorf("tenant volume %+v", pv.Spec)
	}
	// Provisioned again (a restart between the host claim and the volume):
	// the same host claim serves.
	if _, _, err := p.Provision(context.Background(), options(claim(), "fast")); err != nil {
		t.Errorf("second Provision: %v", err)
	}
	// A new claim of the same name does not take the earlier claim's
	// retained volume.
	again := claim(func(c *corev1.PersistentVolumeClaim) { c.UID = "uid-again" })
	if _, state, err := p.Provision(context.Background(), options(again, "fast")); err == nil || state == controller.ProvisioningFinished {
		t.Errorf("Provision over an earlier claim's host claim = %v, %v; want a retry with a reason", state, err)
	}
}

// Claims that would choose a volume themselves, or of a class the virtual
// node does not offer, are refused with the field named; nothing reaches
// the host.
func TestProvisionRefuses(t *testing.T) {
	for _, tt := range []struct {
		name, class, want string
		mutate            func(*corev1.PersistentVolumeClaim)
	}{
		{"a selector", "fast", "spec.selector", func(c *corev1.PersistentVolumeClaim) {
			c.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"owner": "beta"}}
		}},
		{"a data source", "fast", "spec.dataSource", func(c *corev1.PersistentVolumeClaim) {
			c.Spec.DataSource = &corev1.TypedLocalObjectReference{Kind: "PersistentVolumeClaim", Name: "other"}
		}},
		{"a class of the tenant's own", "mine", "StorageClass mine is not one the virtual node offers: use fast", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			host := fake.NewClientset()
			p := &Provisioner{VirtualCluster: "alpha", HostNamespace: "vc-alpha", Host: host, Classes: []contract.StorageClass{standard}}
			var mutate []func(*corev1.PersistentVolumeClaim)
			if tt.mutate != nil {
				mutate = append(mutate, tt.mutate)
			}
			_, state, err := p.Provision(context.Background(), options(claim(mutate...), tt.class))
			if err == nil || state != controller.ProvisioningFinished || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Provision = %v, %v; want a final refusal naming %q", state, err, tt.want)
			}
			if len(host.Actions()) != 0 {
				t.Errorf("the host was called: %v", host.Actions())
			}
		})
	}
}

// Delete removes only the host claim of the volume's claim, and only when
// it is that claim's copy.
func TestDeleteOnlyTheClaimsCopy(t *testing.T) {
	name := contract.HostName("alpha", "shop", "data-db-0")
	ours := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "vc-alpha",
		Labels: contract.HostLabels("alpha", "shop"), Annotations: contract.HostAnnotations("shop", "data-db-0", "uid-c")}}
	etcd := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "vc-alpha", Labels: map[string]string{contract.LabelTenantOf: "alpha"}}}
	pv := func(uid string) *corev1.PersistentVolume {
		return &corev1.PersistentVolume{Spec: corev1.PersistentVolumeSpec{
			ClaimRef:               &corev1.ObjectReference{Namespace: "shop", Name: "data-db-0", UID: types.UID(uid)},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: DriverName, VolumeHandle: "anything-the-tenant-wrote"}},
		}}
	}
	for _, tt := range []struct {
		name     string
		existing *corev1.PersistentVolumeClaim
		uid      string
		gone     bool
	}{
		{"the copy", ours, "uid-c", true},
		{"not a copy: Nest's own claim under the name", etcd, "uid-c", false},
		{"a volume without the claim's UID", ours, "", false},
		{"a volume of an earlier claim of the name", ours, "uid-earlier", false},
	} {
		host := fake.NewClientset(tt.existing)
		p := &Provisioner{VirtualCluster: "alpha", HostNamespace: "vc-alpha", Host: host}
		err := p.Delete(context.Background(), pv(tt.uid))
		_, getErr := host.CoreV1().PersistentVolumeClaims("vc-alpha").Get(context.Background(), name, metav1.GetOptions{})
		if gone := apierrors.IsNotFound(getErr); gone != tt.gone {
			t.Errorf("%s: deleted %v, want %v (Delete: %v)", tt.name, gone, tt.gone, err)
		}
	}
}

func TestClassesFlagRoundTrip(t *testing.T) {
	want := []contract.StorageClass{standard, {Name: "slow", HostName: "hdd", ReclaimPolicy: corev1.PersistentVolumeReclaimRetain, VolumeBindingMode: storagev1.VolumeBindingImmediate, AllowVolumeExpansion: true}}
	got, err := contract.ParseClasses(contract.FormatClasses(want))
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("ParseClasses(FormatClasses) = %+v, %v; want %+v", got, err, want)
	}
	if _, err := contract.ParseClasses("fast=standard:Delete"); err == nil || !strings.Contains(err.Error(), "name=hostName") {
		t.Errorf("a short entry: %v", err)
	}
}

func TestTenantStorageClasses(t *testing.T) {
	scs, driver := TenantStorageClasses([]contract.StorageClass{standard})
	if len(scs) != 1 || scs[0].Name != "fast" || scs[0].Provisioner != ProvisionerName || scs[0].Annotations["storageclass.kubernetes.io/is-default-class"] != "true" ||
		*scs[0].VolumeBindingMode != storagev1.VolumeBindingWaitForFirstConsumer || scs[0].Labels[LabelMirror] != "true" {
		t.Errorf("tenant classes %+v", scs)
	}
	if driver.Name != DriverName || ptr.Deref(driver.Spec.AttachRequired, true) {
		t.Errorf("driver %+v: the virtual node's volumes need no attachment", driver)
	}
	// The API refuses a CSIDriver, and a volume naming a driver, that is
	// no DNS subdomain.
	if errs := validation.IsDNS1123Subdomain(DriverName); len(errs) > 0 {
		t.Errorf("driver name %q: %v", DriverName, errs)
	}
}
