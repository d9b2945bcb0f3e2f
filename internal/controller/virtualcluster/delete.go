package virtualcluster

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/controlplane"
	"github.com/nestdev/nest/internal/syncer/contract"
)

// reconcileDelete removes the VirtualCluster's host objects — the StatefulSet
// first, then the tenant's pods and copies, then its etcd claim, Services,
// Secrets, NetworkPolicies and the rest (controlplane.HostObjects, by their
// DeletionStep) — and releases the finalizer once none is left. Tenant data
// (the etcd claim) is deleted only here.
func (r *Reconciler) reconcileDelete(ctx context.Context, vc *nestv1.VirtualCluster) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(vc, Finalizer) {
		return ctrl.Result{}, nil
	}
	if vc.Status.Phase != nestv1.PhaseDeleting {
		before := vc.DeepCopy()
		vc.Status.Phase = nestv1.PhaseDeleting
		if err := r.Status().Patch(ctx, vc, client.MergeFrom(before)); err != nil {
			return ctrl.Result{}, fmt.Errorf("mark %s deleting: %w", klog.KObj(vc), err)
		}
		r.Recorder.Eventf(vc, nil, corev1.EventTypeNormal, string(nestv1.PhaseDeleting), "Delete", "removing the host objects")
	}
	remaining, err := r.deleteHostObjects(ctx, vc)
	if err != nil {
		return ctrl.Result{}, err
	}
	if remaining > 0 {
		ctrl.LoggerFrom(ctx).Info("Waiting for host objects to go", "virtualCluster", klog.KObj(vc), "remaining", remaining)
		// A claim held by a pod, or a finalizer of another controller, can
		// keep an object for long: the owned objects' watches still wake
		// this at once when one goes.
		return ctrl.Result{RequeueAfter: waitedRequeue(vc.DeletionTimestamp.Time, time.Now())}, nil
	}
	if err := controlplane.ReleaseNamespace(ctx, r.APIReader, r.Client, vc); err != nil {
		return ctrl.Result{}, err
	}
	controllerutil.RemoveFinalizer(vc, Finalizer)
	if err := r.Update(ctx, vc); err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, fmt.Errorf("remove finalizer from %s: %w", klog.KObj(vc), err)
	}
	forgetCertificateExpiry(vc)
	return ctrl.Result{}, nil
}

// deleteHostObjects deletes what still exists of controlplane.HostObjects,
// step by step (controlplane.DeletionSteps), and returns how many objects
// were still there. The tenant's workloads go once the control plane has.
func (r *Reconciler) deleteHostObjects(ctx context.Context, vc *nestv1.VirtualCluster) (int, error) {
	n := controlplane.NamesOf(vc)
	for _, step := range controlplane.DeletionSteps {
		remaining := 0
		for _, obj := range hostObjectsDeletedIn(step, n) {
			err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(obj), obj)
			if apierrors.IsNotFound(err) {
				continue
			}
			if err != nil {
				return 0, err
			}
			remaining++
			if obj.GetDeletionTimestamp().IsZero() {
				if err := r.Delete(ctx, obj, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
					return 0, fmt.Errorf("delete %T %s: %w", obj, klog.KObj(obj), err)
				}
			}
		}
		if remaining > 0 {
			return remaining, nil
		}
		// Once the control-plane pod is gone, no syncer recreates tenant
		// workloads: delete the host pods, Services, ConfigMaps and Secrets it made.
		if remaining, err := r.deleteTenantWorkloads(ctx, vc); err != nil || remaining > 0 {
			return remaining, err
		}
	}
	return 0, nil
}

// hostObjectsDeletedIn returns keys of the VirtualCluster's host objects
// that go in step.
func hostObjectsDeletedIn(step controlplane.DeletionStep, n controlplane.Names) []client.Object {
	var out []client.Object
	for _, h := range controlplane.HostObjects {
		if h.Deletion == step {
			out = append(out, h.Objects(n)...)
		}
	}
	return out
}

// deleteTenantWorkloads deletes every host object nest-syncer made for vc,
// of each of contract.HostKinds, and returns how many were still there.
func (r *Reconciler) deleteTenantWorkloads(ctx context.Context, vc *nestv1.VirtualCluster) (int, error) {
	selector := client.MatchingLabels{contract.LabelTenantOf: vc.Name}
	remaining := 0
	for _, kind := range contract.HostKinds {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(kind.GroupVersion().WithKind(kind.Kind + "List"))
		if err := r.APIReader.List(ctx, list, client.InNamespace(vc.Namespace), selector); err != nil {
			return 0, err
		}
		if len(list.Items) == 0 {
			continue
		}
		remaining += len(list.Items)
		obj := &unstructured.Unstructured{}
		obj.SetGroupVersionKind(kind.GroupVersionKind)
		if err := r.DeleteAllOf(ctx, obj, client.InNamespace(vc.Namespace), selector); err != nil {
			return 0, fmt.Errorf("delete tenant %s objects of %s: %w", kind.Kind, klog.KObj(vc), err)
		}
	}
	return remaining, nil
}
