// Package persistentvolumeclaim gives a tenant's PersistentVolumeClaims host
// storage. The tenant sees StorageClasses that mirror host classes, with
// this package as their provisioner (sig-storage-lib-external-provisioner
// runs the claim lifecycle against the tenant API server); each claim of
// one becomes a host claim of the host class in the tenant's host
// namespace, and the tenant gets a PersistentVolume that stands for it.
// The tenant's pods on the virtual node mount the host claim.
//
// The tenant names no host object: the host claim's name is the tenant
// claim's host name (contract.HostName), its spec is only the request,
// access modes, volume mode and host class, and claims that would pick a
// volume themselves (a selector, a data source) are refused.
package persistentvolumeclaim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v13/controller"

	"github.com/nestdev/nest/internal/syncer/contract"
	"github.com/nestdev/nest/internal/syncer/tenantmsg"
)

// ProvisionerName is the provisioner of the tenant StorageClasses Nest
// mirrors, and DriverName the CSI driver the tenant's volumes name (a DNS
// subdomain, as the API requires of drivers). No kubelet ever mounts them:
// the virtual node's host pods mount host claims.
const (
	ProvisionerName = "nest.dev/virtual-node"
	DriverName      = "virtual-node.nest.dev"
)

// LabelMirror marks the tenant StorageClasses and CSIDriver Nest keeps.
const LabelMirror = contract.ReservedPrefix + "mirror"

// Provisioner makes the host claim behind a tenant claim, and deletes it
// when the tenant's volume is reclaimed.
type Provisioner struct {
	VirtualCluster, HostNamespace string
	Host                          kubernetes.Interface
	Classes                       []contract.StorageClass
}

var _ controller.Provisioner = (*Provisioner)(nil)

// refuse is a final provisioning failure: the library reports it on the
// tenant claim (ProvisioningFailed) and does not retry the same claim. It
// names the claim's fields, in the tenant's words.
func refuse(format string, args ...any) (*corev1.PersistentVolume, controller.ProvisioningState, error) {
	return nil, controller.ProvisioningFinished, tenantmsg.AsIs(fmt.Errorf("refused by the virtual node: "+format, args...))
}

// Provision creates the host claim of a tenant claim and returns the
// tenant volume that stands for it: a CSI volume of DriverName whose handle
// is the host claim's name, with the claim's request as capacity. The
// library puts the error on the tenant claim (ProvisioningFailed), so it is
// in the tenant's words (tenantmsg); the host's go to the log.
func (p *Provisioner) Provision(ctx context.Context, o controller.ProvisionOptions) (*corev1.PersistentVolume, controller.ProvisioningState, error) {
	pv, state, err := p.provision(ctx, o)
	if err != nil {
		scope := tenantmsg.Scope{VirtualCluster: p.VirtualCluster, HostNamespace: p.HostNamespace}.In(o.PVC.Namespace)
		told := scope.Tell(err)
		if told.Error() != err.Error() {
			klog.FromContext(ctx).Info("The tenant is told less than the host said", "claim", klog.KObj(o.PVC), "told", told.Error(), "err", err)
		}
		err = told
	}
	return pv, state, err
}

// provision is Provision with the error in the host's words.
func (p *Provisioner) provision(ctx context.Context, o controller.ProvisionOptions) (*corev1.PersistentVolume, controller.ProvisioningState, error) {
	claim := o.PVC
	class, ok := p.class(o.StorageClass.Name)
	if !ok {
		return refuse("StorageClass %s is not one the virtual node offers: use %s", o.StorageClass.Name, strings.Join(p.classNames(), ", "))
	}
	if claim.Spec.Selector != nil {
		return refuse("spec.selector: the virtual node provisions volumes and binds no existing one: remove the selector")
	}
	if claim.Spec.DataSource != nil || claim.Spec.DataSourceRef != nil {
		return refuse("spec.dataSource: volumes of the virtual node start empty: remove the data source")
	}
	request, ok := claim.Spec.Resources.Requests[corev1.ResourceStorage]
	if !ok {
		return refuse("spec.resources.requests.storage is required")
	}
	want := p.hostClaim(claim, class)
	claims := p.Host.CoreV1().PersistentVolumeClaims(p.HostNamespace)
	existing, err := claims.Create(ctx, want, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		existing, err = claims.Get(ctx, want.Name, metav1.GetOptions{})
		if err == nil && !contract.IsCopyOf(existing, p.VirtualCluster, claim.Namespace, claim.Name) {
			return nil, controller.ProvisioningFinished, contract.NotOurCopy("PersistentVolumeClaim", existing, claim.Namespace+"/"+claim.Name)
		}
		if err == nil && (!contract.IsCopyOfUID(existing, p.VirtualCluster, claim.Namespace, claim.Name, string(claim.UID)) || existing.DeletionTimestamp != nil) {
			// An earlier claim's volume, retained or still going: its
			// data is not this claim's to take.
			return nil, controller.ProvisioningNoChange, tenantmsg.AsIs(fmt.Errorf("the host still holds the volume of an earlier claim %s/%s: delete that claim's PersistentVolume (reclaim policy Retain) or wait for it to go", claim.Namespace, claim.Name))
		}
	}
	if apierrors.IsForbidden(err) {
		// Past the host quota: the claim waits, and the tenant reads why.
		return nil, controller.ProvisioningNoChange, tenantmsg.Wrap(fmt.Errorf("create host claim %s: %w", want.Name, err),
			"the host refused the claim")
	}
	if err != nil {
		return nil, controller.ProvisioningInBackground, tenantmsg.Wrap(fmt.Errorf("create host claim %s: %w", want.Name, err), "the claim's volume could not be made on the host")
	}
	return &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: o.PVName},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: request},
			AccessModes:                   slices.Clone(claim.Spec.AccessModes),
			VolumeMode:                    claim.Spec.VolumeMode,
			PersistentVolumeReclaimPolicy: class.ReclaimPolicy,
			StorageClassName:              class.Name,
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: DriverName, VolumeHandle: existing.Name,
			}},
		},
	}, controller.ProvisioningFinished, nil
}

// hostClaim is the host claim of a tenant claim of class.
func (p *Provisioner) hostClaim(claim *corev1.PersistentVolumeClaim, class contract.StorageClass) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name: contract.HostName(p.VirtualCluster, claim.Namespace, claim.Name), Namespace: p.HostNamespace,
			Labels:      contract.HostLabels(p.VirtualCluster, claim.Namespace),
			Annotations: contract.HostAnnotations(claim.Namespace, claim.Name, string(claim.UID)),
		},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      slices.Clone(claim.Spec.AccessModes),
			VolumeMode:       claim.Spec.VolumeMode,
			StorageClassName: ptr.To(class.HostName),
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: claim.Spec.Resources.Requests[corev1.ResourceStorage]}},
		},
	}
}

// Delete deletes the host claim behind a tenant volume the tenant's claim
// released. The host claim is found from the volume's claim reference, not
// from anything else the volume says, and deleted only if it is the copy
// of that claim, with its UID: a volume a tenant writes cannot name
// another host claim. A failure is an event on the tenant volume
// (VolumeFailedDelete), in the tenant's words; an IgnoredError, which the
// library only logs, is returned as it is.
func (p *Provisioner) Delete(ctx context.Context, pv *corev1.PersistentVolume) error {
	err := p.delete(ctx, pv)
	var ignored *controller.IgnoredError
	if err == nil || errors.As(err, &ignored) {
		return err
	}
	namespace := ""
	if ref := pv.Spec.ClaimRef; ref != nil {
		namespace = ref.Namespace
	}
	klog.FromContext(ctx).Info("Deleting the host claim of a tenant volume failed", "volume", pv.Name, "err", err)
	return tenantmsg.Scope{VirtualCluster: p.VirtualCluster, HostNamespace: p.HostNamespace}.In(namespace).Tell(tenantmsg.Wrap(err, "the volume's storage on the host could not be deleted"))
}

// delete is Delete with the error in the host's words.
func (p *Provisioner) delete(ctx context.Context, pv *corev1.PersistentVolume) error {
	ref := pv.Spec.ClaimRef
	if ref == nil {
		return nil
	}
	name := contract.HostName(p.VirtualCluster, ref.Namespace, ref.Name)
	claims := p.Host.CoreV1().PersistentVolumeClaims(p.HostNamespace)
	host, err := claims.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if !contract.IsCopyOfUID(host, p.VirtualCluster, ref.Namespace, ref.Name, string(ref.UID)) {
		return &controller.IgnoredError{Reason: fmt.Sprintf("host claim %s is not the copy of %s/%s", name, ref.Namespace, ref.Name)}
	}
	err = claims.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &host.UID}})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

func (p *Provisioner) class(name string) (contract.StorageClass, bool) {
	i := slices.IndexFunc(p.Classes, func(c contract.StorageClass) bool { return c.Name == name })
	if i < 0 {
		return contract.StorageClass{}, false
	}
	return p.Classes[i], true
}

func (p *Provisioner) classNames() []string {
	var out []string
	for _, c := range p.Classes {
		out = append(out, c.Name)
	}
	if len(out) == 0 {
		return []string{"none: the VirtualCluster offers no StorageClass"}
	}
	return out
}

// TenantStorageClasses are the tenant objects that show the classes: a
// StorageClass per class with ProvisionerName, and the CSIDriver of the
// volumes, which needs no attachment.
func TenantStorageClasses(classes []contract.StorageClass) ([]*storagev1.StorageClass, *storagev1.CSIDriver) {
	labels := map[string]string{LabelMirror: "true"}
	var out []*storagev1.StorageClass
	for _, c := range classes {
		sc := &storagev1.StorageClass{
			ObjectMeta:           metav1.ObjectMeta{Name: c.Name, Labels: labels},
			Provisioner:          ProvisionerName,
			ReclaimPolicy:        ptr.To(c.ReclaimPolicy),
			VolumeBindingMode:    ptr.To(c.VolumeBindingMode),
			AllowVolumeExpansion: ptr.To(c.AllowVolumeExpansion),
		}
		if c.Default {
			sc.Annotations = map[string]string{"storageclass.kubernetes.io/is-default-class": "true"}
		}
		out = append(out, sc)
	}
	driver := &storagev1.CSIDriver{
		ObjectMeta: metav1.ObjectMeta{Name: DriverName, Labels: labels},
		Spec:       storagev1.CSIDriverSpec{AttachRequired: ptr.To(false), PodInfoOnMount: ptr.To(false)},
	}
	return out, driver
}
