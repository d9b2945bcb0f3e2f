// Package nodepromotion is the controller that moves GlobalNodes between the
// host cluster and tenant clusters through their nest-agent.
//
// Node assignment decides which VirtualCluster holds a node (the
// nest.dev/held-by annotation, state reserved). This controller does the
// move and records each step as the GlobalNode's phase:
//
//		promote:  Host → Draining → Leaving → Joining → Tenant (state occupied)
//		release:  Tenant → Releasing → Returning → Host (state free)
//
//	  - Draining: the host Node is cordoned and its pods evicted through the
//	    Eviction API, which honours PodDisruptionBudgets. Pods that do not go
//	    within DrainTimeout leave the node Failed, still cordoned in the host.
//	  - Leaving: the agent stops the kubelet and kube-proxy and resets the
//	    node; the host Node is deleted.
//	  - Joining: the tenant gets the RBAC for TLS bootstrapping, an admission
//	    policy by which kubelets register only the nodes Nest assigned (this
//	    one listed first) and a short-lived bootstrap token; the agent joins
//	    the node with it and starts the kubelet. The kubelet's serving
//	    certificate request is approved only for the node's own name and
//	    address. The node is Tenant once it is Ready in the tenant.
//	  - Releasing (when node assignment removed the annotation): the tenant
//	    Node is cordoned, drained and deleted, and the node no longer listed
//	    as assigned; a tenant that is gone is skipped.
//	  - Returning: the agent resets the node and joins it to the host with a
//	    host bootstrap token; the new host Node gets the labels the GlobalNode
//	    kept. Once it is Ready the GlobalNode is free again.
//
// Each step is idempotent: a controller that restarts half way repeats the
// step it was in.
package nodepromotion

import (
	"cmp"
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/agent"
)

// ConditionMoving is the GlobalNode condition that says how its move goes:
// True while a step is under way or done, False with the reason when a step
// failed.
const ConditionMoving = "Moving"

// Defaults of the Reconciler's timeouts.
const (
	DefaultDrainTimeout = 5 * time.Minute
	DefaultJoinTimeout  = 5 * time.Minute
	// bootstrapTokenTTL is the life of a bootstrap token: long enough for
	// one join, and the token cleaner removes it after.
	bootstrapTokenTTL = 15 * time.Minute
)

// Agents reaches the nest-agent of a GlobalNode.
type Agents interface {
	For(ctx context.Context, gn *nestv1.GlobalNode) (Agent, error)
}

// Agent is what the controller asks of one node's agent (agent.Client).
type Agent interface {
	Status(ctx context.Context) (agent.Status, error)
	Stop(ctx context.Context) error
	Reset(ctx context.Context) error
	Join(ctx context.Context, req agent.JoinRequest) error
	Start(ctx context.Context) error
}

// Reconciler moves one GlobalNode.
type Reconciler struct {
	client.Client
	// HostClient is the host cluster's clientset, for evictions.
	HostClient kubernetes.Interface
	Agents     Agents
	// Tenants reaches tenant clusters.
	Tenants Tenants
	// Host says how a node joins the host cluster again.
	Host HostJoin
	// PullProxyDeny are the CIDRs (controlplane.PullProxyDeny) the pull
	// proxy of a node in a tenant refuses to dial: its agent serves the
	// proxy there, since the host's node network agent that serves it in
	// the host is gone with the host's pods. A join of the host asks for no
	// proxy, so the agent's stops and the host's takes its address again.
	// Nil asks for no proxy in the tenant either: the host runs no node
	// network agent, so its nodes' containerd names no pull proxy.
	PullProxyDeny []string
	// DrainTimeout and JoinTimeout bound the Draining and Joining phases;
	// zero means the defaults.
	DrainTimeout, JoinTimeout time.Duration
}

// HostJoin is what a node needs to join the host cluster: the API server's
// URL as nodes reach it and the CA that verifies it. Bootstrap tokens are
// made on the host as needed.
type HostJoin struct {
	Server    string
	CACertPEM []byte
}

// +kubebuilder:rbac:groups=nest.dev,resources=globalnodes,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=nest.dev,resources=globalnodes/status,verbs=get;patch
// +kubebuilder:rbac:groups=nest.dev,resources=virtualclusters,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch;patch;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=pods/eviction,verbs=create
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=list
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;create;deletecollection
// +kubebuilder:rbac:groups=certificates.k8s.io,resources=certificatesigningrequests,verbs=get;list;watch
// +kubebuilder:rbac:groups=certificates.k8s.io,resources=certificatesigningrequests/approval,verbs=update
// +kubebuilder:rbac:groups=certificates.k8s.io,resources=signers,verbs=approve,resourceNames=kubernetes.io/kube-apiserver-client-kubelet

// step is the outcome of one phase function: the phase to record (the same
// one while it waits), how soon to look again, and the condition to show.
type step struct {
	phase   nestv1.NodePhase
	requeue time.Duration
	reason  string
	message string
	failed  bool
}

// Reconcile takes one step of a GlobalNode's move.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, err error) {
	gn := &nestv1.GlobalNode{}
	if err := r.Get(ctx, req.NamespacedName, gn); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	fn := r.phaseFunc(gn)
	if fn == nil {
		return ctrl.Result{}, nil
	}
	before := gn.DeepCopy()
	s, err := fn(ctx, gn)
	if err != nil {
		s = step{phase: gn.Status.Phase, reason: "StepFailed", message: err.Error(), failed: true}
	}
	if perr := r.record(ctx, before, gn, s); perr != nil {
		return ctrl.Result{}, perr
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: s.requeue}, nil
}

type phaseFunc func(context.Context, *nestv1.GlobalNode) (step, error)

// phaseFunc picks the step for gn: a node its holder still wants moves
// toward the tenant, any other moved node toward the host.
func (r *Reconciler) phaseFunc(gn *nestv1.GlobalNode) phaseFunc {
	held := gn.Annotations[nestv1.AnnotationHeldBy] != ""
	if held && gn.Spec.State != nestv1.NodeStateFree {
		switch gn.Status.Phase {
		case nestv1.NodePhaseHost:
			return r.startMove
		case nestv1.NodePhaseDraining:
			return r.drainHost
		case nestv1.NodePhaseLeaving:
			return r.leaveHost
		case nestv1.NodePhaseJoining:
			return r.joinTenant
		case nestv1.NodePhaseTenant:
			return r.serveTenant
		}
		return nil // Failed, or on its way back: waits for a release.
	}
	if held || !gn.Moved() {
		return nil
	}
	switch gn.Status.Phase {
	case nestv1.NodePhaseDraining:
		return r.uncordonHost
	case nestv1.NodePhaseJoining, nestv1.NodePhaseTenant, nestv1.NodePhaseReleasing:
		return r.drainTenant
	case nestv1.NodePhaseFailed:
		return r.releaseFailed
	}
	return r.returnHome // Leaving, Returning
}

// record writes the phase, its transition time and the Moving condition of
// s, in a patch conditional on the version read. A step that finished the
// move also sets the spec's state (see finish).
func (r *Reconciler) record(ctx context.Context, before, gn *nestv1.GlobalNode, s step) error {
	if s.phase != gn.Status.Phase {
		now := metav1.Now()
		gn.Status.Phase, gn.Status.PhaseTransitionTime = s.phase, &now
		ctrl.LoggerFrom(ctx).Info("GlobalNode moved on", "globalNode", klog.KObj(gn), "from", before.Status.Phase, "to", s.phase, "virtualCluster", gn.Status.VirtualCluster)
	}
	c := metav1.Condition{Type: ConditionMoving, Status: metav1.ConditionTrue, Reason: s.reason, Message: s.message, ObservedGeneration: gn.Generation}
	if s.failed {
		c.Status = metav1.ConditionFalse
	}
	if c.Reason == "" {
		c.Reason = string(s.phase)
	}
	meta.SetStatusCondition(&gn.Status.Conditions, c)
	if equality.Semantic.DeepEqual(before.Status, gn.Status) {
		return nil
	}
	// A spec write of this pass (setState) moved the version on: the status
	// patch is conditional on that version, not the one read first.
	base := before.DeepCopy()
	base.ResourceVersion = gn.ResourceVersion
	err := r.Status().Patch(ctx, gn, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil // the watch brings the newer version
	}
	return err
}

// setState writes spec.state, conditional on the version read.
func (r *Reconciler) setState(ctx context.Context, gn *nestv1.GlobalNode, state nestv1.NodeState, virtualCluster *string) error {
	before := gn.DeepCopy()
	gn.Spec.State = state
	if err := r.Patch(ctx, gn, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("set GlobalNode %s state %s: %w", gn.Name, state, err)
	}
	if virtualCluster != nil {
		gn.Status.VirtualCluster = *virtualCluster
	}
	return nil
}

// hostNode returns the host Node of gn's name, or nil when there is none.
func (r *Reconciler) hostNode(ctx context.Context, name string) (*corev1.Node, error) {
	node := &corev1.Node{}
	err := r.Get(ctx, client.ObjectKey{Name: name}, node)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get host Node %s: %w", name, err)
	}
	return node, nil
}

// since is how long gn has been in its phase.
func since(gn *nestv1.GlobalNode) time.Duration {
	if gn.Status.PhaseTransitionTime == nil {
		return 0
	}
	return time.Since(gn.Status.PhaseTransitionTime.Time)
}

func (r *Reconciler) drainTimeout() time.Duration { return cmp.Or(r.DrainTimeout, DefaultDrainTimeout) }

func (r *Reconciler) joinTimeout() time.Duration { return cmp.Or(r.JoinTimeout, DefaultJoinTimeout) }

// SetupWithManager registers the controller. One node moves at a time per
// worker; an agent's Start may take minutes (TLS bootstrapping).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&nestv1.GlobalNode{}).
		Watches(&nestv1.VirtualCluster{}, handler.EnqueueRequestsFromMapFunc(r.heldBy), builder.WithPredicates(caRotationMoved)).
		WithOptions(controller.Options{MaxConcurrentReconciles: 2}).
		Named("nodepromotion").
		Complete(r)
}

// caRotationMoved passes a VirtualCluster update whose CA rotation moved
// (a phase rolled out, or began): its nodes rejoin then, not a minute later.
var caRotationMoved = predicate.Funcs{
	CreateFunc:  func(event.CreateEvent) bool { return false },
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		return !equality.Semantic.DeepEqual(caRotationOf(e.ObjectOld), caRotationOf(e.ObjectNew))
	},
}

func caRotationOf(obj client.Object) *nestv1.CARotation {
	if vc, ok := obj.(*nestv1.VirtualCluster); ok && vc.Status.Certificates != nil {
		return vc.Status.Certificates.CARotation
	}
	return nil
}

// heldBy are the GlobalNodes the VirtualCluster obj holds.
func (r *Reconciler) heldBy(ctx context.Context, obj client.Object) []reconcile.Request {
	var list nestv1.GlobalNodeList
	if err := r.List(ctx, &list); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "List GlobalNodes to wake those of a VirtualCluster", "virtualCluster", klog.KObj(obj))
		return nil
	}
	var out []reconcile.Request
	for i := range list.Items {
		if key, err := holder(&list.Items[i]); err == nil && key.Namespace == obj.GetNamespace() && key.Name == obj.GetName() {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
	}
	return out
}
