// Package globalnode is the controller that keeps the GlobalNode inventory in
// step with the host cluster's Nodes. Every Node that may be promoted (not a
// control-plane node, and with an InternalIP) gets a free GlobalNode of its
// name in phase Host, whose nodeIP and labels follow the Node's while it stays
// free and in the host. A free GlobalNode whose Node is gone, or may no longer
// be promoted, is deleted. A GlobalNode a VirtualCluster holds belongs to node
// promotion: this controller only notes in its HostNodePresent condition
// whether the host has its Node, and keeps it when the Node is gone (the node
// is away in the tenant cluster).
package globalnode

import (
	"context"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
)

// Reconciler reconciles the GlobalNode of one name with the host Node of
// that name. GlobalNodes have no owner reference to their Node: they must
// outlive it while the node is away in a tenant cluster.
type Reconciler struct {
	client.Client
}

// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups=nest.dev,resources=globalnodes,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=nest.dev,resources=globalnodes/status,verbs=get;update;patch

// Reconcile brings the GlobalNode named req.Name in step with the host Node
// of that name.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, err error) {
	s, err := r.observe(ctx, req.Name)
	if err != nil {
		return ctrl.Result{}, err
	}
	if s.gn != nil && !s.gn.DeletionTimestamp.IsZero() {
		// Its delete event brings it back here, to be made again.
		return ctrl.Result{}, nil
	}
	// The status is written after the phases, and only when they all
	// succeeded: a failed write observed nothing new, and is retried.
	defer func() {
		if err == nil {
			err = r.patchStatus(ctx, s)
		}
	}()
	for _, p := range []phase{r.ensureGlobalNode, r.removeStale, r.syncSpec} {
		done, perr := p(ctx, s)
		if perr != nil || !done {
			return ctrl.Result{}, perr
		}
	}
	return ctrl.Result{}, nil
}

// reconcileState carries one reconcile's objects between phases.
type reconcileState struct {
	// node is the host Node, nil when the host has none of that name.
	node *corev1.Node
	// gn is the GlobalNode, nil when there is none (or it was just deleted).
	gn *nestv1.GlobalNode
}

// phase is one step of a reconcile. done=false ends the reconcile early:
// there is nothing more to do.
type phase func(ctx context.Context, s *reconcileState) (done bool, err error)

// observe reads the Node and the GlobalNode of name.
func (r *Reconciler) observe(ctx context.Context, name string) (*reconcileState, error) {
	s := &reconcileState{}
	node := &corev1.Node{}
	switch err := r.Get(ctx, client.ObjectKey{Name: name}, node); {
	case err == nil:
		s.node = node
	case !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("get Node %s: %w", name, err)
	}
	gn := &nestv1.GlobalNode{}
	switch err := r.Get(ctx, client.ObjectKey{Name: name}, gn); {
	case err == nil:
		s.gn = gn
	case !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("get GlobalNode %s: %w", name, err)
	}
	return s, nil
}

// ensureGlobalNode creates the free GlobalNode of a Node that may be
// promoted and has none.
func (r *Reconciler) ensureGlobalNode(ctx context.Context, s *reconcileState) (bool, error) {
	if s.gn != nil {
		return true, nil
	}
	if s.node == nil {
		return false, nil
	}
	log := ctrl.LoggerFrom(ctx)
	if why := notPromotable(s.node); why != "" {
		log.V(1).Info("Node gets no GlobalNode", "node", klog.KObj(s.node), "reason", why)
		return false, nil
	}
	gn := &nestv1.GlobalNode{ObjectMeta: metav1.ObjectMeta{Name: s.node.Name}, Spec: specFor(s.node)}
	if err := r.Create(ctx, gn); apierrors.IsAlreadyExists(err) {
		// The cache has not seen it yet; its create event brings it here.
		return false, nil
	} else if err != nil {
		return false, fmt.Errorf("create GlobalNode %s: %w", gn.Name, err)
	}
	log.Info("Created GlobalNode", "globalNode", klog.KObj(gn), "nodeIP", gn.Spec.NodeIP)
	s.gn = gn
	return true, nil
}

// removeStale deletes a free GlobalNode in the host whose Node is gone or may
// no longer be promoted. The delete is conditional on the version read, so a
// GlobalNode node promotion reserved meanwhile is kept.
func (r *Reconciler) removeStale(ctx context.Context, s *reconcileState) (bool, error) {
	if !inHost(s.gn) {
		return true, nil
	}
	why := "its Node is gone"
	if s.node != nil {
		if why = notPromotable(s.node); why == "" {
			return true, nil
		}
	}
	gn := s.gn
	err := r.Delete(ctx, gn, client.Preconditions{UID: &gn.UID, ResourceVersion: &gn.ResourceVersion})
	if err != nil && !apierrors.IsNotFound(err) {
		return false, fmt.Errorf("delete GlobalNode %s: %w", gn.Name, err)
	}
	ctrl.LoggerFrom(ctx).Info("Deleted free GlobalNode", "globalNode", klog.KObj(gn), "reason", why)
	s.gn = nil
	return false, nil
}

// syncSpec sets the nodeIP and labels of a free GlobalNode in the host to its
// Node's. The patch fails on a concurrent change, such as node promotion
// reserving it, rather than writing over it.
func (r *Reconciler) syncSpec(ctx context.Context, s *reconcileState) (bool, error) {
	if !inHost(s.gn) || s.node == nil {
		return true, nil
	}
	want := specFor(s.node)
	gn := s.gn
	if gn.Spec.NodeIP == want.NodeIP && maps.Equal(gn.Spec.Labels, want.Labels) {
		return true, nil
	}
	before := gn.DeepCopy()
	gn.Spec.NodeIP, gn.Spec.Labels = want.NodeIP, want.Labels
	if err := r.Patch(ctx, gn, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return false, fmt.Errorf("update GlobalNode %s from its Node: %w", gn.Name, err)
	}
	ctrl.LoggerFrom(ctx).Info("Updated GlobalNode from its Node", "globalNode", klog.KObj(gn), "nodeIP", gn.Spec.NodeIP,
		"labelsChanged", !maps.Equal(before.Spec.Labels, gn.Spec.Labels))
	return true, nil
}

// patchStatus writes the status observed: HostNodePresent always; for a
// GlobalNode in the host also phase Host and the observed generation. The
// patch fails on a concurrent change, so it never writes over node
// promotion's status.
func (r *Reconciler) patchStatus(ctx context.Context, s *reconcileState) error {
	gn := s.gn
	if gn == nil {
		return nil
	}
	before := gn.DeepCopy()
	setStatus(gn, s.node != nil, metav1.Now())
	if equality.Semantic.DeepEqual(before.Status, gn.Status) {
		return nil
	}
	if err := r.Status().Patch(ctx, gn, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("patch status of GlobalNode %s: %w", gn.Name, err)
	}
	was, is := meta.FindStatusCondition(before.Status.Conditions, nestv1.ConditionHostNodePresent), meta.FindStatusCondition(gn.Status.Conditions, nestv1.ConditionHostNodePresent)
	if was == nil || was.Status != is.Status {
		ctrl.LoggerFrom(ctx).Info("Host Node presence changed", "globalNode", klog.KObj(gn), "present", is.Status,
			"state", gn.Spec.State, "virtualCluster", gn.Status.VirtualCluster, "phase", gn.Status.Phase)
	}
	return nil
}

// setStatus sets the status of gn given whether its host Node is present.
// A GlobalNode a VirtualCluster holds gets only its HostNodePresent
// condition set: the rest of its status is node promotion's.
func setStatus(gn *nestv1.GlobalNode, present bool, now metav1.Time) {
	c := hostNodeCondition(gn, present)
	c.LastTransitionTime = now
	meta.SetStatusCondition(&gn.Status.Conditions, c)
	if !inHost(gn) {
		return
	}
	if p := phaseFor(gn); p != gn.Status.Phase {
		gn.Status.Phase, gn.Status.PhaseTransitionTime = p, &now
	}
	gn.Status.ObservedGeneration = gn.Generation
}

// nodeChanged lets through every Node event but an update that changes
// neither the labels nor the InternalIP: kubelets rewrite their Node's
// status (conditions, heartbeats, images) far more often.
var nodeChanged = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	before, okBefore := e.ObjectOld.(*corev1.Node)
	after, okAfter := e.ObjectNew.(*corev1.Node)
	if !okBefore || !okAfter {
		return true
	}
	return !maps.Equal(before.Labels, after.Labels) || NodeIP(before) != NodeIP(after)
}}

// SetupWithManager registers the controller. GlobalNodes and Nodes share
// their names, so an event of either reconciles the one name.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&nestv1.GlobalNode{}).
		Watches(&corev1.Node{}, &handler.EnqueueRequestForObject{}, builder.WithPredicates(nodeChanged)).
		Named("globalnode").
		Complete(r)
}
