// Package virtualcluster is the controller that runs a VirtualCluster's tenant
// control plane in the host cluster: its PKI and kubeconfig Secrets, its Service
// and StatefulSet (etcd, kube-apiserver, controller-manager, scheduler,
// nest-syncer and CoreDNS), the host objects of its virtual node, the
// isolation of its host namespace (Pod Security labels, NetworkPolicies,
// LimitRange, ResourceQuotas), and its readiness. A host namespace holds one
// VirtualCluster: a later one is refused. A finalizer removes every host
// object, the etcd volume included, when the VirtualCluster is deleted.
package virtualcluster

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/controlplane"
)

// Finalizer holds a VirtualCluster until its host objects are gone.
const Finalizer = "nest.dev/virtualcluster"

// Requeue intervals: short while a control plane starts, long once it runs so a
// failed control plane is noticed. One that stays unready past slowAfter (a
// LoadBalancer that never gets an address, a crash-looping pod) is looked
// at every stuckRequeue: the watches on its host objects and the health
// prober's changes still wake it at once.
const (
	startingRequeue = 2 * time.Second
	healthyRequeue  = 30 * time.Second
	stuckRequeue    = 15 * time.Second
	slowAfter       = 2 * time.Minute
)

// notReadyRequeue is when to look again at a VirtualCluster that is not
// Ready yet, at now: startingRequeue for slowAfter since it last changed
// readiness (or was created), then stuckRequeue.
func notReadyRequeue(vc *nestv1.VirtualCluster, now time.Time) time.Duration {
	since := vc.CreationTimestamp.Time
	if c := meta.FindStatusCondition(vc.Status.Conditions, nestv1.ConditionReady); c != nil {
		if c.Status == metav1.ConditionTrue {
			// Ready until now: a failure just seen may pass as quickly.
			return startingRequeue
		}
		since = c.LastTransitionTime.Time
	}
	return waitedRequeue(since, now)
}

// waitedRequeue is when to look again at something that has waited since
// since, at now: startingRequeue until slowAfter, then stuckRequeue.
func waitedRequeue(since, now time.Time) time.Duration {
	if now.Sub(since) > slowAfter {
		return stuckRequeue
	}
	return startingRequeue
}

// TenantChecker checks a tenant API server, its virtual node and the
// administrators' rights, given nest-manager's kubeconfig for the tenant
// (controlplane.ManagerKubeconfig). Tests replace it; the default talks to
// the tenant API server.
type TenantChecker interface {
	Ready(ctx context.Context, kubeconfig []byte) error
	VirtualNodeReady(ctx context.Context, kubeconfig []byte) error
	AdministratorsAuthorized(ctx context.Context, kubeconfig []byte) error
	// Preflight says what holds an upgrade to version to, "" when
	// nothing: an API to removes that a client asked one of apiServers
	// (every replica's base URL) for since it started, unless
	// ignoreRemovedAPIs, and a node whose kubelet is further behind to than
	// upstream's skew policy allows. Its error means it could not look.
	Preflight(ctx context.Context, kubeconfig []byte, apiServers []string, to string, ignoreRemovedAPIs bool) (string, error)
}

// Reconciler reconciles VirtualClusters.
type Reconciler struct {
	client.Client
	// APIReader reads from the API server, not the cache. Deletion uses it, so
	// it finds every host object even if its label was removed.
	APIReader client.Reader
	Scheme    *runtime.Scheme
	Recorder  events.EventRecorder
	// ControlPlane holds the image and pull policy of tenant control planes,
	// the host's address ranges and nest-manager's namespace.
	ControlPlane controlplane.Options
	// HostClusterDomain is the host cluster's DNS suffix, named in certificates.
	HostClusterDomain string
	// Health holds the tenants' last probe results, written by the
	// HealthProber; the reconciler reads it and never dials a tenant.
	Health *Health
	// Workers is how many VirtualClusters are reconciled at once.
	Workers int
}

// +kubebuilder:rbac:groups=nest.dev,resources=virtualclusters,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=nest.dev,resources=virtualclusters/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=nest.dev,resources=virtualclusters/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=secrets;services,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups=nest.dev,resources=globalnodes,verbs=get;list;watch
// +kubebuilder:rbac:groups=apps,resources=statefulsets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=serviceaccounts;resourcequotas;limitranges,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=storage.k8s.io,resources=storageclasses,verbs=list
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=get;list;watch;create;update;patch;delete;deletecollection
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;patch
// +kubebuilder:rbac:groups="",resources=pods;configmaps;services;secrets;persistentvolumeclaims,verbs=list;delete;deletecollection
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=list;deletecollection
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;watch;create;update;patch
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=rolebindings,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=clusterroles,verbs=bind,resourceNames=nest-syncer
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile brings one VirtualCluster's host objects to their desired state and
// reports what it found in the status.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, err error) {
	vc := &nestv1.VirtualCluster{}
	if err := r.Get(ctx, req.NamespacedName, vc); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !vc.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, vc)
	}
	// Nothing is created for a VirtualCluster before it holds the namespace.
	holder, err := controlplane.ClaimNamespace(ctx, r.APIReader, r.Client, vc)
	if err != nil {
		return ctrl.Result{}, err
	}
	if holder != vc.Name {
		return r.refuseNamespace(ctx, vc, holder)
	}
	if err := r.addFinalizer(ctx, vc); err != nil {
		return ctrl.Result{}, err
	}
	s := newReconcileState(vc)
	defer func() {
		if perr := r.patchStatus(ctx, s, err); perr != nil && err == nil {
			err = perr
		}
	}()
	return r.runPhases(ctx, s)
}

// addFinalizer adds the finalizer with a patch that fails on a concurrent
// change, rather than an Update that would write back the whole object.
func (r *Reconciler) addFinalizer(ctx context.Context, vc *nestv1.VirtualCluster) error {
	orig := vc.DeepCopy()
	if !controllerutil.AddFinalizer(vc, Finalizer) {
		return nil
	}
	if err := r.Patch(ctx, vc, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("add finalizer to %s: %w", klog.KObj(vc), err)
	}
	return nil
}

// reconcileState carries one reconcile's objects and observations between phases.
type reconcileState struct {
	vc *nestv1.VirtualCluster
	// before is vc as read, the base of the status patch; a phase that
	// patches vc (reconcileKubeconfig) moves its resourceVersion on
	// (patchedSpec), so the patch's optimistic lock holds against other
	// writers only. Its generation stays the one the phases worked from.
	before  *nestv1.VirtualCluster
	obs     observed
	service *corev1.Service
	nodeIPs []string
	ips     controlplane.ServiceIPs
	pki     map[string][]byte
	// renewal is when reconcilePKI and reconcileKubeconfig issue leaves.
	renewal controlplane.Renewal
	// secrets are the data of the Secrets holding certificates, by name,
	// as reconcilePKI and reconcileKubeconfig wrote them.
	secrets  map[string]map[string][]byte
	internal []byte // the in-cluster admin kubeconfig
	// upgrade is what reconcileUpgrade decided; its reason is "" until it ran.
	upgrade upgradeState
	// failed names the condition of the phase that returned an error.
	failed string
}

func newReconcileState(vc *nestv1.VirtualCluster) *reconcileState {
	return &reconcileState{vc: vc, before: vc.DeepCopy()}
}

// patchedSpec records that a phase patched s.vc: the spec patch leaves the
// status alone, so before stays its base at the new resourceVersion.
func (s *reconcileState) patchedSpec() {
	s.before.ResourceVersion = s.vc.ResourceVersion
}

// phase is one step of a reconcile. done=false means "not yet": the later
// phases wait and the reconcile is requeued.
type phase func(ctx context.Context, s *reconcileState) (done bool, err error)

// step is a phase and the condition its failure belongs to.
type step struct {
	run       phase
	condition string
}

func (r *Reconciler) runPhases(ctx context.Context, s *reconcileState) (ctrl.Result, error) {
	for _, p := range []step{
		{r.reconcileNamespace, nestv1.ConditionControlPlaneAvailable},
		{r.reconcileNetworkPolicies, nestv1.ConditionControlPlaneAvailable},
		{r.reconcileLimits, nestv1.ConditionControlPlaneAvailable},
		{r.reconcileDedicatedNodes, nestv1.ConditionControlPlaneAvailable},
		{r.reconcileService, nestv1.ConditionControlPlaneAvailable},
		{r.reconcileVirtualNodeObjects, nestv1.ConditionNodesReady},
		{r.reconcilePKI, nestv1.ConditionCertificatesReady},
		{r.reconcileUpgrade, nestv1.ConditionUpgrading},
		{r.reconcileStatefulSet, nestv1.ConditionControlPlaneAvailable},
		{r.reconcileKubeconfig, nestv1.ConditionCertificatesReady},
		{r.reconcileCARotation, nestv1.ConditionCertificatesReady},
		{r.reconcileAvailability, nestv1.ConditionControlPlaneAvailable},
		{r.reconcileVirtualNode, nestv1.ConditionNodesReady},
	} {
		done, err := p.run(ctx, s)
		if err != nil {
			s.failed = p.condition
			return ctrl.Result{}, err
		}
		if !done {
			return ctrl.Result{RequeueAfter: notReadyRequeue(s.vc, time.Now())}, nil
		}
	}
	return ctrl.Result{RequeueAfter: healthyRequeue}, nil
}

// patchStatus writes the phase and conditions derived from what was
// observed, and emits an event when the phase changes. When a phase failed
// (phaseErr), what this reconcile could not observe is not evidence: the
// phase and conditions stay as they were, and the error is added to the
// message of the condition the failed phase belongs to.
func (r *Reconciler) patchStatus(ctx context.Context, s *reconcileState, phaseErr error) error {
	vc, before := s.vc, s.before
	if phaseErr != nil {
		vc.Status = *before.Status.DeepCopy()
		setFailure(&vc.Status.Conditions, s.failed, phaseErr, before.Generation)
	} else {
		r.setObserved(vc, before, s)
	}
	if equality.Semantic.DeepEqual(vc.Status, before.Status) {
		return nil
	}
	// A merge patch replaces the whole list of conditions, node assignment's
	// NodesAssigned among them: the optimistic lock keeps a stale copy of
	// it from being written back (a conflict is retried with a fresh read).
	if err := r.Status().Patch(ctx, vc, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("patch status of %s: %w", klog.KObj(vc), err)
	}
	// Told once the status holds it: a conflict retried would tell it twice.
	r.tellUpgradeStep(ctx, vc, before)
	if vc.Status.Phase != before.Status.Phase {
		log := ctrl.LoggerFrom(ctx)
		log.Info("Phase changed", "virtualCluster", klog.KObj(vc), "from", before.Status.Phase, "to", vc.Status.Phase)
		r.Recorder.Eventf(vc, nil, corev1.EventTypeNormal, string(vc.Status.Phase), "Reconcile",
			"phase %s: %s", vc.Status.Phase, meta.FindStatusCondition(vc.Status.Conditions, nestv1.ConditionReady).Message)
	}
	return nil
}

// setObserved writes the status a complete observation gives. The
// generation observed is before's, the spec the phases worked from: a
// phase's patch (spec.kubeconfig) may have brought in a newer one.
func (r *Reconciler) setObserved(vc, before *nestv1.VirtualCluster, s *reconcileState) {
	vc.Status.Phase = phaseFor(s.obs, before.Status.Phase)
	for _, c := range conditionsFor(s.obs, before.Generation, vc.Name, vc.Namespace) {
		meta.SetStatusCondition(&vc.Status.Conditions, c)
	}
	vc.Status.ObservedGeneration = before.Generation
	vc.Status.Endpoint = s.obs.endpoint
	if s.obs.hostObjects {
		vc.Status.ReadyReplicas = s.obs.readyReplicas
	}
	if s.upgrade.reason != "" {
		vc.Status.Version = s.upgrade.running
		meta.SetStatusCondition(&vc.Status.Conditions, upgradingCondition(s.upgrade, before.Generation))
	}
	if s.obs.kubeconfig {
		vc.Status.KubeconfigSecretRef = &corev1.LocalObjectReference{Name: controlplane.NamesOf(vc).KubeconfigSecret()}
	}
}

// tellUpgradeStep emits an event when the Upgrading condition's reason
// changes: each step of an upgrade, its block and its end.
func (r *Reconciler) tellUpgradeStep(ctx context.Context, vc, before *nestv1.VirtualCluster) {
	now := meta.FindStatusCondition(vc.Status.Conditions, nestv1.ConditionUpgrading)
	if now == nil {
		return
	}
	was := meta.FindStatusCondition(before.Status.Conditions, nestv1.ConditionUpgrading)
	if was != nil && was.Reason == now.Reason {
		return
	}
	if was == nil && now.Reason == ReasonUpToDate {
		return // a new cluster, or the first look at one: nothing moved
	}
	typ := corev1.EventTypeNormal
	if now.Reason == ReasonUpgradeBlocked || now.Reason == ReasonUpgradeRefused {
		typ = corev1.EventTypeWarning
	}
	ctrl.LoggerFrom(ctx).Info("Upgrade changed", "virtualCluster", klog.KObj(vc), "reason", now.Reason, "message", now.Message)
	r.Recorder.Eventf(vc, nil, typ, now.Reason, "Upgrade", "%s", now.Message)
}

// quotaSpecChanged lets through every ResourceQuota event but a status
// update: the host's quota controller rewrites status.used on each tenant
// pod created or deleted, which would otherwise run a full reconcile per pod.
var quotaSpecChanged = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	before, okBefore := e.ObjectOld.(*corev1.ResourceQuota)
	after, okAfter := e.ObjectNew.(*corev1.ResourceQuota)
	if !okBefore || !okAfter {
		return true
	}
	return !equality.Semantic.DeepEqual(before.Spec, after.Spec) || !equality.Semantic.DeepEqual(before.Labels, after.Labels)
}}

// onlyDeletes lets through delete events only.
var onlyDeletes = predicate.Funcs{
	CreateFunc:  func(event.CreateEvent) bool { return false },
	UpdateFunc:  func(event.UpdateEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
}

// othersInNamespace maps a VirtualCluster to the other VirtualClusters of
// its namespace: when the namespace's holder is gone, the next one takes it.
func (r *Reconciler) othersInNamespace(ctx context.Context, obj client.Object) []reconcile.Request {
	var list nestv1.VirtualClusterList
	if err := r.List(ctx, &list, client.InNamespace(obj.GetNamespace())); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "List VirtualClusters of a namespace", "namespace", obj.GetNamespace())
		return nil
	}
	var out []reconcile.Request
	for _, vc := range list.Items {
		if vc.Name != obj.GetName() {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&vc)})
		}
	}
	return out
}

// SetupWithManager registers the controller: it watches VirtualClusters and
// the host objects they own (controlplane.HostObjects that are Watched), so a
// deleted Secret, Service, StatefulSet, NetworkPolicy or LimitRange is
// recreated at once.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	b := ctrl.NewControllerManagedBy(mgr).For(&nestv1.VirtualCluster{})
	for _, h := range controlplane.HostObjects {
		if h.Watched {
			obj := h.New()
			b = b.Owns(obj, ownsOptions(obj)...)
		}
	}
	return b.
		Watches(&nestv1.VirtualCluster{}, handler.EnqueueRequestsFromMapFunc(r.othersInNamespace), builder.WithPredicates(onlyDeletes)).
		Watches(&nestv1.GlobalNode{}, handler.EnqueueRequestsFromMapFunc(holderOf)).
		Watches(&nestv1.MemberCluster{}, handler.EnqueueRequestsFromMapFunc(r.granteesOf), builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WatchesRawSource(source.Channel(r.Health.Changes(), &handler.EnqueueRequestForObject{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: max(r.Workers, 1)}).
		Named("virtualcluster").
		Complete(r)
}

// holderOf maps a GlobalNode to the VirtualCluster its status names, whose
// NetworkPolicies admit its pod CIDR while node promotion has it away. An
// update maps the old and the new object, so the holder it leaves hears of it.
func holderOf(_ context.Context, obj client.Object) []reconcile.Request {
	gn, ok := obj.(*nestv1.GlobalNode)
	if !ok {
		return nil
	}
	ns, name, ok := strings.Cut(gn.Status.VirtualCluster, "/")
	if !ok || ns == "" || name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}}}
}

// granteesOf maps a MemberCluster to the VirtualClusters with a grant on
// it, whose API server certificates name its addresses.
func (r *Reconciler) granteesOf(ctx context.Context, obj client.Object) []reconcile.Request {
	var vcs nestv1.VirtualClusterList
	if err := r.List(ctx, &vcs); err != nil {
		return nil
	}
	var out []reconcile.Request
	for _, vc := range vcs.Items {
		if slices.ContainsFunc(vc.Spec.Members, func(g nestv1.MemberGrant) bool { return g.Name == obj.GetName() }) {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: vc.Namespace, Name: vc.Name}})
		}
	}
	return out
}

// ownsOptions are the options of the watch on owned objects like obj:
// ResourceQuotas pass quotaSpecChanged, so the host's rewrites of their
// usage do not reconcile.
func ownsOptions(obj client.Object) []builder.OwnsOption {
	if _, ok := obj.(*corev1.ResourceQuota); ok {
		return []builder.OwnsOption{builder.WithPredicates(quotaSpecChanged)}
	}
	return nil
}
