// Package membercluster is the controller that probes MemberClusters: for
// each, it reads the kubeconfig Secret the platform team named, reaches the
// member's API server with it, lists the member's Nodes, and reports in the
// status whether the member answers (the Reachable condition) and what its
// Ready, schedulable Nodes offer (capacity, allocatable capped by
// spec.resources). It probes every 30 seconds and whenever the spec or the
// Secret changes. It places nothing in members (the membergrant controller
// and nest-syncer do); InjectorReady sums up the grants' injectors, as the
// VirtualClusters' status.members report them.
package membercluster

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
)

// Defaults of the Reconciler's timing.
const (
	// DefaultProbeInterval is how often a member is probed when nothing
	// changes: often enough that an unreachable member shows within a
	// minute, rarely enough that many members cost little.
	DefaultProbeInterval = 30 * time.Second
	// DefaultProbeTimeout bounds one probe, so a member that does not
	// answer holds a worker for at most that long.
	DefaultProbeTimeout = 10 * time.Second
)

// Reconciler probes one MemberCluster. It keeps no state in the member and
// adds no finalizer: there is nothing to clean up when a MemberCluster goes.
type Reconciler struct {
	client.Client
	// ManagerNamespace is nest-manager's namespace, the only one it reads
	// kubeconfig Secrets from. A MemberCluster is cluster-scoped, so
	// without this rule whoever may create one could have nest-manager
	// use any Secret of the host, a tenant's included, as a kubeconfig.
	ManagerNamespace string
	// ProbeInterval is how often each member is probed; default
	// DefaultProbeInterval.
	ProbeInterval time.Duration
	// ProbeTimeout bounds each probe; default DefaultProbeTimeout.
	ProbeTimeout time.Duration
	// Workers is how many members are probed at once; default 4.
	Workers int

	// secrets reads Secrets in ManagerNamespace only, from a cache of its
	// own: the manager's cache holds only the Secrets Nest made for
	// VirtualClusters (virtualcluster.CacheOptions).
	secrets client.Reader
}

// +kubebuilder:rbac:groups=nest.dev,resources=memberclusters,verbs=get;list;watch
// +kubebuilder:rbac:groups=nest.dev,resources=memberclusters/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch
// +kubebuilder:rbac:groups=nest.dev,resources=virtualclusters,verbs=get;list;watch

// Reconcile probes the member and writes what it found to the status.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, err error) {
	mc := &nestv1.MemberCluster{}
	if err := r.Get(ctx, req.NamespacedName, mc); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !mc.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	s := &probeState{mc: mc, before: mc.DeepCopy()}
	// The status is written whatever the probe found: a failed probe is
	// news too. Only an error of the host API server is returned, for
	// backoff; a member that does not answer is probed again on schedule.
	defer func() {
		if perr := r.patchStatus(ctx, s); perr != nil {
			err = errors.Join(err, perr)
		}
	}()
	// The probe, not the status write, is bounded by the probe timeout.
	probeCtx, cancel := context.WithTimeout(ctx, r.probeTimeout())
	defer cancel()
	for _, p := range []phase{r.readKubeconfig, r.connect, r.listNodes} {
		if err := p(probeCtx, s); err != nil {
			return ctrl.Result{}, err
		}
		if s.failure != nil {
			break
		}
	}
	// A failed probe is retried on the same schedule: a member that is
	// down is not probed faster, and one that comes back is seen.
	return ctrl.Result{RequeueAfter: r.probeInterval()}, nil
}

// probeState carries one probe's findings between phases.
type probeState struct {
	mc, before *nestv1.MemberCluster
	// kubeconfig is the Secret's kubeconfig.
	kubeconfig []byte
	// config reaches the member.
	config *rest.Config
	// nodes are the member's Nodes, once listed.
	nodes []corev1.Node
	// failure is why the member is not Reachable; nil while the probe goes on.
	failure *failure
}

// phase is one step of a probe. It records a failure of the member in
// s.failure and returns only errors of the host API server.
type phase func(ctx context.Context, s *probeState) error

// readKubeconfig reads the kubeconfig from the Secret the spec names.
func (r *Reconciler) readKubeconfig(ctx context.Context, s *probeState) error {
	ref := s.mc.Spec.KubeconfigSecretRef
	if ref.Namespace != r.ManagerNamespace {
		s.failure = secretNotAllowed(ref, r.ManagerNamespace)
		return nil
	}
	secret := &corev1.Secret{}
	switch err := r.secrets.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, secret); {
	case apierrors.IsNotFound(err):
		s.failure = secretNotFound(ref)
		return nil
	case err != nil:
		return fmt.Errorf("MemberCluster %s: get Secret %s/%s: %w", s.mc.Name, ref.Namespace, ref.Name, err)
	}
	data, ok := secret.Data[keyOf(ref)]
	if !ok || len(data) == 0 {
		s.failure = keyMissing(ref)
		return nil
	}
	s.kubeconfig = data
	return nil
}

// connect builds a client configuration from the kubeconfig.
func (r *Reconciler) connect(_ context.Context, s *probeState) error {
	cfg, err := RESTConfig(s.kubeconfig, r.probeTimeout())
	if err != nil {
		s.failure = kubeconfigInvalid(s.mc.Spec.KubeconfigSecretRef, err)
		return nil
	}
	s.config = cfg
	return nil
}

// listNodes lists the member's Nodes.
func (r *Reconciler) listNodes(ctx context.Context, s *probeState) error {
	cs, err := kubernetes.NewForConfig(s.config)
	if err != nil {
		s.failure = kubeconfigInvalid(s.mc.Spec.KubeconfigSecretRef, err)
		return nil
	}
	// ResourceVersion 0: the member's watch cache answers, not its etcd.
	list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		s.failure = listFailed(s.config.Host, err)
		return nil
	}
	s.nodes = list.Items
	return nil
}

// patchStatus writes the probe's findings. It writes after every probe:
// lastProbeTime records each, so the status says how fresh it is.
func (r *Reconciler) patchStatus(ctx context.Context, s *probeState) error {
	var vcs nestv1.VirtualClusterList
	if err := r.List(ctx, &vcs); err != nil {
		return fmt.Errorf("list VirtualClusters for the grants on %s: %w", s.mc.Name, err)
	}
	setStatus(s.mc, s.nodes, s.failure, grantsOn(vcs.Items, s.mc.Name), metav1.Now())
	if equality.Semantic.DeepEqual(s.before.Status, s.mc.Status) {
		return nil
	}
	if err := client.IgnoreNotFound(r.Status().Patch(ctx, s.mc, client.MergeFrom(s.before))); err != nil {
		return fmt.Errorf("patch status of MemberCluster %s: %w", s.mc.Name, err)
	}
	was, is := reachable(s.before), reachable(s.mc)
	if was == nil || was.Status != is.Status || was.Reason != is.Reason {
		ctrl.LoggerFrom(ctx).Info("Member reachability changed", "memberCluster", klog.KObj(s.mc),
			"reachable", is.Status, "reason", is.Reason, "message", is.Message, "nodes", s.mc.Status.Nodes)
	}
	return nil
}

func (r *Reconciler) probeInterval() time.Duration {
	return cmp.Or(r.ProbeInterval, DefaultProbeInterval)
}

func (r *Reconciler) probeTimeout() time.Duration { return cmp.Or(r.ProbeTimeout, DefaultProbeTimeout) }

// membersOf maps a Secret to the MemberClusters whose kubeconfig it holds,
// so a changed Secret is probed at once rather than on schedule.
func (r *Reconciler) membersOf(ctx context.Context, secret *corev1.Secret) []reconcile.Request {
	var list nestv1.MemberClusterList
	if err := r.List(ctx, &list); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "List MemberClusters for a changed Secret", "secret", klog.KObj(secret))
		return nil
	}
	var reqs []reconcile.Request
	for _, mc := range list.Items {
		if ref := mc.Spec.KubeconfigSecretRef; ref.Namespace == secret.Namespace && ref.Name == secret.Name {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKey{Name: mc.Name}})
		}
	}
	return reqs
}

// SetupWithManager registers the controller and its cache of the Secrets in
// ManagerNamespace. Only spec changes of a MemberCluster wake it (its own
// status writes do not); Secret changes wake the members that use them.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.ManagerNamespace == "" {
		return errors.New("membercluster: ManagerNamespace is empty: set it to nest-manager's namespace, where kubeconfig Secrets live")
	}
	secrets, err := cache.New(mgr.GetConfig(), cache.Options{
		HTTPClient: mgr.GetHTTPClient(), Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper(),
		DefaultNamespaces: map[string]cache.Config{r.ManagerNamespace: {}},
		DefaultTransform:  cache.TransformStripManagedFields(),
	})
	if err != nil {
		return fmt.Errorf("membercluster: cache of Secrets in %s: %w", r.ManagerNamespace, err)
	}
	if err := mgr.Add(secrets); err != nil {
		return err
	}
	r.secrets = secrets
	workers := r.Workers
	if workers <= 0 {
		workers = 4
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&nestv1.MemberCluster{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WatchesRawSource(source.Kind(secrets, &corev1.Secret{}, handler.TypedEnqueueRequestsFromMapFunc(r.membersOf))).
		WithOptions(controller.Options{MaxConcurrentReconciles: workers}).
		Named("membercluster").
		Complete(r)
}
