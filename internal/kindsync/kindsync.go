// Package kindsync is the work loop shared by Nest's syncers: one
// rate-limited client-go work queue per kind of object, workers that sync one
// key at a time, per-key backoff for a failed key until it succeeds or is
// terminal, a periodic resync of every known key, and the sync metrics.
//
// nest-syncer runs one Syncer per tenant kind it copies (vcluster's one
// syncer per kind); the node network agent runs one for the pods of its
// node. Informer event handlers call Add; Run drives the workers.
package kindsync

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	// Registers client-go's work queue metrics (depth, adds, latency, work
	// duration, retries) for every named queue, virtual-kubelet's included,
	// as kube-controller-manager does.
	_ "k8s.io/component-base/metrics/prometheus/workqueue"
)

// Sync metrics per kind, served beside client-go's workqueue_* family, whose
// "name" label is the same kind. The subsystem keeps the name nest-syncer
// first served them under, so dashboards keep working.
var (
	syncDuration = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Subsystem: "nest_syncer", Name: "sync_duration_seconds",
		Help:    "How long one sync of one key took, by kind, failed syncs included.",
		Buckets: metrics.ExponentialBuckets(0.001, 2, 15),
	}, []string{"kind"})
	syncErrors = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem: "nest_syncer", Name: "sync_errors_total",
		Help: "Syncs that failed, by kind; each is retried with backoff unless it cannot succeed.",
	}, []string{"kind"})
)

func init() {
	legacyregistry.MustRegister(syncDuration, syncErrors)
}

// SyncMetrics are the sync duration and error metrics, for a registry of
// its own beside the legacy one (nest-syncer's node metrics).
func SyncMetrics() []metrics.Registerable {
	return []metrics.Registerable{syncDuration, syncErrors}
}

// MetricsHandler serves every registered metric in Prometheus' text format:
// the sync metrics, the work queue metrics and anything else registered in
// component-base's legacy registry.
func MetricsHandler() http.Handler { return legacyregistry.Handler() }

// Retry bounds of every work queue built with Limiter: a failed key is
// retried after 5 ms, then twice as long each time, never more than
// MaxRetryDelay apart, so an API server that refused writes for a while is
// caught up with soon after it recovers.
const (
	MinRetryDelay = 5 * time.Millisecond
	MaxRetryDelay = 30 * time.Second
)

// Limiter replaces client-go's default controller rate limiter (10 items per
// second overall after a burst of 100), which would hold a burst of objects
// to 10 per second. Failed items still back off per item, between
// MinRetryDelay and MaxRetryDelay.
func Limiter[T comparable]() workqueue.TypedRateLimiter[T] {
	return workqueue.NewTypedMaxOfRateLimiter[T](
		workqueue.NewTypedItemExponentialFailureRateLimiter[T](MinRetryDelay, MaxRetryDelay),
		&workqueue.TypedBucketRateLimiter[T]{Limiter: rate.NewLimiter(rate.Limit(1000), 2000)},
	)
}

// DefaultResyncPeriod is how often a Syncer puts every key it knows back on
// its queue, to catch what no event reported: a change made while the
// process was down and missed by the first list, or an object edited by hand.
const DefaultResyncPeriod = 5 * time.Minute

// Func brings one key in line. A positive requeueAfter asks for the key
// again after that long (a token that will be due); an error is retried with
// backoff unless it is Terminal.
type Func func(ctx context.Context, key string) (requeueAfter time.Duration, err error)

// Syncer syncs one kind of object: event handlers put keys on its own
// rate-limited work queue, workers sync one key at a time, a failed key is
// retried with per-key backoff until it succeeds or its object is gone, and
// a periodic resync puts every key back.
type Syncer struct {
	// Kind names the queue in metrics and logs.
	Kind string
	// Queue is the work queue; callers use it to add a key later
	// (AddAfter) or to drain it in tests.
	Queue   workqueue.TypedRateLimitingInterface[string]
	workers int
	sync    Func
	// keys lists every key the kind knows, for the resync; nil for none.
	keys func() []string
	// Resync is how often every key is put back (DefaultResyncPeriod).
	Resync time.Duration
}

// New makes the syncer of one kind with workers workers; kind names its
// queue in metrics and logs, and keys (may be nil) lists what the resync
// puts back.
func New(kind string, workers int, sync Func, keys func() []string) *Syncer {
	return &Syncer{
		Kind: kind, workers: workers, sync: sync, keys: keys, Resync: DefaultResyncPeriod,
		Queue: workqueue.NewTypedRateLimitingQueueWithConfig(Limiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: kind}),
	}
}

// Add puts a key on the queue; a key already waiting is not added twice.
func (k *Syncer) Add(key string) { k.Queue.Add(key) }

// Run syncs until ctx ends, then shuts the queue down and returns once its
// workers have finished the syncs under way, so nothing it started writes
// after it returned. Call it once the informers the sync function reads
// have synced.
func (k *Syncer) Run(ctx context.Context) {
	var workers sync.WaitGroup
	for range k.workers {
		workers.Go(func() { wait.UntilWithContext(ctx, k.work, time.Second) })
	}
	wait.JitterUntilWithContext(ctx, k.resyncAll, k.Resync, 0.1, true)
	k.Queue.ShutDown()
	workers.Wait()
}

// SyncNow syncs key at once in the caller's goroutine, outside the queue
// and its metrics: for a caller that must have one pass done before it
// goes on (a member's network before its node is Ready).
func (k *Syncer) SyncNow(ctx context.Context, key string) (time.Duration, error) {
	return k.sync(ctx, key)
}

func (k *Syncer) resyncAll(context.Context) {
	if k.keys == nil {
		return
	}
	for _, key := range k.keys() {
		k.Queue.Add(key)
	}
}

func (k *Syncer) work(ctx context.Context) {
	for k.processNext(ctx) {
	}
}

// processNext syncs the next key and decides its fate: forgotten on
// success, back on the queue after requeueAfter or, on error, after its
// backoff. A terminal error is logged and not retried until the key's next
// event or resync.
func (k *Syncer) processNext(ctx context.Context) bool {
	key, quit := k.Queue.Get()
	if quit {
		return false
	}
	defer k.Queue.Done(key)
	start := time.Now()
	after, err := k.sync(ctx, key)
	syncDuration.WithLabelValues(k.Kind).Observe(time.Since(start).Seconds())
	if err == nil {
		k.Queue.Forget(key)
		if after > 0 {
			k.Queue.AddAfter(key, after)
		}
		return true
	}
	syncErrors.WithLabelValues(k.Kind).Inc()
	log := klog.FromContext(ctx).WithValues("kind", k.Kind, "key", key)
	if IsTerminal(err) {
		log.Error(err, "Sync failed; not retrying until the object changes")
		k.Queue.Forget(key)
		return true
	}
	log.V(2).Info("Sync failed; retrying", "err", err.Error(), "retries", k.Queue.NumRequeues(key))
	k.Queue.AddRateLimited(key)
	return true
}

// Terminal marks err as one that retrying cannot fix, such as a host
// object under the copy's name that is not the copy. It is
// controller-runtime's reconcile.TerminalError, so the syncers and
// nest-manager mean the same by it.
func Terminal(err error) error { return reconcile.TerminalError(err) }

// IsTerminal reports whether err, or an error it wraps, was made by Terminal.
func IsTerminal(err error) bool { return errors.Is(err, reconcile.TerminalError(nil)) }
