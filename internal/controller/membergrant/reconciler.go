// Package membergrant is the controller that sets up each VirtualCluster's
// member grants (spec.members) in the member clusters and hands nest-syncer
// the credentials to use them. For each grant it makes, with the member's
// admin kubeconfig, a namespace of the tenant's own in the member (Pod
// Security enforced at the VirtualCluster's level), a service account
// whose Role acts only in that namespace, a ResourceQuota holding the
// grant, and a short-lived token of that service account, renewed at 80%
// of its life. nest-syncer never sees the admin kubeconfig: it gets the
// token, the member's address and CA, and what the member node offers,
// in one host Secret (contract.MembersSecret) in the tenant's host
// namespace. A grant removed from the spec, or the VirtualCluster deleted,
// deletes the member namespace; a finalizer holds the VirtualCluster until
// every one of them is gone.
package membergrant

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/controlplane"
	"github.com/nestdev/nest/internal/kube"
	"github.com/nestdev/nest/internal/syncer/contract"
)

// Finalizer holds a VirtualCluster that has or had grants until every
// namespace Nest made for it in members is gone.
const Finalizer = "nest.dev/member-grants"

// Defaults of the Reconciler's timing.
const (
	// DefaultTokenLifetime is how long a member token lives. An hour
	// bounds what a leaked token gives away; it is renewed after 48
	// minutes.
	DefaultTokenLifetime = time.Hour
	// DefaultResyncInterval is how often a VirtualCluster's grants are set
	// up again when nothing changes, so an object deleted in the member
	// comes back.
	DefaultResyncInterval = 5 * time.Minute
	// DefaultRetryInterval is how soon a grant that is not Ready, or a
	// member namespace still being deleted, is looked at again.
	DefaultRetryInterval = 30 * time.Second
	// DefaultRequestTimeout bounds each request to a member, so one that
	// does not answer holds a worker only that long.
	DefaultRequestTimeout = 10 * time.Second
)

// Reconciler sets up one VirtualCluster's member grants.
type Reconciler struct {
	client.Client
	// APIReader reads the member kubeconfig Secrets and the members
	// Secret from the API server: the manager's cache holds neither all
	// Secrets of the manager namespace nor, right after a write, the
	// members Secret as written, and a stale read would mint a token
	// twice.
	APIReader client.Reader
	// ManagerNamespace is nest-manager's namespace, the only one member
	// kubeconfig Secrets are read from (see the membercluster controller).
	ManagerNamespace string
	// TokenLifetime is the expirationSeconds asked of the member's
	// TokenRequest API; default DefaultTokenLifetime. The member may
	// shorten it; it refuses less than 10 minutes.
	TokenLifetime time.Duration
	// ResyncInterval, RetryInterval and RequestTimeout default to
	// DefaultResyncInterval, DefaultRetryInterval and DefaultRequestTimeout.
	ResyncInterval, RetryInterval, RequestTimeout time.Duration
	// Clock tells the time tokens are renewed by; the real clock when nil.
	Clock clock.PassiveClock
	// Workers is how many VirtualClusters are reconciled at once; default 4.
	Workers int
}

// +kubebuilder:rbac:groups=nest.dev,resources=memberclusters,verbs=get;list;watch
// +kubebuilder:rbac:groups=nest.dev,resources=virtualclusters,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=nest.dev,resources=virtualclusters/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=nest.dev,resources=virtualclusters/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch

// Reconcile sets up, renews and removes the grants of one VirtualCluster
// and writes how each stands to status.members.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, err error) {
	vc := &nestv1.VirtualCluster{}
	if err := r.Get(ctx, req.NamespacedName, vc); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	deleting := !vc.DeletionTimestamp.IsZero()
	refused := false
	if !deleting {
		holder, err := controlplane.NamespaceHolderOf(ctx, r.APIReader, vc.Namespace)
		if err != nil {
			return ctrl.Result{}, err
		}
		if refused = holder != vc.Name; refused {
			// Refused the host namespace (NamespaceInUse): it gets no grants,
			// and those it had are removed, so nothing of it lands in the
			// holder's namespace or in members.
			vc = vc.DeepCopy()
			vc.Spec.Members = nil
		}
	}
	if !controllerutil.ContainsFinalizer(vc, Finalizer) {
		// Nothing was set up without the finalizer: it is added first.
		if refused {
			// No event wakes it when the holder goes: look again.
			return ctrl.Result{RequeueAfter: r.resyncInterval()}, nil
		}
		if deleting || len(vc.Spec.Members) == 0 {
			return ctrl.Result{}, nil
		}
		if err := r.patchFinalizer(ctx, vc, true); err != nil {
			return ctrl.Result{}, err
		}
	}
	s := &grantState{vc: vc, statuses: map[string]nestv1.MemberGrantStatus{}, requeue: r.resyncInterval()}
	// The status is written only after a complete pass: one cut short by
	// a host error would drop the entries of removals still pending, and
	// with them the memory of which member namespaces are left to delete.
	defer func() {
		if err == nil {
			err = r.patchMembers(ctx, s)
		}
	}()
	phases := []phase{r.readSecret, r.setUpGrants, r.removeGrants, r.writeSecret, r.releaseFinalizer}
	if deleting {
		phases = []phase{r.readSecret, r.removeGrants, r.releaseFinalizer}
	}
	for _, p := range phases {
		if err := p(ctx, s); err != nil {
			return ctrl.Result{}, err
		}
	}
	if refused {
		// Its grants are gone, and no event wakes it when the holder goes:
		// look again, as for one that never had any.
		return ctrl.Result{RequeueAfter: r.resyncInterval()}, nil
	}
	return ctrl.Result{RequeueAfter: s.requeue}, nil
}

// grantState carries one reconcile's findings between phases.
type grantState struct {
	vc *nestv1.VirtualCluster
	// found are the placements of the members Secret as read, by member.
	found map[string]contract.MemberPlacement
	// secretFound is whether the members Secret exists.
	secretFound bool
	// placements are those of the grants now Ready.
	placements []contract.MemberPlacement
	// statuses are the status entries, by member: one per grant, and one
	// per removed grant whose namespace is not gone yet.
	statuses map[string]nestv1.MemberGrantStatus
	// requeue is when to look again: the soonest token renewal or retry.
	requeue time.Duration
}

// phase is one step of a reconcile. A grant's failure goes to its status
// entry; only errors of the host API server are returned.
type phase func(ctx context.Context, s *grantState) error

// after brings the next reconcile forward to d from now, if sooner.
func (s *grantState) after(d time.Duration) {
	s.requeue = min(s.requeue, max(d, time.Second))
}

// readSecret reads the members Secret, whose tokens are kept while they
// are fresh and whose members are removed when their grant is gone.
func (r *Reconciler) readSecret(ctx context.Context, s *grantState) error {
	secret, err := r.getSecret(ctx, s.vc)
	if err != nil || secret == nil {
		return err
	}
	s.secretFound = true
	s.found = map[string]contract.MemberPlacement{}
	p, perr := contract.ParseMemberPlacements(secret.Data[contract.MembersKey])
	if perr != nil {
		// It is rewritten whole below; every grant gets a new token.
		ctrl.LoggerFrom(ctx).Info("Members Secret does not parse: rewriting it", "secret", klog.KObj(secret), "error", perr.Error())
		return nil
	}
	for _, m := range p.Members {
		s.found[m.Name] = m
	}
	return nil
}

// setUpGrants sets each grant of the spec up in its member.
func (r *Reconciler) setUpGrants(ctx context.Context, s *grantState) error {
	for _, g := range s.vc.Spec.Members {
		st, placement, renewAt, err := r.setUpGrant(ctx, s, g)
		if err != nil {
			return err
		}
		s.statuses[g.Name] = st
		if placement == nil {
			if kept, ok := keptWhileUnreachable(st, s.found[g.Name]); ok {
				s.placements = append(s.placements, kept)
			}
			s.after(r.retryInterval())
			continue
		}
		s.placements = append(s.placements, *placement)
		s.after(renewAt.Sub(r.now()))
	}
	return nil
}

// keptWhileUnreachable is the placement to keep for a grant whose member
// Nest cannot reach for now: the last one, with no Ready node. The tenant's
// member node then goes NotReady and its pods stay bound, as on a node that
// lost its kubelet, instead of the node and its pods being deleted with the
// placement. A grant failing for any other reason keeps nothing.
func keptWhileUnreachable(st nestv1.MemberGrantStatus, last contract.MemberPlacement) (contract.MemberPlacement, bool) {
	if st.Reason != ReasonMemberUnreachable || last.Name == "" {
		return contract.MemberPlacement{}, false
	}
	last.Nodes = 0
	return last, true
}

// setUpGrant sets one grant up and returns its status entry and, when it is
// Ready, its placement and when its token is renewed.
func (r *Reconciler) setUpGrant(ctx context.Context, s *grantState, g nestv1.MemberGrant) (nestv1.MemberGrantStatus, *contract.MemberPlacement, time.Time, error) {
	ns := NamespaceName(s.vc, g.Name)
	mc := &nestv1.MemberCluster{}
	if err := r.Get(ctx, client.ObjectKey{Name: g.Name}, mc); err != nil {
		if apierrors.IsNotFound(err) {
			return grantStatus(g.Name, "", nil, memberNotFound(g.Name)), nil, time.Time{}, nil
		}
		return nestv1.MemberGrantStatus{}, nil, time.Time{}, fmt.Errorf("get MemberCluster %s of %s: %w", g.Name, klog.KObj(s.vc), err)
	}
	alloc := Allocatable(g.Resources, mc.Status.Allocatable)
	if f := selected(mc, s.vc); f != nil {
		return grantStatus(g.Name, "", alloc, f), nil, time.Time{}, nil
	}
	svc, err := r.tenantService(ctx, s.vc)
	if err != nil {
		return nestv1.MemberGrantStatus{}, nil, time.Time{}, err
	}
	path, f := pathToTenant(mc, svc)
	if f != nil {
		return grantStatus(g.Name, "", alloc, f), nil, time.Time{}, nil
	}
	m, f, err := r.connect(ctx, mc)
	if err != nil || f != nil {
		return grantStatus(g.Name, "", alloc, f), nil, time.Time{}, err
	}
	sa, f := r.setUp(ctx, m, s.vc, g)
	if f != nil {
		return grantStatus(g.Name, ns, alloc, f), nil, time.Time{}, nil
	}
	var old *contract.MemberPlacement
	if p, ok := s.found[g.Name]; ok {
		old = &p
	}
	token, expiry, renewAt, f := r.token(ctx, m, sa, old)
	if f != nil {
		return grantStatus(g.Name, ns, alloc, f), nil, time.Time{}, nil
	}
	placement := &contract.MemberPlacement{
		Name: g.Name, Namespace: ns,
		Server: m.config.Host, CAData: m.config.CAData, TLSServerName: m.config.ServerName,
		Token: token, TokenExpiry: expiry.UTC(),
		APIServerAddress: path.apiServerAddress,
		Nodes:            mc.Status.Nodes, Allocatable: alloc,
	}
	switch path.network {
	case nestv1.MemberNetworkNodePort:
		placement.NodePortAddress = mc.Spec.Network.NodePortAddress
	case nestv1.MemberNetworkLoadBalancer:
		placement.LoadBalancer = true
	default:
		placement.DNSAddress = mc.Spec.Network.DNSAddress
	}
	st := grantStatus(g.Name, ns, alloc, nil)
	st.APIServerAddress, st.Network = path.apiServerAddress, path.network
	injectorRenewAt, f := r.setUpInjector(ctx, m, s.vc, placement, old, &st)
	if f != nil {
		return grantStatus(g.Name, ns, alloc, f), nil, time.Time{}, nil
	}
	if !injectorRenewAt.IsZero() {
		renewAt = minTime(renewAt, injectorRenewAt)
	}
	if placement.HasMemberNetwork() && !st.InjectorReady {
		// The path to the injector appears once nest-syncer has the
		// placement: look again soon.
		renewAt = minTime(renewAt, r.now().Add(r.retryInterval()))
	}
	return st, placement, renewAt, nil
}

// setUpInjector registers the grant's network injector when the placement
// has a member network (its certificate goes into p), or removes it when it
// has none, and records in st whether it works. It returns when the
// injector's certificate is to be renewed (zero when there is none).
func (r *Reconciler) setUpInjector(ctx context.Context, m *memberConn, vc *nestv1.VirtualCluster, p, old *contract.MemberPlacement, st *nestv1.MemberGrantStatus) (time.Time, *grantFailure) {
	if !p.HasMemberNetwork() {
		return time.Time{}, deleteInjector(ctx, m, vc, p.Namespace)
	}
	cert, key, renewAt, err := injectorCert(old, p.Namespace, controlplane.RenewalOf(vc, r.now()))
	if err != nil {
		return time.Time{}, &grantFailure{ReasonSetupFailed, "issue the injector's certificate: " + err.Error()}
	}
	if f := applyInjector(ctx, m, vc, p.Namespace, cert); f != nil {
		return time.Time{}, f
	}
	p.InjectorCert, p.InjectorKey = cert, key
	ready, why := probeInjector(ctx, m, vc, p.Namespace)
	st.InjectorReady = ready
	if !ready {
		st.Message += "; the network injector does not answer yet: " + why
	}
	return renewAt, nil
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// removeGrants deletes the member namespaces of grants that left the spec,
// or of every grant when the VirtualCluster is being deleted. The members
// it knew are those of its status and of the members Secret: a member
// stays in the status until its namespace is gone, so none is forgotten.
func (r *Reconciler) removeGrants(ctx context.Context, s *grantState) error {
	keep := map[string]bool{}
	if s.vc.DeletionTimestamp.IsZero() {
		for _, g := range s.vc.Spec.Members {
			keep[g.Name] = true
		}
	}
	known := map[string]bool{}
	for _, g := range s.vc.Spec.Members {
		known[g.Name] = true
	}
	for _, st := range s.vc.Status.Members {
		known[st.Name] = true
	}
	for name := range s.found {
		known[name] = true
	}
	var gone []string
	for name := range known {
		if !keep[name] {
			gone = append(gone, name)
		}
	}
	slices.Sort(gone)
	for _, name := range gone {
		st, err := r.removeGrant(ctx, s.vc, name)
		if err != nil {
			return err
		}
		if st != nil {
			s.statuses[name] = *st
			s.after(r.retryInterval())
		}
	}
	return nil
}

// removeGrant deletes the member namespace of one removed grant and returns
// its status entry while the namespace is not gone. A member whose
// MemberCluster was deleted cannot be reached any more: its namespace is
// left behind, logged, rather than holding the VirtualCluster forever.
func (r *Reconciler) removeGrant(ctx context.Context, vc *nestv1.VirtualCluster, name string) (*nestv1.MemberGrantStatus, error) {
	ns := NamespaceName(vc, name)
	log := ctrl.LoggerFrom(ctx).WithValues("virtualCluster", klog.KObj(vc), "member", name, "namespace", ns)
	mc := &nestv1.MemberCluster{}
	if err := r.Get(ctx, client.ObjectKey{Name: name}, mc); err != nil {
		if apierrors.IsNotFound(err) {
			log.Info("MemberCluster is gone: its namespace for the removed grant is left in the member, if it is still there")
			return nil, nil
		}
		return nil, fmt.Errorf("get MemberCluster %s of %s: %w", name, klog.KObj(vc), err)
	}
	m, f, err := r.connect(ctx, mc)
	if err != nil {
		return nil, err
	}
	if f == nil {
		f = deleteInjector(ctx, m, vc, ns)
	}
	if f == nil {
		var gone bool
		if gone, f = removeNamespace(ctx, m, vc, ns); gone {
			log.Info("Member namespace of a removed grant is gone")
			return nil, nil
		}
	}
	if f.reason != ReasonRemoving {
		f.message = "the grant was removed, but its namespace cannot be deleted yet: " + f.message
		log.Info("Member namespace of a removed grant cannot be deleted yet", "reason", f.reason, "message", f.message)
	}
	st := grantStatus(name, ns, nil, f)
	return &st, nil
}

// writeSecret writes the placements of the Ready grants to the members
// Secret, when its bytes change.
func (r *Reconciler) writeSecret(ctx context.Context, s *grantState) error {
	if len(s.vc.Spec.Members) == 0 {
		return nil // releaseFinalizer deletes it once nothing is left.
	}
	data, err := contract.MemberPlacements{Members: append([]contract.MemberPlacement{}, s.placements...)}.Marshal()
	if err != nil {
		return fmt.Errorf("members Secret of %s: %w", klog.KObj(s.vc), err)
	}
	return r.putSecret(ctx, s.vc, data)
}

// releaseFinalizer removes the finalizer once nothing of the VirtualCluster
// is left in members: it is being deleted, or has no grants left, and no
// member namespace is still being deleted. The members Secret of a live
// VirtualCluster without grants goes too.
func (r *Reconciler) releaseFinalizer(ctx context.Context, s *grantState) error {
	deleting := !s.vc.DeletionTimestamp.IsZero()
	if !deleting && len(s.vc.Spec.Members) > 0 {
		return nil
	}
	for _, st := range s.statuses {
		if !st.Ready {
			return nil // a namespace still to go
		}
	}
	if !deleting && s.secretFound {
		if err := r.deleteSecret(ctx, s.vc); err != nil {
			return err
		}
	}
	if err := r.patchFinalizer(ctx, s.vc, false); err != nil {
		return err
	}
	s.requeue = 0
	return nil
}

// patchFinalizer adds or removes the finalizer with a patch that fails on
// a concurrent change, rather than an Update that would write back the
// whole object.
func (r *Reconciler) patchFinalizer(ctx context.Context, vc *nestv1.VirtualCluster, add bool) error {
	orig := vc.DeepCopy()
	changed := controllerutil.RemoveFinalizer(vc, Finalizer)
	if add {
		changed = controllerutil.AddFinalizer(vc, Finalizer)
	}
	if !changed {
		return nil
	}
	if err := client.IgnoreNotFound(r.Patch(ctx, vc, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))); err != nil {
		return fmt.Errorf("patch finalizer %s of %s: %w", Finalizer, klog.KObj(vc), err)
	}
	return nil
}

// patchMembers writes status.members, and only that field, when it
// changed; it logs each grant whose readiness or reason changed.
func (r *Reconciler) patchMembers(ctx context.Context, s *grantState) error {
	members := sortedStatuses(s.statuses)
	if equality.Semantic.DeepEqual(members, s.vc.Status.Members) {
		return nil
	}
	logChanges(ctx, s.vc, s.vc.Status.Members, members)
	return kube.PatchStatusField(ctx, r.Client, s.vc, "members", members)
}

// logChanges logs each grant whose readiness or reason changed.
func logChanges(ctx context.Context, vc *nestv1.VirtualCluster, before, after []nestv1.MemberGrantStatus) {
	was := map[string]nestv1.MemberGrantStatus{}
	for _, st := range before {
		was[st.Name] = st
	}
	log := ctrl.LoggerFrom(ctx)
	for _, st := range after {
		if w, ok := was[st.Name]; ok && w.Ready == st.Ready && w.Reason == st.Reason {
			continue
		}
		log.Info("Member grant changed", "virtualCluster", klog.KObj(vc), "member", st.Name,
			"ready", st.Ready, "reason", st.Reason, "message", st.Message)
	}
}

func (r *Reconciler) now() time.Time {
	if r.Clock == nil {
		return time.Now()
	}
	return r.Clock.Now()
}

func (r *Reconciler) tokenLifetime() time.Duration {
	return cmp.Or(r.TokenLifetime, DefaultTokenLifetime)
}

func (r *Reconciler) resyncInterval() time.Duration {
	return cmp.Or(r.ResyncInterval, DefaultResyncInterval)
}

func (r *Reconciler) retryInterval() time.Duration {
	return cmp.Or(r.RetryInterval, DefaultRetryInterval)
}

func (r *Reconciler) requestTimeout() time.Duration {
	return cmp.Or(r.RequestTimeout, DefaultRequestTimeout)
}

// grantsOn maps a MemberCluster to the VirtualClusters that grant on it,
// or did and still have a namespace there.
func (r *Reconciler) grantsOn(ctx context.Context, obj client.Object) []reconcile.Request {
	var list nestv1.VirtualClusterList
	if err := r.List(ctx, &list); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "List VirtualClusters for a changed MemberCluster", "memberCluster", klog.KObj(obj))
		return nil
	}
	var reqs []reconcile.Request
	for _, vc := range list.Items {
		uses := slices.ContainsFunc(vc.Spec.Members, func(g nestv1.MemberGrant) bool { return g.Name == obj.GetName() }) ||
			slices.ContainsFunc(vc.Status.Members, func(st nestv1.MemberGrantStatus) bool { return st.Name == obj.GetName() })
		if uses {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&vc)})
		}
	}
	return reqs
}

// memberChanged passes the MemberCluster changes that change a grant:
// its spec, what it offers (allocatable, Ready nodes), and whether it is
// reachable. Its probe writes lastProbeTime every 30 seconds, which does
// not.
var memberChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		old, ok1 := e.ObjectOld.(*nestv1.MemberCluster)
		cur, ok2 := e.ObjectNew.(*nestv1.MemberCluster)
		if !ok1 || !ok2 {
			return true
		}
		return old.Generation != cur.Generation || old.Status.Nodes != cur.Status.Nodes ||
			!equality.Semantic.DeepEqual(old.Status.Allocatable, cur.Status.Allocatable) ||
			reachable(old) != reachable(cur)
	},
}

// deletionStarted passes the update that marks a VirtualCluster deleted,
// so its member namespaces start going at once whether or not the API
// server counted the deletion as a new generation.
var deletionStarted = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		return e.ObjectOld.GetDeletionTimestamp().IsZero() && !e.ObjectNew.GetDeletionTimestamp().IsZero()
	},
}

func reachable(mc *nestv1.MemberCluster) bool {
	for _, c := range mc.Status.Conditions {
		if c.Type == nestv1.ConditionReachable {
			return c.Status == "True"
		}
	}
	return false
}

// SetupWithManager registers the controller. It watches VirtualClusters
// (spec, labels and deletion: its own status writes do not wake it),
// MemberClusters (mapped to the VirtualClusters that grant on them) and the
// members Secrets, so one deleted or edited is written again at once.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.ManagerNamespace == "" {
		return errors.New("membergrant: ManagerNamespace is empty: set it to nest-manager's namespace, where member kubeconfig Secrets live")
	}
	if r.APIReader == nil {
		return errors.New("membergrant: APIReader is nil: set it to the manager's API reader")
	}
	if r.TokenLifetime != 0 && r.TokenLifetime < 10*time.Minute {
		return fmt.Errorf("membergrant: TokenLifetime %s is below the 10 minutes the TokenRequest API accepts: raise it", r.TokenLifetime)
	}
	workers := r.Workers
	if workers <= 0 {
		workers = 4
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&nestv1.VirtualCluster{}, builder.WithPredicates(predicate.Or[client.Object](
			predicate.GenerationChangedPredicate{}, predicate.LabelChangedPredicate{}, deletionStarted))).
		Watches(&nestv1.MemberCluster{}, handler.EnqueueRequestsFromMapFunc(r.grantsOn), builder.WithPredicates(memberChanged)).
		Watches(secretKind(), handler.EnqueueRequestsFromMapFunc(secretOwner)).
		WithOptions(controller.Options{MaxConcurrentReconciles: workers}).
		Named("membergrant").
		Complete(r)
}
