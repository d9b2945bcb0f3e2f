package dashboard

import (
	"bytes"
	"context"
	"fmt"
	"html/template"
	"io"
	"math"
	"net/http"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/controlplane"
	"github.com/nestdev/nest/internal/syncer/contract"
)

// Pages stay live through server-sent events: for each open page the server
// watches the objects the page shows, with the user's client, and on every
// change renders the page's live fragment again and pushes it. htmx's SSE
// extension swaps it into the page.

const (
	// settle gathers a burst of watch events into one render.
	settle = 150 * time.Millisecond
	// minRenderInterval spaces renders of one stream, so a namespace with
	// busy pods costs at most one render a second per open page.
	minRenderInterval = time.Second
	// keepAlive is how often an idle stream sends a comment, so proxies
	// keep the connection open.
	keepAlive = 15 * time.Second
	// DefaultMaxStreams bounds the open live streams of one server.
	DefaultMaxStreams = 256
)

// watchTarget is one list the stream watches.
type watchTarget struct {
	list client.ObjectList
	opts []client.ListOption
}

// watchState is what a stream's watches last reported: the newest error,
// cleared by the next event. A stream renders it as a warning.
type watchState struct {
	mu  sync.Mutex
	err error
}

func (w *watchState) set(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.err = err
}

func (w *watchState) get() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// watchChanges watches t until ctx ends and signals changed on every event.
// A watch the server ends is opened again; a failing one (no rights, API
// server down) is recorded in state, signalled so the page shows it, and
// retried with backoff.
func watchChanges(ctx context.Context, c client.WithWatch, t watchTarget, state *watchState, changed chan<- struct{}) {
	signal := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	backoff := wait.Backoff{Duration: time.Second, Factor: 2, Jitter: 0.2, Steps: math.MaxInt32, Cap: 30 * time.Second}
	for ctx.Err() == nil {
		w, err := c.Watch(ctx, t.list.DeepCopyObject().(client.ObjectList), t.opts...)
		if err != nil {
			state.set(fmt.Errorf("watch: %w", err))
			signal()
		} else if drain(ctx, w, func() { state.set(nil); signal() }) {
			backoff.Duration, backoff.Steps = time.Second, math.MaxInt32
		}
		select {
		case <-ctx.Done():
		case <-time.After(backoff.Step()):
		}
	}
}

// drain signals for each event of w until it ends, and reports whether it
// delivered any event other than an error.
func drain(ctx context.Context, w watch.Interface, signal func()) bool {
	defer w.Stop()
	healthy := false
	for {
		select {
		case <-ctx.Done():
			return healthy
		case ev, ok := <-w.ResultChan():
			if !ok || ev.Type == watch.Error {
				return healthy
			}
			healthy = true
			signal()
		}
	}
}

// renderFunc renders a stream's fragment; liveErr is the watches' last
// error, for the fragment to show.
type renderFunc func(ctx context.Context, c client.Client, liveErr error) (string, error)

// stream serves an event stream named event: render's HTML once at once,
// then again after every change of targets. It ends when the client goes,
// and when the API server says the user's credentials are no longer good.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, event string, targets []watchTarget, render renderFunc) {
	c, err := s.o.Clients.ClientFor(r)
	if err != nil {
		http.Error(w, err.Error(), statusOf(err))
		return
	}
	select {
	case s.streams <- struct{}{}:
		defer func() { <-s.streams }()
	default:
		http.Error(w, "too many live pages are open: try again later", http.StatusServiceUnavailable)
		return
	}
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)

	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	changed := make(chan struct{}, 1)
	changed <- struct{}{}
	state := &watchState{}
	for _, t := range targets {
		go watchChanges(ctx, c, t, state, changed)
	}
	ping := time.NewTicker(keepAlive)
	defer ping.Stop()
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-ping.C:
			if _, err := io.WriteString(w, ": keep-alive\n\n"); err != nil {
				return
			}
		case <-changed:
			wait := max(settle, time.Until(last.Add(minRenderInterval)))
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			last = time.Now()
			actx, acancel := context.WithTimeout(ctx, apiTimeout)
			liveErr := state.get()
			html, err := render(actx, c, liveErr)
			acancel()
			if err != nil {
				html = errorFragment(err)
			}
			if err := writeEvent(w, event, html); err != nil {
				return
			}
			if apierrors.IsUnauthorized(err) || apierrors.IsUnauthorized(liveErr) {
				_ = rc.Flush()
				return
			}
		}
		if err := rc.Flush(); err != nil {
			klog.V(2).InfoS("Stream ended", "event", event, "err", err)
			return
		}
	}
}

// writeEvent writes one server-sent event; each line of data gets its own
// "data:" field, as the format requires. The format also ends a line at a
// lone CR, which html/template leaves as it is: CRs become line ends first,
// so text from the API (an Event's message, say) cannot add fields or end
// the event early.
func writeEvent(w io.Writer, event, data string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "event: %s\n", event)
	data = strings.ReplaceAll(strings.ReplaceAll(data, "\r\n", "\n"), "\r", "\n")
	for _, line := range strings.Split(data, "\n") {
		fmt.Fprintf(&b, "data: %s\n", line)
	}
	b.WriteString("\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func errorFragment(err error) string {
	return `<p class="error" role="alert">` + template.HTMLEscapeString(err.Error()) + `</p>`
}

// liveClusters streams the clusters table's rows.
func (s *Server) liveClusters(w http.ResponseWriter, r *http.Request) {
	ns := strings.TrimSpace(r.URL.Query().Get("namespace"))
	targets := []watchTarget{
		{list: &nestv1.VirtualClusterList{}, opts: []client.ListOption{client.InNamespace(ns)}},
		{list: &corev1.ResourceQuotaList{}, opts: []client.ListOption{client.InNamespace(ns), client.MatchingLabels{controlplane.LabelManagedBy: controlplane.ManagedByValue}}},
	}
	s.stream(w, r, "clusters", targets, func(ctx context.Context, c client.Client, liveErr error) (string, error) {
		rows, err := s.clusterRows(ctx, c, ns)
		if err != nil {
			return "", err
		}
		return s.fragment("clusters", "rows", clustersView{Namespace: ns, Rows: rows, LiveError: errorText(liveErr)})
	})
}

// liveCluster streams one cluster's live part. It watches only what the
// page shows: the VirtualCluster, its quota, its control-plane pod, the host
// pods of its tenant and the Events about it.
func (s *Server) liveCluster(w http.ResponseWriter, r *http.Request) {
	key := keyOf(r)
	n := controlplane.Names{VirtualCluster: key.Name, Namespace: key.Namespace}
	in := client.InNamespace(key.Namespace)
	targets := []watchTarget{
		{list: &nestv1.VirtualClusterList{}, opts: []client.ListOption{in, client.MatchingFields{"metadata.name": key.Name}}},
		{list: &corev1.ResourceQuotaList{}, opts: []client.ListOption{in, client.MatchingFields{"metadata.name": n.TenantQuota()}}},
		{list: &corev1.PodList{}, opts: []client.ListOption{in, client.MatchingFields{"metadata.name": n.ControlPlanePod()}}},
		{list: &corev1.PodList{}, opts: []client.ListOption{in, client.MatchingLabels{contract.LabelTenantOf: key.Name}}},
		{list: &corev1.EventList{}, opts: []client.ListOption{in, client.MatchingFields{"involvedObject.name": key.Name}}},
	}
	s.stream(w, r, "cluster", targets, func(ctx context.Context, c client.Client, liveErr error) (string, error) {
		live, err := s.clusterLiveFor(ctx, c, key)
		if err != nil {
			return "", err
		}
		if liveErr != nil {
			live.Warnings = append(live.Warnings, "live updates: "+liveErr.Error())
		}
		return s.fragment("cluster", "live", live)
	})
}

func errorText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// fragment renders one named template of a page alone.
func (s *Server) fragment(page, name string, data any) (string, error) {
	var b bytes.Buffer
	if err := s.pages[page].ExecuteTemplate(&b, name, data); err != nil {
		return "", fmt.Errorf("render %s/%s: %w", page, name, err)
	}
	return b.String(), nil
}
