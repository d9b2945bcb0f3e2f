package framework

import (
	"context"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// APIProber writes a ConfigMap through a tenant's API and reads it back,
// once every period, the way a client that keeps working would, and counts
// what failed. Its calls do not retry: a refused connection, a timeout or an
// error answer is a failed call.
type APIProber struct {
	cs        kubernetes.Interface
	namespace string
	period    time.Duration

	mu sync.Mutex
	// calls and failed count calls; written names the ConfigMaps whose
	// create succeeded, which must all survive.
	calls, failed int
	written       []string
	lastErr       error
	lastFailed    bool
	// errors counts failed calls by their error, probe names blanked.
	errors map[string]int
	// lastOK and longestGap measure the longest time without a successful call.
	lastOK, started time.Time
	longestGap      time.Duration
	stop            context.CancelFunc
	done            chan struct{}
}

// ProbeTimeout bounds one call of an APIProber: a call that takes longer
// failed.
const ProbeTimeout = 5 * time.Second

// StartAPIProber starts probing the tenant at cfg every period, in namespace
// (which must exist), until Stop.
func StartAPIProber(ctx context.Context, cfg *rest.Config, namespace string, period time.Duration) (*APIProber, error) {
	cfg = rest.CopyConfig(cfg)
	// One call's wait is bounded by the period's order, not client-go's
	// default of none: a call that hangs is a failed call.
	cfg.Timeout = ProbeTimeout
	cfg.QPS, cfg.Burst = 100, 100
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	ctx, stop := context.WithCancel(ctx)
	p := &APIProber{cs: cs, namespace: namespace, period: period, stop: stop, done: make(chan struct{}), started: time.Now(), lastOK: time.Now()}
	go p.run(ctx)
	return p, nil
}

func (p *APIProber) run(ctx context.Context) {
	defer close(p.done)
	t := time.NewTicker(p.period)
	defer t.Stop()
	// Names of this prober's own: another prober on the same tenant
	// (an earlier case's) left its ConfigMaps, and a create under one of
	// their names fails as "already exists", which is no outage.
	run := strconv.FormatInt(p.started.UnixNano(), 36)
	for i := 0; ; i++ {
		p.probe(ctx, fmt.Sprintf("probe-%s-%05d", run, i))
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// probe creates the ConfigMap name and reads it back: two calls.
func (p *APIProber) probe(ctx context.Context, name string) {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"at": time.Now().Format(time.RFC3339Nano)}}
	_, err := p.cs.CoreV1().ConfigMaps(p.namespace).Create(ctx, cm, metav1.CreateOptions{})
	if ctx.Err() != nil {
		return
	}
	p.record(err, name)
	if err != nil {
		return
	}
	_, err = p.cs.CoreV1().ConfigMaps(p.namespace).Get(ctx, name, metav1.GetOptions{})
	if ctx.Err() != nil {
		return
	}
	p.record(err, "")
}

func (p *APIProber) record(err error, written string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls++
	now := time.Now()
	p.lastFailed = err != nil
	if err != nil {
		p.failed++
		p.lastErr = err
		if p.errors == nil {
			p.errors = map[string]int{}
		}
		p.errors[probeName.ReplaceAllString(err.Error(), "probe-N")]++
		return
	}
	if gap := now.Sub(p.lastOK); gap > p.longestGap {
		p.longestGap = gap
	}
	p.lastOK = now
	if written != "" {
		p.written = append(p.written, written)
	}
}

// ProbeResult is what an APIProber saw.
type ProbeResult struct {
	Calls, Failed int
	// LongestGap is the longest time between two successful calls.
	LongestGap time.Duration
	// Written are the ConfigMaps it created, in Namespace.
	Written   []string
	Namespace string
	// LastErr is the last failed call's error.
	LastErr error
	// Errors counts the failed calls by error, probe names written
	// probe-N.
	Errors map[string]int
}

// FailedPercent is the share of failed calls, in percent.
func (r ProbeResult) FailedPercent() float64 {
	if r.Calls == 0 {
		return 100
	}
	return 100 * float64(r.Failed) / float64(r.Calls)
}

// String is the result as the notes report it.
func (r ProbeResult) String() string {
	s := fmt.Sprintf("%d calls, %d failed (%.2f%%), longest gap %s, last error %v", r.Calls, r.Failed, r.FailedPercent(), r.LongestGap.Round(time.Millisecond), r.LastErr)
	if top := TopErrors(r.Errors, 3); top != "" {
		s += "; " + top
	}
	return s
}

// TopErrors lists the n commonest errors of counts (error text to count),
// commonest first, as "5x text; 2x text; 3 more kinds"; "" when counts is
// empty.
func TopErrors(counts map[string]int, n int) string {
	kinds := slices.Collect(maps.Keys(counts))
	slices.SortFunc(kinds, func(a, b string) int {
		if d := counts[b] - counts[a]; d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	var parts []string
	for i, k := range kinds {
		if i == n {
			parts = append(parts, fmt.Sprintf("%d more kinds", len(kinds)-n))
			break
		}
		parts = append(parts, fmt.Sprintf("%dx %s", counts[k], k))
	}
	return strings.Join(parts, "; ")
}

// probeName matches the prober's ConfigMap names in errors.
var probeName = regexp.MustCompile(`probe-[0-9a-z]+-\d{5}`)

// Stop ends the probing and returns what it saw.
func (p *APIProber) Stop() ProbeResult {
	p.stop()
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	if gap := time.Since(p.lastOK); gap > p.longestGap && p.lastFailed {
		p.longestGap = gap
	}
	return ProbeResult{Calls: p.calls, Failed: p.failed, LongestGap: p.longestGap, Written: append([]string(nil), p.written...), Namespace: p.namespace,
		LastErr: p.lastErr, Errors: maps.Clone(p.errors)}
}

// LostWrites lists the ConfigMaps the prober created that the tenant cs
// no longer has. One List, not a Get each: a prober writes thousands, and
// client-go's default rate limit would take minutes over them.
func (r ProbeResult) LostWrites(ctx context.Context, cs kubernetes.Interface) ([]string, error) {
	list, err := cs.CoreV1().ConfigMaps(r.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	have := map[string]bool{}
	for _, cm := range list.Items {
		have[cm.Name] = true
	}
	var lost []string
	for _, name := range r.Written {
		if !have[name] {
			lost = append(lost, name)
		}
	}
	return lost, nil
}

// Calls is how many calls the prober made so far.
func (p *APIProber) Calls() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls
}
