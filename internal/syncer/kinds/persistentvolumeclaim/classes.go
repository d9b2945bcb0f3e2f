package persistentvolumeclaim

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	storagev1 "k8s.io/api/storage/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nestdev/nest/internal/syncer/contract"
)

// ClassesKey is the one key of the classes syncer's queue.
const ClassesKey = "storageclasses"

// ClassMirror keeps the tenant's StorageClasses and CSIDriver those of
// TenantStorageClasses: it makes what is missing, makes again what the
// tenant changed (their fields cannot be updated), and deletes mirrored
// classes the VirtualCluster no longer offers. The tenant's own classes,
// without LabelMirror, are left alone; claims of those are refused by the
// Provisioner.
type ClassMirror struct {
	Tenant  kubernetes.Interface
	Classes []contract.StorageClass
}

// Sync brings the tenant's mirrored classes and driver in line; key is
// ClassesKey.
func (m *ClassMirror) Sync(ctx context.Context, _ string) (time.Duration, error) {
	want, driver := TenantStorageClasses(m.Classes)
	scs := m.Tenant.StorageV1().StorageClasses()
	have, err := scs.List(ctx, metav1.ListOptions{LabelSelector: LabelMirror + "=true"})
	if err != nil {
		return 0, err
	}
	var errs []error
	wanted := map[string]bool{}
	for _, sc := range want {
		wanted[sc.Name] = true
		errs = append(errs, m.ensureClass(ctx, sc))
	}
	for _, sc := range have.Items {
		if !wanted[sc.Name] {
			if err := scs.Delete(ctx, sc.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, err)
			}
		}
	}
	errs = append(errs, m.ensureDriver(ctx, driver))
	return 0, errors.Join(errs...)
}

func (m *ClassMirror) ensureClass(ctx context.Context, want *storagev1.StorageClass) error {
	scs := m.Tenant.StorageV1().StorageClasses()
	got, err := scs.Get(ctx, want.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = scs.Create(ctx, want, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	if got.Labels[LabelMirror] != "true" {
		return fmt.Errorf("the tenant's own StorageClass %s holds the name of a class the virtual node offers: the class is not shown until it is renamed", want.Name)
	}
	same := got.Provisioner == want.Provisioner && apiequality.Semantic.DeepEqual(got.ReclaimPolicy, want.ReclaimPolicy) &&
		apiequality.Semantic.DeepEqual(got.VolumeBindingMode, want.VolumeBindingMode) && apiequality.Semantic.DeepEqual(got.AllowVolumeExpansion, want.AllowVolumeExpansion) &&
		len(got.Parameters) == 0 && len(got.MountOptions) == 0 && len(got.AllowedTopologies) == 0
	if !same {
		if err := scs.Delete(ctx, got.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		_, err = scs.Create(ctx, want, metav1.CreateOptions{})
		return err
	}
	if maps.Equal(got.Annotations, want.Annotations) {
		return nil
	}
	upd := got.DeepCopy()
	upd.Annotations = want.Annotations
	_, err = scs.Update(ctx, upd, metav1.UpdateOptions{})
	return err
}

func (m *ClassMirror) ensureDriver(ctx context.Context, want *storagev1.CSIDriver) error {
	drivers := m.Tenant.StorageV1().CSIDrivers()
	got, err := drivers.Get(ctx, want.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = drivers.Create(ctx, want, metav1.CreateOptions{})
		return err
	}
	if err != nil || apiequality.Semantic.DeepEqual(got.Spec.AttachRequired, want.Spec.AttachRequired) {
		return err
	}
	if err := drivers.Delete(ctx, got.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	_, err = drivers.Create(ctx, want, metav1.CreateOptions{})
	return err
}
