package framework

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// LoadResult is what a RunLoad saw: each call's latency by verb, and the
// failed calls by error.
type LoadResult struct {
	// Latencies of the successful calls by verb ("list", "watch" to its
	// first answer, "create", "delete").
	Latencies map[string][]time.Duration
	// Calls and Failed count every call.
	Calls, Failed int
	// Errors counts the failed calls by error, numbers written N.
	Errors map[string]int
}

// Percentile is the p-th percentile (0 to 100) of verb's latencies, 0 with
// none.
func (r LoadResult) Percentile(verb string, p float64) time.Duration {
	l := slices.Clone(r.Latencies[verb])
	if len(l) == 0 {
		return 0
	}
	slices.Sort(l)
	return l[min(len(l)-1, int(float64(len(l))*p/100))]
}

// String is the result as the notes report it: p50 and p99 per verb, then
// the failures by kind.
func (r LoadResult) String() string {
	s := fmt.Sprintf("%d calls, %d failed", r.Calls, r.Failed)
	for _, verb := range []string{"list", "watch", "create", "delete"} {
		if n := len(r.Latencies[verb]); n > 0 {
			s += fmt.Sprintf("; %s %d p50 %s p99 %s", verb, n, r.Percentile(verb, 50).Round(time.Millisecond), r.Percentile(verb, 99).Round(time.Millisecond))
		}
	}
	if top := TopErrors(r.Errors, 3); top != "" {
		s += "; " + top
	}
	return s
}

// loadNumbers are the numbers in an error's text, which differ between
// errors of one kind.
var loadNumbers = regexp.MustCompile(`[0-9]+`)

// RunLoad runs clients goroutines against the API server cfg names for
// d, each with its own client and no client-side rate limit, in turn
// listing the ConfigMaps of namespace (50 at most), opening a watch on
// them until its first answer, and creating a ConfigMap then deleting it,
// as fast as answers come. It returns when d has passed and every client
// stopped.
func RunLoad(ctx context.Context, cfg *rest.Config, namespace string, clients int, d time.Duration) (LoadResult, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	res := LoadResult{Latencies: map[string][]time.Duration{}, Errors: map[string]int{}}
	var mu sync.Mutex
	record := func(verb string, start time.Time, err error) {
		took := time.Since(start)
		// A call the load's own end cut is not counted, unless it had
		// waited past cutCallBound by then: a server that stopped
		// answering near the end must show.
		if ctx.Err() != nil && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)) {
			if took < cutCallBound {
				return
			}
			err = fmt.Errorf("%s unanswered for %s when the load ended", verb, took.Round(time.Second))
		}
		mu.Lock()
		defer mu.Unlock()
		res.Calls++
		if err != nil {
			res.Failed++
			res.Errors[loadNumbers.ReplaceAllString(err.Error(), "N")]++
			return
		}
		res.Latencies[verb] = append(res.Latencies[verb], took)
	}
	var wg sync.WaitGroup
	for i := range clients {
		c := rest.CopyConfig(cfg)
		c.QPS, c.Burst = -1, 0
		c.Timeout = callTimeout
		// A connection of its own, as separate programs would have: a
		// config with a Proxy function gets a transport client-go does
		// not share. It names no proxy.
		c.Proxy = func(*http.Request) (*url.URL, error) { return nil, nil }
		cs, err := kubernetes.NewForConfig(c)
		if err != nil {
			return res, err
		}
		cms := cs.CoreV1().ConfigMaps(namespace)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ctx.Err() == nil; n++ {
				start := time.Now()
				_, err := cms.List(ctx, metav1.ListOptions{Limit: 50})
				record("list", start, err)

				start = time.Now()
				w, err := cms.Watch(ctx, metav1.ListOptions{TimeoutSeconds: ptrInt64(5)})
				if err == nil {
					// The first event: an ADDED for each existing object,
					// and the namespace holds one (kube-root-ca.crt).
					select {
					case _, ok := <-w.ResultChan():
						if !ok {
							err = errors.New("watch ended with no event")
						}
					case <-ctx.Done():
						err = ctx.Err()
					}
					w.Stop()
				}
				record("watch", start, err)

				name := fmt.Sprintf("load-%02d-%06d", i, n)
				start = time.Now()
				_, err = cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"n": fmt.Sprint(n)}}, metav1.CreateOptions{})
				record("create", start, err)
				if err == nil {
					start = time.Now()
					err = cms.Delete(context.WithoutCancel(ctx), name, metav1.DeleteOptions{})
					record("delete", start, err)
				}
			}
		}()
	}
	wg.Wait()
	return res, nil
}

func ptrInt64(v int64) *int64 { return &v }

// callTimeout bounds each call of RunLoad (rest.Config.Timeout), so a
// call no answer comes to fails rather than waits out the load.
const callTimeout = 30 * time.Second

// cutCallBound is how long a call cut by the load's end may have waited
// and still not count as failed.
const cutCallBound = 5 * time.Second
