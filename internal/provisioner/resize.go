package provisioner

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/nestdev/nest/internal/kindsync"
)

// annotationProvisionedBy is set by sig-storage-lib-external-provisioner on
// every volume it made, to the provisioner's name.
const annotationProvisionedBy = "pv.kubernetes.io/provisioned-by"

// Resizer grows the volumes Local made when their claims ask for more, as
// external-resizer and the kubelet do together for a CSI driver: a
// directory has no size of its own, so growing it is recording the new
// size on the volume (spec.capacity) and the claim (status.capacity and
// allocatedResources). Its StorageClass must set allowVolumeExpansion, or
// the API server refuses the larger request first. Shrinking is left to
// the API server, which refuses it.
type Resizer struct {
	Client  kubernetes.Interface
	Claims  corelisters.PersistentVolumeClaimLister
	Volumes corelisters.PersistentVolumeLister
}

// Sync resizes the volume of the claim key ("namespace/name") if its
// request is larger than its capacity.
func (r *Resizer) Sync(ctx context.Context, key string) (time.Duration, error) {
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return 0, kindsync.Terminal(err)
	}
	claim, err := r.Claims.PersistentVolumeClaims(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		return 0, nil
	}
	if err != nil || claim.Status.Phase != corev1.ClaimBound {
		return 0, err
	}
	request := claim.Spec.Resources.Requests[corev1.ResourceStorage]
	if have := claim.Status.Capacity[corev1.ResourceStorage]; request.Cmp(have) <= 0 {
		return 0, nil
	}
	pv, err := r.Volumes.Get(claim.Spec.VolumeName)
	if err != nil {
		return 0, err
	}
	if pv.Annotations[annotationProvisionedBy] != Name || pv.Spec.ClaimRef == nil || pv.Spec.ClaimRef.UID != claim.UID {
		return 0, nil
	}
	if have := pv.Spec.Capacity[corev1.ResourceStorage]; have.Cmp(request) < 0 {
		upd := pv.DeepCopy()
		upd.Spec.Capacity = corev1.ResourceList{corev1.ResourceStorage: request}
		if _, err := r.Client.CoreV1().PersistentVolumes().Update(ctx, upd, metav1.UpdateOptions{}); err != nil {
			return 0, fmt.Errorf("grow volume %s to %s: %w", pv.Name, request.String(), err)
		}
	}
	upd := claim.DeepCopy()
	upd.Status.Capacity = corev1.ResourceList{corev1.ResourceStorage: request}
	upd.Status.AllocatedResources = corev1.ResourceList{corev1.ResourceStorage: request}
	upd.Status.AllocatedResourceStatuses = nil
	upd.Status.Conditions = nil
	for _, c := range claim.Status.Conditions {
		if c.Type != corev1.PersistentVolumeClaimResizing && c.Type != corev1.PersistentVolumeClaimFileSystemResizePending {
			upd.Status.Conditions = append(upd.Status.Conditions, c)
		}
	}
	if _, err := r.Client.CoreV1().PersistentVolumeClaims(namespace).UpdateStatus(ctx, upd, metav1.UpdateOptions{}); err != nil {
		return 0, fmt.Errorf("record the new size %s of claim %s: %w", request.String(), key, err)
	}
	return 0, nil
}

// runResizer runs a Resizer over informers of every claim and volume until
// ctx ends.
func runResizer(ctx context.Context, client kubernetes.Interface) {
	f := informers.NewSharedInformerFactory(client, 0)
	r := &Resizer{Client: client, Claims: f.Core().V1().PersistentVolumeClaims().Lister(), Volumes: f.Core().V1().PersistentVolumes().Lister()}
	q := kindsync.New("volumeresize", 1, r.Sync, func() []string {
		claims, _ := r.Claims.List(labels.Everything())
		keys := make([]string, 0, len(claims))
		for _, c := range claims {
			keys = append(keys, c.Namespace+"/"+c.Name)
		}
		return keys
	})
	add := func(obj any) {
		if c, ok := obj.(*corev1.PersistentVolumeClaim); ok {
			q.Add(c.Namespace + "/" + c.Name)
		}
	}
	_, _ = f.Core().V1().PersistentVolumeClaims().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: add, UpdateFunc: func(_, obj any) { add(obj) },
	})
	f.Start(ctx.Done())
	f.WaitForCacheSync(ctx.Done())
	q.Run(ctx)
}
