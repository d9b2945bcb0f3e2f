// Package memberusage is the controller that records what tenant pods use
// in member clusters, for billing. Every 30 seconds, for each
// VirtualCluster with Ready grants, it lists the pods of each grant's
// member namespace with nest-syncer's own credential from the members
// Secret (never the member's admin kubeconfig: usage needs no more than
// the tenant's namespace), and keeps one record per member pod (tenant
// pod, requests, start and end) in the host ConfigMap <vc>-member-usage.
// It sums them into status.memberUsage of the VirtualCluster, a field no
// other controller writes, and into Prometheus counters on nest-manager's
// metrics endpoint.
package memberusage

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/controller/membergrant"
	"github.com/nestdev/nest/internal/controlplane"
	"github.com/nestdev/nest/internal/kube"
	"github.com/nestdev/nest/internal/syncer/contract"
)

// RecordsKey is the key of the usage ConfigMap's data: a Book, as JSON.
const RecordsKey = "records.json"

// ConfigMapName is the host ConfigMap, in the VirtualCluster's namespace,
// that holds the usage records of the VirtualCluster vc.
func ConfigMapName(vc string) string {
	return controlplane.Names{VirtualCluster: vc}.MemberUsageConfigMap()
}

// Defaults of the Reconciler.
const (
	// DefaultInterval is how often each VirtualCluster's member pods are
	// listed: a running pod's usage is at most this stale, and a pod that
	// ends between two passes and disappears is counted to the last one.
	DefaultInterval = 30 * time.Second
	// DefaultMaxRecords bounds the finished records kept in the ConfigMap
	// (about 300 bytes each, far below a ConfigMap's 1 MiB).
	DefaultMaxRecords = 1000
	// DefaultRequestTimeout bounds each request to a member.
	DefaultRequestTimeout = 10 * time.Second
)

// Reconciler records the member usage of one VirtualCluster.
type Reconciler struct {
	client.Client
	// APIReader reads the members Secret and the usage ConfigMap from the
	// API server: a stale token would fail, and a stale book would count
	// a pass twice.
	APIReader client.Reader
	// Interval, MaxRecords and RequestTimeout default to DefaultInterval,
	// DefaultMaxRecords and DefaultRequestTimeout.
	Interval       time.Duration
	MaxRecords     int
	RequestTimeout time.Duration
	// Clock tells the time running pods are counted to; the real clock
	// when nil.
	Clock clock.PassiveClock
	// Workers is how many VirtualClusters are looked at once; default 2.
	Workers int
}

// +kubebuilder:rbac:groups=nest.dev,resources=virtualclusters,verbs=get;list;watch
// +kubebuilder:rbac:groups=nest.dev,resources=virtualclusters/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;create;update;patch

// usageState carries one reconcile's findings between phases.
type usageState struct {
	vc  *nestv1.VirtualCluster
	now time.Time
	// placements are the Ready grants of the members Secret.
	placements []contract.MemberPlacement
	// cm is the usage ConfigMap as read; nil when there is none.
	cm *corev1.ConfigMap
	// before is the book as read, after the book to write.
	before, after Book
	// listed are, per member whose pods were listed, their records.
	listed map[string][]Record
	// messages are, per member whose pods could not be listed, why.
	messages map[string]string
	// written is whether after is stored, so the status and metrics may
	// show it.
	written bool
}

// phase is one step of a reconcile. A member that cannot be listed goes to
// its status entry; only host errors are returned.
type phase func(ctx context.Context, s *usageState) error

// Reconcile lists the member pods of one VirtualCluster, records them and
// writes the summary to status.memberUsage.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, err error) {
	vc := &nestv1.VirtualCluster{}
	if err := r.Get(ctx, req.NamespacedName, vc); err != nil {
		if apierrors.IsNotFound(err) {
			forget(req.String())
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !vc.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil // the ConfigMap goes with it (owner reference)
	}
	s := &usageState{vc: vc, now: r.now().UTC(), listed: map[string][]Record{}, messages: map[string]string{}}
	for _, p := range []phase{r.readSecret, r.readBook} {
		if err := p(ctx, s); err != nil {
			return ctrl.Result{}, err
		}
	}
	if len(s.placements) == 0 && s.cm == nil {
		return ctrl.Result{}, nil // nothing granted, nothing recorded: the Secret's watch wakes us
	}
	defer func() {
		if err == nil && s.written {
			err = r.patchStatus(ctx, s)
		}
	}()
	for _, p := range []phase{r.listPods, r.record, r.writeBook, r.countMetrics} {
		if err := p(ctx, s); err != nil {
			return ctrl.Result{}, err
		}
	}
	return ctrl.Result{RequeueAfter: r.interval()}, nil
}

// readSecret reads the placements of the members Secret. One that does
// not parse lists nothing: the grant controller rewrites it.
func (r *Reconciler) readSecret(ctx context.Context, s *usageState) error {
	secret := &corev1.Secret{}
	key := client.ObjectKey{Namespace: s.vc.Namespace, Name: contract.MembersSecret(s.vc.Name)}
	switch err := r.APIReader.Get(ctx, key, secret); {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("get members Secret %s: %w", key, err)
	}
	p, err := contract.ParseMemberPlacements(secret.Data[contract.MembersKey])
	if err != nil {
		ctrl.LoggerFrom(ctx).Info("Members Secret does not parse: no member pods listed until the grant controller rewrites it",
			"secret", klog.KObj(secret), "error", err.Error())
		return nil
	}
	s.placements = p.Members
	return nil
}

// readBook reads the usage ConfigMap. A book that does not parse is an
// error, not an empty book: writing over it would lose the records.
func (r *Reconciler) readBook(ctx context.Context, s *usageState) error {
	cm := &corev1.ConfigMap{}
	key := configMapKey(s.vc)
	switch err := r.APIReader.Get(ctx, key, cm); {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("get usage ConfigMap %s: %w", key, err)
	}
	b, err := parseBook(cm.Data[RecordsKey])
	if err != nil {
		return reconcile.TerminalError(fmt.Errorf("usage ConfigMap %s: %w: fix or delete the key (deleting it loses the usage recorded)", key, err))
	}
	s.cm, s.before = cm, b
	return nil
}

// listPods lists each Ready grant's member namespace with the grant's own
// credential.
func (r *Reconciler) listPods(ctx context.Context, s *usageState) error {
	for _, p := range s.placements {
		pods, err := r.memberPods(ctx, p)
		if err != nil {
			s.messages[p.Name] = err.Error()
			ctrl.LoggerFrom(ctx).Info("Cannot list the pods of a member grant: its usage is not updated",
				"virtualCluster", klog.KObj(s.vc), "member", p.Name, "namespace", p.Namespace, "error", err.Error())
			continue
		}
		records := []Record{}
		for i := range pods {
			if rec, ok := podRecord(p.Name, &pods[i], s.now); ok {
				records = append(records, rec)
			}
		}
		s.listed[p.Name] = records
	}
	return nil
}

// memberPods lists the pods of p's namespace with p's token, CA and server
// name: nest-syncer's credential, which reaches that namespace only.
func (r *Reconciler) memberPods(ctx context.Context, p contract.MemberPlacement) ([]corev1.Pod, error) {
	cs, err := kubernetes.NewForConfig(placementConfig(p, r.requestTimeout()))
	if err != nil {
		return nil, fmt.Errorf("member %s: server %q of the members Secret: %w", p.Name, p.Server, err)
	}
	list, err := cs.CoreV1().Pods(p.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		hint := ""
		if apierrors.IsUnauthorized(err) || apierrors.IsForbidden(err) {
			hint = ": the grant's token in the members Secret was refused; nest-manager's grant controller renews it"
		}
		return nil, fmt.Errorf("list pods of namespace %s in the member %s at %s: %w%s", p.Namespace, p.Name, p.Server, err, hint)
	}
	return list.Items, nil
}

// placementConfig is a client config from a placement of the members
// Secret.
func placementConfig(p contract.MemberPlacement, timeout time.Duration) *rest.Config {
	return &rest.Config{
		Host:            p.Server,
		BearerToken:     p.Token,
		TLSClientConfig: rest.TLSClientConfig{CAData: p.CAData, ServerName: p.TLSServerName},
		Timeout:         timeout,
		UserAgent:       "nest-manager/memberusage",
	}
}

// record merges the listing into the book and bounds it.
func (r *Reconciler) record(_ context.Context, s *usageState) error {
	s.after = bound(merge(s.before, s.listed), r.maxRecords())
	return nil
}

// writeBook stores the book in the usage ConfigMap, owned by the
// VirtualCluster and labelled so the manager's cache may hold it.
func (r *Reconciler) writeBook(ctx context.Context, s *usageState) error {
	data, err := s.after.marshal()
	if err != nil {
		return fmt.Errorf("usage records of %s: %w", klog.KObj(s.vc), err)
	}
	cm := s.cm
	if cm == nil {
		key := configMapKey(s.vc)
		cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
	}
	before := cm.DeepCopy()
	if cm.Labels == nil {
		cm.Labels = map[string]string{}
	}
	maps.Copy(cm.Labels, configMapLabels(s.vc))
	if err := controllerutil.SetOwnerReference(s.vc, cm, r.Scheme()); err != nil {
		return fmt.Errorf("usage ConfigMap %s: %w", klog.KObj(cm), err)
	}
	cm.Data = map[string]string{RecordsKey: data}
	switch {
	case s.cm == nil:
		if err := r.Create(ctx, cm); err != nil {
			return fmt.Errorf("create usage ConfigMap %s: %w", klog.KObj(cm), err)
		}
	case !equality.Semantic.DeepEqual(before, cm):
		// Update, not patch: it fails on a concurrent write (resourceVersion),
		// so a book is never written from a stale read.
		if err := r.Update(ctx, cm); err != nil {
			return fmt.Errorf("update usage ConfigMap %s: %w", klog.KObj(cm), err)
		}
	}
	s.written = true
	return nil
}

// configMapLabels are the usage ConfigMap's labels: the manager's cache
// holds only host objects labelled controlplane.LabelVirtualCluster
// (virtualcluster.CacheOptions).
func configMapLabels(vc *nestv1.VirtualCluster) map[string]string {
	return map[string]string{membergrant.LabelManagedBy: membergrant.ManagedByValue, controlplane.LabelVirtualCluster: vc.Name}
}

func configMapKey(vc *nestv1.VirtualCluster) client.ObjectKey {
	return client.ObjectKey{Namespace: vc.Namespace, Name: ConfigMapName(vc.Name)}
}

// countMetrics adds the usage the pass recorded to the counters, and sets
// the running gauge.
func (r *Reconciler) countMetrics(_ context.Context, s *usageState) error {
	observe(client.ObjectKeyFromObject(s.vc).String(), summarize(s.before), summarize(s.after))
	return nil
}

// patchStatus writes status.memberUsage, and only that field, with a merge
// patch: status.members belongs to the grant controller, and the phase and
// conditions to the VirtualCluster controller.
func (r *Reconciler) patchStatus(ctx context.Context, s *usageState) error {
	listedAt := map[string]time.Time{}
	for m := range s.listed {
		listedAt[m] = s.now
	}
	st := usageStatus(summarize(s.after), s.messages, listedAt, s.vc.Status.MemberUsage)
	if equality.Semantic.DeepEqual(st, s.vc.Status.MemberUsage) {
		return nil
	}
	return kube.PatchStatusField(ctx, r.Client, s.vc, "memberUsage", st)
}

func (r *Reconciler) now() time.Time {
	if r.Clock == nil {
		return time.Now()
	}
	return r.Clock.Now()
}

func (r *Reconciler) interval() time.Duration { return cmp.Or(r.Interval, DefaultInterval) }

func (r *Reconciler) maxRecords() int { return cmp.Or(r.MaxRecords, DefaultMaxRecords) }

func (r *Reconciler) requestTimeout() time.Duration {
	return cmp.Or(r.RequestTimeout, DefaultRequestTimeout)
}

// secretOwner maps a members Secret to its VirtualCluster, so a grant that
// turns Ready is listed at once. Other Secrets of the cache map to nothing.
func secretOwner(_ context.Context, obj client.Object) []reconcile.Request {
	l := obj.GetLabels()
	vc := l[controlplane.LabelVirtualCluster]
	if l[membergrant.LabelManagedBy] != membergrant.ManagedByValue || vc == "" || obj.GetName() != contract.MembersSecret(vc) {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: obj.GetNamespace(), Name: vc}}}
}

// SetupWithManager registers the controller. It watches VirtualClusters
// (created; its own status writes do not wake it) and the members Secrets;
// each VirtualCluster with grants or records is then looked at every
// Interval.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.APIReader == nil {
		return errors.New("memberusage: APIReader is nil: set it to the manager's API reader")
	}
	if r.MaxRecords < 0 {
		return fmt.Errorf("memberusage: MaxRecords %d is negative: set it to 0 for the default %d, or more", r.MaxRecords, DefaultMaxRecords)
	}
	workers := r.Workers
	if workers <= 0 {
		workers = 2
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&nestv1.VirtualCluster{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(secretOwner)).
		WithOptions(controller.Options{MaxConcurrentReconciles: workers}).
		Named("memberusage").
		Complete(r)
}
