package persistentvolumeclaim

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/nestdev/nest/internal/kindsync"
	"github.com/nestdev/nest/internal/syncer/contract"
	"github.com/nestdev/nest/internal/syncer/tenantmsg"
)

// ReasonResizeFailed is the Warning event of a tenant claim whose larger
// request the host refused (its quota, or a class that cannot expand), as
// external-resizer's VolumeResizeFailed.
const ReasonResizeFailed = "VolumeResizeFailed"

// Volumes keeps a bound tenant claim and its tenant volume in step with
// the host claim behind them, doing for the tenant what external-resizer
// and the kubelet do on a real node:
//   - a changed request of the tenant claim becomes the host claim's
//     request, so the host class's resizer grows the host volume;
//   - the host claim's capacity, conditions (Resizing,
//     FileSystemResizePending) and allocated resources become the tenant
//     claim's status, and its capacity the tenant volume's.
//
// The host volume's capacity, not the tenant's request, is what the tenant
// sees once the host claim is bound. Its keys are tenant claims'
// "namespace/name".
type Volumes struct {
	VirtualCluster, HostNamespace string
	Tenant, Host                  kubernetes.Interface
	Recorder                      record.EventRecorder
	TenantClaims                  corelisters.PersistentVolumeClaimLister
	TenantVolumes                 corelisters.PersistentVolumeLister
	// HostClaims lists the host claims of this VirtualCluster, in its host
	// namespace.
	HostClaims corelisters.PersistentVolumeClaimNamespaceLister
}

// Sync brings the tenant claim key, its host claim and its tenant volume in
// step. A claim not bound to a volume of DriverName, or whose host claim is
// not the copy of this claim (same UID), is left alone.
func (v *Volumes) Sync(ctx context.Context, key string) (time.Duration, error) {
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return 0, kindsync.Terminal(err)
	}
	claim, err := v.TenantClaims.PersistentVolumeClaims(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	pv, ok := v.volumeOf(claim)
	if !ok {
		return 0, nil
	}
	host, ok, err := contract.GetCopy(v.HostClaims.Get, v.VirtualCluster, namespace, name, string(claim.UID))
	if err != nil || !ok {
		return 0, err
	}
	// The host's state is shown even while a resize is refused: an earlier
	// resize may finish, or fail, meanwhile.
	resizeErr := v.resize(ctx, claim, host)
	if err := v.mirror(ctx, claim, pv, host); err != nil {
		return 0, errors.Join(resizeErr, err)
	}
	return 0, resizeErr
}

// volumeOf is the tenant volume claim is bound to, if it is one the
// virtual node provisioned for this very claim.
func (v *Volumes) volumeOf(claim *corev1.PersistentVolumeClaim) (*corev1.PersistentVolume, bool) {
	if claim.Spec.VolumeName == "" || claim.Status.Phase != corev1.ClaimBound {
		return nil, false
	}
	pv, err := v.TenantVolumes.Get(claim.Spec.VolumeName)
	if err != nil || pv.Spec.CSI == nil || pv.Spec.CSI.Driver != DriverName {
		return nil, false
	}
	ref := pv.Spec.ClaimRef
	if ref == nil || ref.UID != claim.UID || ref.Namespace != claim.Namespace || ref.Name != claim.Name {
		return nil, false
	}
	return pv, true
}

// resize gives the host claim the tenant claim's request. The host's API
// server and quota decide: a refusal is a Warning event on the tenant claim
// and is retried with backoff, as the quota may free up; one the host
// finds invalid (such as a shrink below its capacity) is not retried.
func (v *Volumes) resize(ctx context.Context, claim, host *corev1.PersistentVolumeClaim) error {
	want, ok := claim.Spec.Resources.Requests[corev1.ResourceStorage]
	if !ok || want.Cmp(host.Spec.Resources.Requests[corev1.ResourceStorage]) == 0 {
		return nil
	}
	upd := host.DeepCopy()
	upd.Spec.Resources.Requests[corev1.ResourceStorage] = want
	_, err := v.Host.CoreV1().PersistentVolumeClaims(v.HostNamespace).Update(ctx, upd, metav1.UpdateOptions{})
	if err == nil {
		return nil
	}
	if apierrors.IsForbidden(err) {
		// The host's quota says how much its other claims (etcd's, node
		// disks) hold: the tenant is told the bound, not the host's figures.
		v.Recorder.Eventf(claim, corev1.EventTypeWarning, ReasonResizeFailed, "The host refused to resize the volume to %s: the VirtualCluster's storage quota (spec.virtualNode.storage.requests, all claims together) has no room for it", want.String())
	} else {
		v.Recorder.Eventf(claim, corev1.EventTypeWarning, ReasonResizeFailed, "The host refused to resize the volume to %s: %s", want.String(), claimScope(v.VirtualCluster, v.HostNamespace, claim, host).Error(err))
	}
	err = fmt.Errorf("resize host claim %s to %s: %w", host.Name, want.String(), err)
	if apierrors.IsInvalid(err) {
		return kindsync.Terminal(err)
	}
	return err
}

// mirror shows the host claim's capacity and resize state on the tenant
// claim and volume. Nothing is shown before the host claim is bound.
func (v *Volumes) mirror(ctx context.Context, claim *corev1.PersistentVolumeClaim, pv *corev1.PersistentVolume, host *corev1.PersistentVolumeClaim) error {
	capacity, ok := host.Status.Capacity[corev1.ResourceStorage]
	if !ok || host.Status.Phase != corev1.ClaimBound {
		return nil
	}
	if have := pv.Spec.Capacity[corev1.ResourceStorage]; have.Cmp(capacity) != 0 {
		upd := pv.DeepCopy()
		upd.Spec.Capacity = corev1.ResourceList{corev1.ResourceStorage: capacity}
		if _, err := v.Tenant.CoreV1().PersistentVolumes().Update(ctx, upd, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("set the capacity of volume %s to %s: %w", pv.Name, capacity.String(), err)
		}
	}
	want := tenantClaimStatus(claim.Status, host.Status, capacity, claimScope(v.VirtualCluster, v.HostNamespace, claim, host))
	if apiequality.Semantic.DeepEqual(claim.Status, want) {
		return nil
	}
	upd := claim.DeepCopy()
	upd.Status = want
	if _, err := v.Tenant.CoreV1().PersistentVolumeClaims(claim.Namespace).UpdateStatus(ctx, upd, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("show the host volume's capacity %s on claim %s/%s: %w", capacity.String(), claim.Namespace, claim.Name, err)
	}
	return nil
}

// tenantClaimStatus is the tenant claim's status with the host claim's
// capacity, resize conditions and allocated resources. Phase and access
// modes stay the tenant's own binder's. The conditions' messages are the
// host resizer's and kubelet's, which name the host claim and volume: the
// tenant reads them as scope has them.
func tenantClaimStatus(tenant, host corev1.PersistentVolumeClaimStatus, capacity resource.Quantity, scope tenantmsg.Scope) corev1.PersistentVolumeClaimStatus {
	out := *tenant.DeepCopy()
	out.Capacity = corev1.ResourceList{corev1.ResourceStorage: capacity}
	out.Conditions = nil
	for _, c := range tenant.Conditions {
		if !isResizeCondition(c.Type) {
			out.Conditions = append(out.Conditions, c)
		}
	}
	for _, c := range host.Conditions {
		if isResizeCondition(c.Type) {
			c.Message = scope.Scrub(c.Message)
			out.Conditions = append(out.Conditions, c)
		}
	}
	out.AllocatedResources, out.AllocatedResourceStatuses = nil, nil
	if q, ok := host.AllocatedResources[corev1.ResourceStorage]; ok {
		out.AllocatedResources = corev1.ResourceList{corev1.ResourceStorage: q}
	}
	if s, ok := host.AllocatedResourceStatuses[corev1.ResourceStorage]; ok {
		out.AllocatedResourceStatuses = map[corev1.ResourceName]corev1.ClaimResourceStatus{corev1.ResourceStorage: s}
	}
	return out
}

// claimScope is what the tenant may read of host, the host claim of the
// tenant claim (tenantmsg): the host claim, its UID and its volume read as
// the tenant's claim, UID and volume.
func claimScope(vc, hostNamespace string, claim, host *corev1.PersistentVolumeClaim) tenantmsg.Scope {
	s := tenantmsg.Scope{VirtualCluster: vc, HostNamespace: hostNamespace}.In(claim.Namespace).
		WithName(host.Name, claim.Name).
		WithName(host.Spec.VolumeName, claim.Spec.VolumeName)
	if host.UID != "" && claim.UID != "" {
		s = s.WithName(string(host.UID), string(claim.UID))
	}
	return s
}

// isResizeCondition reports whether a claim condition is one a resizer or
// the kubelet sets while a volume grows: the host's, shown to the tenant.
func isResizeCondition(t corev1.PersistentVolumeClaimConditionType) bool {
	switch t {
	case corev1.PersistentVolumeClaimResizing, corev1.PersistentVolumeClaimFileSystemResizePending,
		corev1.PersistentVolumeClaimControllerResizeError, corev1.PersistentVolumeClaimNodeResizeError:
		return true
	}
	return false
}

// Keys are every tenant claim, for the periodic resync.
func (v *Volumes) Keys() []string {
	claims, _ := v.TenantClaims.List(labels.Everything())
	keys := make([]string, 0, len(claims))
	for _, c := range claims {
		keys = append(keys, c.Namespace+"/"+c.Name)
	}
	return keys
}
