// Package snapshotschedule is the controller that takes a VirtualCluster's
// snapshots on the schedule of its spec.snapshots: at each scheduled time,
// and for each new value of the nest.dev/snapshot-requested annotation, it
// takes one as `nest snapshot create` does (snapshot.Take: etcd's
// snapshot from a Ready member, the VirtualCluster and the PKI, sealed to
// the recipients of the schedule's Secret), pushes it to the schedule's
// OCI repository tagged auto-<scheduled time>-<hash of its name> (TagURL),
// and deletes the scheduled
// snapshots of the VirtualCluster past the newest spec.snapshots.keep. It
// writes status.snapshots and the SnapshotsSucceeding condition, and no
// other field, with server-side apply; a failure is a False condition and
// a warning event, retried every RetryInterval until the next scheduled
// time takes its place.
//
// The tag is the scheduled time, so a snapshot pushed just before a
// restart of nest-manager, whose status was not written, is pushed again
// under the same tag: never two snapshots of one time.
package snapshotschedule

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"strings"
	"time"

	"filippo.io/age"
	"github.com/robfig/cron/v3"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/kube"
	"github.com/nestdev/nest/internal/snapshot"
)

// FieldOwner is the field manager of the status fields this controller
// applies.
const FieldOwner = "nest-manager-snapshots"

// TagPrefix starts the tag of every snapshot a schedule takes; only tags
// with it are ever deleted.
const TagPrefix = "auto-"

// Reasons of the SnapshotsSucceeding condition.
const (
	ReasonWaiting         = "Waiting"
	ReasonSnapshotTaken   = "SnapshotTaken"
	ReasonInvalidSchedule = "InvalidSchedule"
	ReasonNoRecipients    = "NoRecipients"
	ReasonSnapshotFailed  = "SnapshotFailed"
	ReasonPruneFailed     = "PruneFailed"
	ReasonInvalidRequest  = "InvalidRequest"
)

// MaxRequestLength bounds a nest.dev/snapshot-requested value:
// status.snapshots.lastRequest's length.
const MaxRequestLength = 64

// DefaultTimeout bounds one snapshot, taken and pushed.
const DefaultTimeout = 30 * time.Minute

// RetryInterval is how soon a failed scheduled snapshot is tried again.
const RetryInterval = 30 * time.Second

// TakeFunc writes a snapshot of the VirtualCluster key to w, sealed to
// recipients (none: plaintext), with the tenant's volumes when
// includeVolumes says so, as snapshot.Take does.
type TakeFunc func(ctx context.Context, key types.NamespacedName, w io.Writer, recipients []age.Recipient, includeVolumes bool) (snapshot.Manifest, error)

// Reconciler takes the scheduled snapshots of one VirtualCluster.
type Reconciler struct {
	client.Client
	// APIReader reads the recipients Secret, which nest-manager's cache
	// does not hold.
	APIReader client.Reader
	Recorder  events.EventRecorder
	// Take takes a snapshot; SetupWithManager sets it to snapshot.Take
	// through the host API server (Config) when nil.
	Take TakeFunc
	// Config reaches the host API server, for port forwarding to etcd.
	Config *rest.Config
	// NestVersion goes in every snapshot's manifest.
	NestVersion string
	// TempDir stages each snapshot ("" is the system's).
	TempDir string
	// Clock is the real clock when nil.
	Clock clock.PassiveClock
	// Timeout bounds each snapshot; DefaultTimeout when zero.
	Timeout time.Duration
	// Workers is how many VirtualClusters' snapshots are taken at once;
	// default 2.
	Workers int
}

// +kubebuilder:rbac:groups=nest.dev,resources=virtualclusters,verbs=get;list;watch
// +kubebuilder:rbac:groups=nest.dev,resources=virtualclusters/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups="",resources=pods/portforward;pods/exec,verbs=create
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// scheduleState carries one reconcile's findings between phases.
type scheduleState struct {
	vc       *nestv1.VirtualCluster
	spec     *nestv1.SnapshotSchedule
	now      time.Time
	schedule cron.Schedule
	// due is the time of the snapshot to take now: the latest scheduled
	// time not taken, or now for a request; zero when none is due.
	due time.Time
	// scheduled says due is a scheduled time; requested is the request
	// (AnnotationSnapshotRequested) it also serves, if any.
	scheduled  bool
	requested  string
	recipients []age.Recipient
	status     nestv1.SnapshotsStatus
	cond       metav1.Condition
	requeue    time.Duration
}

type phase func(ctx context.Context, s *scheduleState) (done bool, err error)

// Reconcile takes the snapshot due, if one is, and prunes the repository.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	// From the API server, not the cache: a status this controller just
	// wrote, and a cache that has not seen it, would take a snapshot twice.
	vc := &nestv1.VirtualCluster{}
	if err := r.APIReader.Get(ctx, req.NamespacedName, vc); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if vc.Spec.Snapshots == nil || !vc.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, r.clear(ctx, vc)
	}
	s := &scheduleState{vc: vc, spec: vc.Spec.Snapshots, now: r.now().UTC(),
		cond: condition(metav1.ConditionTrue, ReasonWaiting, "no snapshot is due yet", vc.Generation)}
	if vc.Status.Snapshots != nil {
		s.status = *vc.Status.Snapshots.DeepCopy()
	}
	if old := meta.FindStatusCondition(vc.Status.Conditions, nestv1.ConditionSnapshotsSucceeding); old != nil && old.ObservedGeneration == vc.Generation {
		// Until this pass learns otherwise, the last outcome of this spec
		// stands; a changed spec starts from Waiting.
		s.cond = condition(old.Status, old.Reason, old.Message, vc.Generation)
	}
	var err error
	for _, p := range []phase{r.parseSchedule, r.findDue, r.readRecipients, r.takeAndPush, r.prune} {
		var done bool
		if done, err = p(ctx, s); done || err != nil {
			break
		}
	}
	if perr := r.applyStatus(ctx, s); perr != nil {
		return ctrl.Result{}, perr
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: s.requeue}, nil
}

// parseSchedule reads spec.snapshots.schedule as a CronJob's.
func (r *Reconciler) parseSchedule(_ context.Context, s *scheduleState) (bool, error) {
	sched, err := cron.ParseStandard(s.spec.Schedule)
	if err != nil {
		r.fail(s, ReasonInvalidSchedule, fmt.Sprintf("spec.snapshots.schedule %q: %v: use cron's five fields (minute hour day-of-month month day-of-week), such as \"0 3 * * *\", or @hourly, @daily", s.spec.Schedule, err))
		return true, nil
	}
	s.schedule = sched
	return false, nil
}

// findDue finds the latest scheduled time at or before now that is after
// the last one taken; with none taken yet, times count from when the
// schedule was first seen (status.snapshots.since, set now if unset). A
// request not yet served (AnnotationSnapshotRequested) is due now, and one
// snapshot serves both.
func (r *Reconciler) findDue(_ context.Context, s *scheduleState) (bool, error) {
	if s.status.Since == nil {
		s.status.Since = &metav1.Time{Time: s.now.Truncate(time.Second)}
	}
	from := s.status.Since.UTC()
	if s.status.LastScheduleTime != nil {
		from = s.status.LastScheduleTime.UTC()
	}
	// Missed times are taken once, as the latest: bounded, as a CronJob's.
	t := s.schedule.Next(from)
	for i := 0; i < 10000 && !t.IsZero() && !t.After(s.now); i++ {
		s.due, t = t, s.schedule.Next(t)
	}
	switch {
	case t.IsZero(): // a schedule with no next time: only requests
	case !t.After(s.now):
		// More missed times than the bound: the latest is taken once the
		// rest are passed over, a pass at a time.
		s.requeue = RetryInterval
	default:
		s.requeue = t.Sub(s.now) + time.Second
	}
	s.scheduled = !s.due.IsZero()
	if req := s.vc.Annotations[nestv1.AnnotationSnapshotRequested]; req != "" && req != s.status.LastRequest {
		if len(req) > MaxRequestLength {
			// status.snapshots.lastRequest could not record it, and it
			// would be served again and again.
			r.fail(s, ReasonInvalidRequest, fmt.Sprintf("annotation %s is %d characters, more than %d: set it to the time, as nest snapshot request does", nestv1.AnnotationSnapshotRequested, len(req), MaxRequestLength))
			return true, nil
		}
		s.requested = req
		if !s.scheduled {
			s.due = s.now.Truncate(time.Second)
		}
	}
	// A failed prune is tried again even when nothing is due.
	return s.due.IsZero() && s.cond.Reason != ReasonPruneFailed, nil
}

// readRecipients reads the age recipients of spec.snapshots'
// Secret; with insecurePlaintextKeys there are none.
func (r *Reconciler) readRecipients(ctx context.Context, s *scheduleState) (bool, error) {
	if s.due.IsZero() || s.spec.InsecurePlaintextKeys {
		return false, nil
	}
	if s.spec.RecipientSecretRef == nil {
		r.fail(s, ReasonNoRecipients, "spec.snapshots names no recipientSecretRef and does not set insecurePlaintextKeys")
		return true, nil
	}
	secret := &corev1.Secret{}
	key := types.NamespacedName{Namespace: s.vc.Namespace, Name: s.spec.RecipientSecretRef.Name}
	if err := r.APIReader.Get(ctx, key, secret); err != nil {
		r.fail(s, ReasonNoRecipients, fmt.Sprintf("spec.snapshots.recipientSecretRef: Secret %s: %v", key, err))
		return true, nil
	}
	rs, err := age.ParseRecipients(strings.NewReader(string(secret.Data[nestv1.RecipientsKey])))
	if err != nil {
		r.fail(s, ReasonNoRecipients, fmt.Sprintf("spec.snapshots.recipientSecretRef: key %q of Secret %s: %v: put age recipients (age1...), one a line", nestv1.RecipientsKey, key, err))
		return true, nil
	}
	s.recipients = rs
	return false, nil
}

// takeAndPush takes the due snapshot and pushes it, tagged with its
// scheduled time.
func (r *Reconciler) takeAndPush(ctx context.Context, s *scheduleState) (bool, error) {
	if s.due.IsZero() {
		return false, nil // only a prune to try again
	}
	url := TagURL(s.spec.To, client.ObjectKeyFromObject(s.vc), s.due)
	l, err := snapshot.ParseLocation(url, s.spec.PlainHTTP)
	if err != nil {
		r.fail(s, ReasonSnapshotFailed, fmt.Sprintf("spec.snapshots.to: %v", err))
		return true, nil
	}
	key := client.ObjectKeyFromObject(s.vc)
	start := r.now()
	// A hung member or registry fails this one, not every schedule.
	ctx, cancel := context.WithTimeout(ctx, cmp.Or(r.Timeout, DefaultTimeout))
	defer cancel()
	m, err := l.Save(ctx, r.TempDir, func(w io.Writer) (snapshot.Manifest, error) {
		return r.Take(ctx, key, w, s.recipients, s.spec.IncludeVolumes)
	})
	if err != nil {
		r.fail(s, ReasonSnapshotFailed, fmt.Sprintf("the snapshot scheduled for %s to %s: %v", s.due.Format(time.RFC3339), url, err))
		return true, nil
	}
	var size int64
	for _, p := range m.Parts {
		size += p.Size
	}
	if s.scheduled {
		s.status.LastScheduleTime = &metav1.Time{Time: s.due}
	}
	if s.requested != "" {
		s.status.LastRequest = s.requested
	}
	s.status.LastSnapshot = &nestv1.SnapshotRecord{URL: url, Time: metav1.Time{Time: m.Created}, Size: size, EtcdRevision: m.EtcdRevision}
	s.cond = condition(metav1.ConditionTrue, ReasonSnapshotTaken, fmt.Sprintf("%s taken at %s", url, m.Created.Format(time.RFC3339)), s.vc.Generation)
	r.Recorder.Eventf(s.vc, nil, corev1.EventTypeNormal, ReasonSnapshotTaken, "Snapshot", "%s: etcd revision %d, %d bytes, in %s",
		url, m.EtcdRevision, size, r.now().Sub(start).Round(100*time.Millisecond))
	ctrl.LoggerFrom(ctx).Info("Scheduled snapshot taken", "virtualCluster", klog.KObj(s.vc), "url", url, "etcdRevision", m.EtcdRevision)
	return false, nil
}

// prune deletes this VirtualCluster's scheduled snapshots in the
// repository past the newest keep, and counts those kept.
func (r *Reconciler) prune(ctx context.Context, s *scheduleState) (bool, error) {
	repo, err := snapshot.ParseRepository(s.spec.To, s.spec.PlainHTTP)
	if err != nil {
		r.fail(s, ReasonPruneFailed, fmt.Sprintf("spec.snapshots.to: %v", err))
		return true, nil
	}
	listed, err := snapshot.List(ctx, repo)
	if err != nil {
		r.fail(s, ReasonPruneFailed, err.Error())
		return true, nil
	}
	var ours []snapshot.Listed
	for _, x := range snapshot.OfVirtualCluster(listed, client.ObjectKeyFromObject(s.vc)) {
		if strings.HasPrefix(x.Tag, TagPrefix) {
			ours = append(ours, x)
		}
	}
	keep := int(cmp.Or(s.spec.Keep, nestv1.DefaultSnapshotKeep))
	for len(ours) > keep {
		old := ours[0]
		if err := snapshot.Delete(ctx, repo.Tag(old.Tag)); err != nil {
			r.fail(s, ReasonPruneFailed, err.Error())
			return true, nil
		}
		r.Recorder.Eventf(s.vc, nil, corev1.EventTypeNormal, "SnapshotDeleted", "Prune", "%s:%s: past the newest %d", repo, old.Tag, keep)
		ours = ours[1:]
	}
	s.status.Kept = int32(len(ours))
	for _, x := range ours {
		if s.status.LastSnapshot != nil && strings.HasSuffix(s.status.LastSnapshot.URL, ":"+x.Tag) {
			s.status.LastSnapshot.Digest = x.Digest
		}
	}
	if s.cond.Reason == ReasonPruneFailed {
		s.cond = condition(metav1.ConditionTrue, ReasonWaiting, fmt.Sprintf("the repository pruned to the newest %d", keep), s.vc.Generation)
	}
	return false, nil
}

// fail records a failure: a False condition, a warning event, and a retry.
func (r *Reconciler) fail(s *scheduleState, reason, message string) {
	s.cond = condition(metav1.ConditionFalse, reason, message, s.vc.Generation)
	r.Recorder.Eventf(s.vc, nil, corev1.EventTypeWarning, reason, "Snapshot", "%s", message)
	if reason != ReasonInvalidSchedule {
		s.requeue = RetryInterval
	}
}

// TagURL is the URL of the scheduled snapshot of the VirtualCluster key
// for time t in the repository to (oci://REGISTRY/REPOSITORY):
// to:auto-YYYYMMDDtHHMMSSz-HASH, HASH the first 8 hex digits of the
// SHA-256 of "namespace/name", so two VirtualClusters whose schedules
// share a repository never push over each other's snapshots.
func TagURL(to string, key types.NamespacedName, t time.Time) string {
	sum := sha256.Sum256([]byte(key.String()))
	return strings.TrimSuffix(to, "/") + ":" + TagPrefix + strings.ToLower(t.UTC().Format("20060102T150405Z")) + "-" + hex.EncodeToString(sum[:4])
}

func condition(status metav1.ConditionStatus, reason, message string, generation int64) metav1.Condition {
	return metav1.Condition{Type: nestv1.ConditionSnapshotsSucceeding, Status: status, Reason: reason, Message: message, ObservedGeneration: generation}
}

// applyStatus applies status.snapshots and the SnapshotsSucceeding
// condition, when either changed.
func (r *Reconciler) applyStatus(ctx context.Context, s *scheduleState) error {
	if kube.StampCondition(s.vc.Status.Conditions, &s.cond, r.now()) &&
		equality.Semantic.DeepEqual(s.status, ptr.Deref(s.vc.Status.Snapshots, nestv1.SnapshotsStatus{})) {
		return nil
	}
	status := map[string]any{"conditions": []any{s.cond}}
	if s.status != (nestv1.SnapshotsStatus{}) {
		status["snapshots"] = s.status
	}
	return kube.ApplyStatus(ctx, r.Client, s.vc, FieldOwner, status)
}

// clear removes what this controller applied, once spec.snapshots is gone.
func (r *Reconciler) clear(ctx context.Context, vc *nestv1.VirtualCluster) error {
	if meta.FindStatusCondition(vc.Status.Conditions, nestv1.ConditionSnapshotsSucceeding) == nil {
		return nil
	}
	return kube.ApplyStatus(ctx, r.Client, vc, FieldOwner, map[string]any{"conditions": []any{}})
}

func (r *Reconciler) now() time.Time {
	if r.Clock == nil {
		return time.Now()
	}
	return r.Clock.Now()
}

// SetupWithManager registers the controller. It watches VirtualClusters,
// every change: a condition another writer dropped is applied again.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.APIReader == nil {
		r.APIReader = mgr.GetAPIReader()
	}
	if r.Take == nil {
		direct, err := client.New(mgr.GetConfig(), client.Options{Scheme: mgr.GetScheme()})
		if err != nil {
			return err
		}
		cfg := cmp.Or(r.Config, mgr.GetConfig())
		r.Take = func(ctx context.Context, key types.NamespacedName, w io.Writer, rs []age.Recipient, includeVolumes bool) (snapshot.Manifest, error) {
			return snapshot.Take(ctx, direct, cfg, key, w, snapshot.TakeOptions{
				Recipients: rs, PlaintextKeys: len(rs) == 0, NestVersion: r.NestVersion, TempDir: r.TempDir,
				IncludeVolumes: includeVolumes,
			})
		}
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&nestv1.VirtualCluster{}).
		WithOptions(controller.Options{MaxConcurrentReconciles: cmp.Or(r.Workers, 2)}).
		Named("snapshotschedule").
		Complete(r)
}
