// Package nodeassignment is the controller that assigns GlobalNodes to
// VirtualClusters: it resolves a VirtualCluster's spec.promotePolicies
// (labelSelector, nodeCount) and spec.promoteResources.nodeInfos against the
// GlobalNode inventory, claims the nodes they ask for, releases those they no
// longer ask for, and reports them in status.assignedNodes and the
// NodesAssigned condition.
//
// A claim is one write of the GlobalNode, conditional on the resourceVersion
// read, that sets state reserved and the nest.dev/held-by annotation
// ("namespace/name"); status.virtualCluster follows. So two VirtualClusters
// never hold one node. A pass claims all the nodes its requests need or
// none. Node promotion then moves a held node (package nodepromotion); a
// release of a node it has moved only withdraws the claim, and node
// promotion frees the node once it is home. A finalizer of its own keeps a
// VirtualCluster until its nodes are released and home.
package nodeassignment

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/controlplane"
	"github.com/nestdev/nest/internal/kube"
)

// Finalizer holds a VirtualCluster that holds GlobalNodes until they are
// released. A VirtualCluster that holds none does not carry it.
const Finalizer = "nest.dev/node-assignment"

// FieldOwner is the server-side apply field manager of the VirtualCluster
// status fields this controller writes: status.assignedNodes and the
// NodesAssigned condition. Applying only those, it never writes over the
// VirtualCluster controller's conditions, whatever its cache holds.
const FieldOwner = "nest-node-assignment"

// replanAfter is how soon a pass that lost a GlobalNode to a concurrent
// write runs again, once its cache has seen the write.
const replanAfter = 500 * time.Millisecond

// Reconciler assigns GlobalNodes to one VirtualCluster.
type Reconciler struct {
	client.Client
	// APIReader reads from the API server, not the cache: a GlobalNode again
	// after a conflict, and a VirtualCluster the cache does not have.
	APIReader client.Reader
	// Workers is how many VirtualClusters are reconciled at once.
	Workers int
}

// +kubebuilder:rbac:groups=nest.dev,resources=virtualclusters,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=nest.dev,resources=virtualclusters/status,verbs=get;patch
// +kubebuilder:rbac:groups=nest.dev,resources=virtualclusters/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get
// +kubebuilder:rbac:groups=nest.dev,resources=globalnodes,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=nest.dev,resources=globalnodes/status,verbs=get;patch

// Reconcile brings the GlobalNodes a VirtualCluster holds in step with what
// its spec asks for, and reports them in its status.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	vc := &nestv1.VirtualCluster{}
	if err := r.Get(ctx, req.NamespacedName, vc); err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, fmt.Errorf("get VirtualCluster %s: %w", req.NamespacedName, err)
		}
		return ctrl.Result{}, r.releaseOrphans(ctx, req.NamespacedName)
	}
	nodes, err := r.globalNodes(ctx)
	if err != nil {
		return ctrl.Result{}, err
	}
	if !vc.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, r.reconcileDelete(ctx, vc, nodes)
	}
	nsHolder, err := controlplane.NamespaceHolderOf(ctx, r.APIReader, vc.Namespace)
	if err != nil {
		return ctrl.Result{}, err
	}
	holder := holderKey(req.NamespacedName)
	p := assess(vc, nsHolder, nodes)
	if len(p.keep) > 0 || len(p.claim) > 0 {
		if err := r.addFinalizer(ctx, vc); err != nil {
			return ctrl.Result{}, err
		}
	}
	byName := nodesByName(nodes)
	if err := r.releaseAll(ctx, byName, append(p.release, staleMarks(nodes, holder)...), holder); err != nil {
		return ctrl.Result{}, err
	}
	var assigned []string
	for _, n := range p.keep {
		if _, err := r.recordHolder(ctx, byName[n], holder); err != nil {
			return ctrl.Result{}, err
		}
		assigned = append(assigned, n)
	}
	if err := r.claimAll(ctx, byName, p.claim, holder); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			ctrl.LoggerFrom(ctx).V(1).Info("A GlobalNode changed while claiming: planning again", "virtualCluster", klog.KObj(vc), "error", err.Error())
			return ctrl.Result{RequeueAfter: replanAfter}, nil
		}
		return ctrl.Result{}, err
	}
	assigned = append(assigned, p.claim...)
	slices.Sort(assigned)
	if err := r.patchStatus(ctx, vc, assigned, condition(p, len(assigned), vc.Generation)); err != nil {
		return ctrl.Result{}, err
	}
	if len(assigned) == 0 && len(returning(nodes, holder)) == 0 {
		return ctrl.Result{}, r.removeFinalizer(ctx, vc)
	}
	return ctrl.Result{}, nil
}

// returning are the moved GlobalNodes whose status still names holder:
// node promotion is bringing them home and frees them at the end. A
// GlobalNode event wakes the holder when that happens.
func returning(nodes []nestv1.GlobalNode, holder string) []string {
	var out []string
	for i := range nodes {
		if nodes[i].Status.VirtualCluster == holder && nodes[i].Moved() {
			out = append(out, nodes[i].Name)
		}
	}
	return out
}

// reconcileDelete releases every GlobalNode a deleted VirtualCluster holds,
// then removes the finalizer. Deletion of its host objects is the
// VirtualCluster controller's, under its own finalizer.
func (r *Reconciler) reconcileDelete(ctx context.Context, vc *nestv1.VirtualCluster, nodes []nestv1.GlobalNode) error {
	holder := holderKey(client.ObjectKeyFromObject(vc))
	marked := append(heldNodes(nodes, holder), staleMarks(nodes, holder)...)
	if len(marked) == 0 && !controllerutil.ContainsFinalizer(vc, Finalizer) {
		return nil
	}
	if err := r.releaseAll(ctx, nodesByName(nodes), marked, holder); err != nil {
		return err
	}
	if len(marked) > 0 || len(vc.Status.AssignedNodes) > 0 {
		c := metav1.Condition{Type: nestv1.ConditionNodesAssigned, Status: metav1.ConditionFalse, Reason: ReasonDeleting,
			Message: "the VirtualCluster is being deleted: its nodes are released", ObservedGeneration: vc.Generation}
		if err := r.patchStatus(ctx, vc, nil, c); err != nil {
			return err
		}
	}
	if back := returning(nodes, holder); len(back) > 0 {
		ctrl.LoggerFrom(ctx).Info("Waiting for node promotion to bring nodes home", "virtualCluster", klog.KObj(vc), "globalNodes", back)
		return nil
	}
	return r.removeFinalizer(ctx, vc)
}

// releaseOrphans releases the GlobalNodes still marked as held by a
// VirtualCluster that no longer exists, such as one whose finalizer was
// removed by hand.
func (r *Reconciler) releaseOrphans(ctx context.Context, key types.NamespacedName) error {
	nodes, err := r.globalNodes(ctx)
	if err != nil {
		return err
	}
	holder := holderKey(key)
	marked := append(heldNodes(nodes, holder), staleMarks(nodes, holder)...)
	if len(marked) == 0 {
		return nil
	}
	// The cache may not have seen a VirtualCluster created a moment ago.
	if err := r.APIReader.Get(ctx, key, &nestv1.VirtualCluster{}); !apierrors.IsNotFound(err) {
		if err != nil {
			return fmt.Errorf("get VirtualCluster %s: %w", key, err)
		}
		return nil
	}
	ctrl.LoggerFrom(ctx).Info("Releasing GlobalNodes of a VirtualCluster that is gone", "virtualCluster", key, "globalNodes", marked)
	return r.releaseAll(ctx, nodesByName(nodes), marked, holder)
}

// claimAll claims the named GlobalNodes for holder, in order: all of them, or
// none. When one claim fails, those this pass took are released again and the
// error returned; a conflict means another writer took or changed a node.
func (r *Reconciler) claimAll(ctx context.Context, byName map[string]*nestv1.GlobalNode, names []string, holder string) error {
	var claimed []*nestv1.GlobalNode
	for _, n := range names {
		gn, err := r.claim(ctx, byName[n], holder)
		if gn != nil {
			claimed = append(claimed, gn)
		}
		if err == nil {
			continue
		}
		errs := []error{err}
		for _, c := range claimed {
			if rerr := r.release(ctx, c, holder); rerr != nil {
				errs = append(errs, fmt.Errorf("undo the claim: %w", rerr))
			}
		}
		return errors.Join(errs...)
	}
	return nil
}

// releaseAll releases the named GlobalNodes holder holds.
func (r *Reconciler) releaseAll(ctx context.Context, byName map[string]*nestv1.GlobalNode, names []string, holder string) error {
	for _, n := range names {
		if err := r.release(ctx, byName[n], holder); err != nil {
			return err
		}
	}
	return nil
}

// globalNodes lists every GlobalNode from the cache.
func (r *Reconciler) globalNodes(ctx context.Context) ([]nestv1.GlobalNode, error) {
	var list nestv1.GlobalNodeList
	if err := r.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("list GlobalNodes: %w", err)
	}
	return list.Items, nil
}

// nodesByName indexes nodes by name.
func nodesByName(nodes []nestv1.GlobalNode) map[string]*nestv1.GlobalNode {
	out := make(map[string]*nestv1.GlobalNode, len(nodes))
	for i := range nodes {
		out[nodes[i].Name] = &nodes[i]
	}
	return out
}

// heldNodes are the names of the GlobalNodes holder holds, sorted.
func heldNodes(nodes []nestv1.GlobalNode, holder string) []string {
	var out []string
	for i := range nodes {
		if heldBy(&nodes[i]) == holder {
			out = append(out, nodes[i].Name)
		}
	}
	slices.Sort(out)
	return out
}

// staleMarks are the GlobalNodes whose status names holder while no
// annotation does: a release cut short, or a hand edit. Releasing them
// clears the status, so the node can be picked again.
func staleMarks(nodes []nestv1.GlobalNode, holder string) []string {
	var out []string
	for i := range nodes {
		if heldBy(&nodes[i]) == "" && nodes[i].Status.VirtualCluster == holder {
			out = append(out, nodes[i].Name)
		}
	}
	slices.Sort(out)
	return out
}

// addFinalizer adds the finalizer with a patch that fails on a concurrent
// change of the finalizer list.
func (r *Reconciler) addFinalizer(ctx context.Context, vc *nestv1.VirtualCluster) error {
	before := vc.DeepCopy()
	if !controllerutil.AddFinalizer(vc, Finalizer) {
		return nil
	}
	if err := r.Patch(ctx, vc, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("add finalizer %s to %s: %w", Finalizer, klog.KObj(vc), err)
	}
	return nil
}

// removeFinalizer removes the finalizer, with a patch that fails on a
// concurrent change of the finalizer list, such as the VirtualCluster
// controller removing its own.
func (r *Reconciler) removeFinalizer(ctx context.Context, vc *nestv1.VirtualCluster) error {
	before := vc.DeepCopy()
	if !controllerutil.RemoveFinalizer(vc, Finalizer) {
		return nil
	}
	err := r.Patch(ctx, vc, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("remove finalizer %s from %s: %w", Finalizer, klog.KObj(vc), err)
	}
	return nil
}

// patchStatus applies status.assignedNodes and the NodesAssigned condition c
// with server-side apply, as FieldOwner. The VirtualCluster controller
// writes the rest of the status with merge patches; neither writes the
// other's fields. Nothing is written when both are as the cache shows them.
func (r *Reconciler) patchStatus(ctx context.Context, vc *nestv1.VirtualCluster, assigned []string, c metav1.Condition) error {
	if kube.StampCondition(vc.Status.Conditions, &c, time.Now()) && slices.Equal(vc.Status.AssignedNodes, assigned) {
		return nil
	}
	status := map[string]any{"conditions": []metav1.Condition{c}}
	if len(assigned) > 0 {
		status["assignedNodes"] = assigned
	}
	if err := kube.ApplyStatus(ctx, r.Client, vc, FieldOwner, status); err != nil {
		return fmt.Errorf("status.assignedNodes and the NodesAssigned condition: %w", err)
	}
	old := meta.FindStatusCondition(vc.Status.Conditions, c.Type)
	if old == nil || old.Status != c.Status || old.Reason != c.Reason || !slices.Equal(vc.Status.AssignedNodes, assigned) {
		ctrl.LoggerFrom(ctx).Info("Node assignment changed", "virtualCluster", klog.KObj(vc), "assignedNodes", assigned,
			"nodesAssigned", c.Status, "reason", c.Reason)
	}
	return nil
}

// waiting is true when vc asks for nodes and does not hold them all: a
// GlobalNode that becomes free may be one it can take.
func waiting(vc *nestv1.VirtualCluster) bool {
	asks := len(vc.Spec.PromotePolicies) > 0 || len(vc.Spec.PromoteResources.NodeInfos) > 0
	return asks && vc.DeletionTimestamp.IsZero() && !meta.IsStatusConditionTrue(vc.Status.Conditions, nestv1.ConditionNodesAssigned)
}

// virtualClustersFor maps a GlobalNode event to the VirtualClusters it
// concerns: its holder, and when it is free, every VirtualCluster waiting for
// nodes. Updates map both the old and the new object, so a holder whose
// mark was removed hears of it too.
func (r *Reconciler) virtualClustersFor(ctx context.Context, obj client.Object) []reconcile.Request {
	gn, ok := obj.(*nestv1.GlobalNode)
	if !ok {
		return nil
	}
	keys := map[types.NamespacedName]bool{}
	for _, h := range []string{heldBy(gn), gn.Status.VirtualCluster} {
		if key, ok := parseHolder(h); ok {
			keys[key] = true
		}
	}
	if unavailable(gn) == "" {
		var list nestv1.VirtualClusterList
		if err := r.List(ctx, &list); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "List VirtualClusters waiting for nodes", "globalNode", klog.KObj(gn))
		}
		for i := range list.Items {
			if waiting(&list.Items[i]) {
				keys[client.ObjectKeyFromObject(&list.Items[i])] = true
			}
		}
	}
	out := make([]reconcile.Request, 0, len(keys))
	for k := range keys {
		out = append(out, reconcile.Request{NamespacedName: k})
	}
	slices.SortFunc(out, func(a, b reconcile.Request) int { return compareKeys(a.NamespacedName, b.NamespacedName) })
	return out
}

func compareKeys(a, b types.NamespacedName) int {
	return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
}

// SetupWithManager registers the controller. It watches VirtualClusters, and
// GlobalNodes for their holders and for nodes that become free.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&nestv1.VirtualCluster{}).
		Watches(&nestv1.GlobalNode{}, handler.EnqueueRequestsFromMapFunc(r.virtualClustersFor)).
		WithOptions(controller.Options{MaxConcurrentReconciles: max(r.Workers, 1)}).
		Named("nodeassignment").
		Complete(r)
}
