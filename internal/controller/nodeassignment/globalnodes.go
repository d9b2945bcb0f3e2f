package nodeassignment

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
)

// claim reserves gn for holder in one write conditional on the
// resourceVersion read: state reserved and the nest.dev/held-by annotation.
// Of two VirtualClusters that read the node free, one write succeeds and the
// other gets a conflict, and replans. The holder is then recorded in the
// status. A non-nil GlobalNode is returned once the node is claimed, even when
// recording the holder failed: it is held, and must be released if the pass
// is abandoned.
func (r *Reconciler) claim(ctx context.Context, gn *nestv1.GlobalNode, holder string) (*nestv1.GlobalNode, error) {
	before := gn.DeepCopy()
	gn = gn.DeepCopy()
	metav1.SetMetaDataAnnotation(&gn.ObjectMeta, nestv1.AnnotationHeldBy, holder)
	gn.Spec.State = nestv1.NodeStateReserved
	if err := r.Patch(ctx, gn, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return nil, fmt.Errorf("claim GlobalNode %s for VirtualCluster %s: %w", gn.Name, holder, err)
	}
	ctrl.LoggerFrom(ctx).Info("Claimed GlobalNode", "globalNode", klog.KObj(gn), "virtualCluster", holder)
	return r.recordHolder(ctx, gn, holder)
}

// recordHolder brings a GlobalNode holder holds in step with its annotation:
// state reserved when it was free, status.virtualCluster the holder, and
// phase Host when its status was never written. An occupied node, and any
// phase already set, are left as they are.
func (r *Reconciler) recordHolder(ctx context.Context, gn *nestv1.GlobalNode, holder string) (*nestv1.GlobalNode, error) {
	mine := func(gn *nestv1.GlobalNode) bool { return heldBy(gn) == holder }
	gn, err := r.write(ctx, gn, false, mine, func(gn *nestv1.GlobalNode) {
		if gn.Spec.State == nestv1.NodeStateFree {
			gn.Spec.State = nestv1.NodeStateReserved
		}
	})
	if err != nil {
		return gn, fmt.Errorf("reserve GlobalNode %s for VirtualCluster %s: %w", gn.Name, holder, err)
	}
	gn, err = r.write(ctx, gn, true, mine, func(gn *nestv1.GlobalNode) {
		gn.Status.VirtualCluster = holder
		if gn.Status.Phase == "" {
			now := metav1.Now()
			gn.Status.Phase, gn.Status.PhaseTransitionTime = nestv1.NodePhaseHost, &now
		}
	})
	if err != nil {
		return gn, fmt.Errorf("record VirtualCluster %s as the holder of GlobalNode %s: %w", holder, gn.Name, err)
	}
	return gn, nil
}

// release hands gn back to the host: status.virtualCluster cleared first,
// then state free and the annotation removed. While the annotation stays the
// node is still holder's, so a release cut short between the two writes is
// finished by the next reconcile; the other order would leave a free node
// naming a holder, which no controller would pick. The phase is left alone:
// nothing moved the node, so it is still Host. A GlobalNode another
// VirtualCluster holds is never written.
//
// A node that promotion has begun to move (GlobalNode.Moved) is not handed
// back here: only its annotation is removed, which asks node promotion to
// bring it home. Its status.virtualCluster still names holder until node
// promotion frees it, so the holder's finalizer stays until then.
func (r *Reconciler) release(ctx context.Context, gn *nestv1.GlobalNode, holder string) error {
	if gn.Moved() {
		return r.withdraw(ctx, gn, holder)
	}
	// A node promotion moved meanwhile (seen on a re-read after a
	// conflict) is withdrawn instead.
	gn, err := r.write(ctx, gn, true, func(gn *nestv1.GlobalNode) bool {
		h := heldBy(gn)
		return (h == holder || h == "") && gn.Status.VirtualCluster == holder && !gn.Moved()
	}, func(gn *nestv1.GlobalNode) { gn.Status.VirtualCluster = "" })
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("clear the holder of GlobalNode %s held by VirtualCluster %s: %w", gn.Name, holder, err)
	}
	if gn.Moved() {
		return r.withdraw(ctx, gn, holder)
	}
	wasHeld := heldBy(gn) == holder
	gn, err = r.write(ctx, gn, false, func(gn *nestv1.GlobalNode) bool { return heldBy(gn) == holder && !gn.Moved() }, func(gn *nestv1.GlobalNode) {
		delete(gn.Annotations, nestv1.AnnotationHeldBy)
		gn.Spec.State = nestv1.NodeStateFree
	})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("release GlobalNode %s held by VirtualCluster %s: %w", gn.Name, holder, err)
	}
	if gn.Moved() {
		return r.withdraw(ctx, gn, holder)
	}
	if wasHeld {
		ctrl.LoggerFrom(ctx).Info("Released GlobalNode", "globalNode", klog.KObj(gn), "virtualCluster", holder)
	}
	return nil
}

// withdraw removes holder's annotation from a moved node.
func (r *Reconciler) withdraw(ctx context.Context, gn *nestv1.GlobalNode, holder string) error {
	_, err := r.write(ctx, gn, false, func(gn *nestv1.GlobalNode) bool { return heldBy(gn) == holder }, func(gn *nestv1.GlobalNode) {
		delete(gn.Annotations, nestv1.AnnotationHeldBy)
	})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("ask node promotion to release GlobalNode %s held by VirtualCluster %s: %w", gn.Name, holder, err)
	}
	return nil
}

// write applies change to gn and writes it (its status when status is true)
// in a merge patch conditional on its resourceVersion. On a conflict it reads
// gn again from the API server and tries again, as long as mine says it may
// still change it. It returns gn as last written or read.
func (r *Reconciler) write(ctx context.Context, gn *nestv1.GlobalNode, status bool, mine func(*nestv1.GlobalNode) bool, change func(*nestv1.GlobalNode)) (*nestv1.GlobalNode, error) {
	cur := gn.DeepCopy()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if !mine(cur) {
			return nil
		}
		before := cur.DeepCopy()
		change(cur)
		if equality.Semantic.DeepEqual(before, cur) {
			return nil
		}
		patch := client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})
		var err error
		if status {
			err = r.Status().Patch(ctx, cur, patch)
		} else {
			err = r.Patch(ctx, cur, patch)
		}
		if err == nil {
			return nil
		}
		cur = before
		if apierrors.IsConflict(err) {
			fresh := &nestv1.GlobalNode{}
			if gerr := r.APIReader.Get(ctx, client.ObjectKeyFromObject(cur), fresh); gerr != nil {
				return gerr
			}
			cur = fresh
		}
		return err
	})
	return cur, err
}
