package syncer

import (
	"context"
	"errors"
	"net/http"
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

// Sync metrics per kind syncer, served on the syncer's /metrics beside
// client-go's workqueue_* family, whose "name" label is the same kind.
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

// metricsHandler serves every registered metric in Prometheus' text format.
func metricsHandler() http.Handler { return legacyregistry.Handler() }

// Retry bounds of every work queue of the syncer, virtual-kubelet's pod
// queues included: a failed key is retried after 5 ms, then twice as long
// each time, never more than maxRetryDelay apart, so a host API server that
// refused writes for a while is caught up with soon after it recovers.
const (
	minRetryDelay = 5 * time.Millisecond
	maxRetryDelay = 30 * time.Second
)

// queueLimiter replaces client-go's default controller rate limiter (10
// items per second overall after a burst of 100), which would hold a burst of
// tenant objects to 10 per second. Failed items still back off per item.
func queueLimiter[T comparable]() workqueue.TypedRateLimiter[T] {
	return workqueue.NewTypedMaxOfRateLimiter[T](
		workqueue.NewTypedItemExponentialFailureRateLimiter[T](minRetryDelay, maxRetryDelay),
		&workqueue.TypedBucketRateLimiter[T]{Limiter: rate.NewLimiter(rate.Limit(1000), 2000)},
	)
}

// defaultResyncPeriod is how often a kind syncer puts every key it knows back
// on its queue, to catch what no event reported: a change made while the
// syncer was down and missed by the first list, or a host copy edited by
// hand.
const defaultResyncPeriod = 5 * time.Minute

// syncFunc brings the host in line with the tenant for one key. A positive
// requeueAfter asks for the key again after that long (a token that will be
// due); an error is retried with backoff unless it is terminal.
type syncFunc func(ctx context.Context, key string) (requeueAfter time.Duration, err error)

// kindSyncer syncs one kind of tenant object: informer events put keys on
// its own rate-limited work queue, workers sync one key at a time, a failed
// key is retried with per-key backoff until it succeeds or its object is
// gone, and a periodic resync puts every key back.
type kindSyncer struct {
	kind    string
	workers int
	queue   workqueue.TypedRateLimitingInterface[string]
	sync    syncFunc
	// keys lists every key the kind knows on either side, for the resync.
	keys   func() []string
	resync time.Duration
}

// newKindSyncer makes the syncer of one kind; kind names its queue in
// metrics and logs.
func newKindSyncer(kind string, workers int, sync syncFunc, keys func() []string) *kindSyncer {
	return &kindSyncer{
		kind: kind, workers: workers, sync: sync, keys: keys, resync: defaultResyncPeriod,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(queueLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: kind}),
	}
}

// add puts a key on the queue; a key already waiting is not added twice.
func (k *kindSyncer) add(key string) { k.queue.Add(key) }

// run syncs until ctx ends. Call it once the informers it reads have synced.
func (k *kindSyncer) run(ctx context.Context) {
	defer k.queue.ShutDown()
	for range k.workers {
		go wait.UntilWithContext(ctx, k.work, time.Second)
	}
	wait.JitterUntilWithContext(ctx, k.resyncAll, k.resync, 0.1, true)
}

func (k *kindSyncer) resyncAll(context.Context) {
	for _, key := range k.keys() {
		k.queue.Add(key)
	}
}

func (k *kindSyncer) work(ctx context.Context) {
	for k.processNext(ctx) {
	}
}

// processNext syncs the next key and decides its fate: forgotten on
// success, back on the queue after requeueAfter or, on error, after its
// backoff. A terminal error is logged and not retried until the key's next
// event or resync.
func (k *kindSyncer) processNext(ctx context.Context) bool {
	key, quit := k.queue.Get()
	if quit {
		return false
	}
	defer k.queue.Done(key)
	start := time.Now()
	after, err := k.sync(ctx, key)
	syncDuration.WithLabelValues(k.kind).Observe(time.Since(start).Seconds())
	if err == nil {
		k.queue.Forget(key)
		if after > 0 {
			k.queue.AddAfter(key, after)
		}
		return true
	}
	syncErrors.WithLabelValues(k.kind).Inc()
	log := klog.FromContext(ctx).WithValues("kind", k.kind, "key", key)
	if isTerminal(err) {
		log.Error(err, "Sync failed; not retrying until the object changes")
		k.queue.Forget(key)
		return true
	}
	log.V(2).Info("Sync failed; retrying", "err", err.Error(), "retries", k.queue.NumRequeues(key))
	k.queue.AddRateLimited(key)
	return true
}

// terminal marks err as one that retrying cannot fix, such as a host
// object under the copy's name that is not the copy. It is
// controller-runtime's reconcile.TerminalError, so the syncer and
// nest-manager mean the same by it.
func terminal(err error) error { return reconcile.TerminalError(err) }

func isTerminal(err error) bool { return errors.Is(err, reconcile.TerminalError(nil)) }
