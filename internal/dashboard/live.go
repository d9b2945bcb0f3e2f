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
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/controlplane"
)

// Pages stay live through server-sent events: for each open page the server
// watches the objects the page shows, with the user's client, and on every
// change renders the page's live fragment again and pushes it. htmx's SSE
// extension swaps it into the page.

const (
	// settle gathers a burst of watch events into one render.
	settle = 150 * time.Millisecond
	// keepAlive is how often an idle stream sends a comment, so proxies
	// keep the connection open.
	keepAlive = 15 * time.Second
)

// watchTarget is one list the stream watches.
type watchTarget struct {
	list client.ObjectList
	opts []client.ListOption
}

// watchChanges watches t until ctx ends and signals changed on every event.
// A watch the server ends is opened again; a failing one (no rights, API
// server down) is retried with backoff, and each failure also signals, so
// the page renders the error.
func watchChanges(ctx context.Context, c client.WithWatch, t watchTarget, changed chan<- struct{}) {
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
			signal()
		} else {
			healthy := drain(ctx, w, signal)
			if healthy {
				backoff.Duration, backoff.Steps = time.Second, math.MaxInt32
			}
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

// stream serves an event stream named event: render's HTML once at once,
// then again after every change of targets.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, event string, targets []watchTarget, render func(ctx context.Context, c client.Client) (string, error)) {
	c, err := s.o.Clients.ClientFor(r)
	if err != nil {
		http.Error(w, err.Error(), statusOf(err))
		return
	}
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)

	ctx := r.Context()
	changed := make(chan struct{}, 1)
	changed <- struct{}{}
	for _, t := range targets {
		go watchChanges(ctx, c, t, changed)
	}
	ping := time.NewTicker(keepAlive)
	defer ping.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ping.C:
			if _, err := io.WriteString(w, ": keep-alive\n\n"); err != nil {
				return
			}
		case <-changed:
			select {
			case <-ctx.Done():
				return
			case <-time.After(settle):
			}
			actx, cancel := context.WithTimeout(ctx, apiTimeout)
			html, err := render(actx, c)
			cancel()
			if err != nil {
				html = errorFragment(err)
			}
			if err := writeEvent(w, event, html); err != nil {
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
// "data:" field, as the format requires.
func writeEvent(w io.Writer, event, data string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "event: %s\n", event)
	for _, line := range strings.Split(data, "\n") {
		fmt.Fprintf(&b, "data: %s\n", strings.TrimRight(line, "\r"))
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
	s.stream(w, r, "clusters", targets, func(ctx context.Context, c client.Client) (string, error) {
		rows, err := s.clusterRows(ctx, c, ns)
		if err != nil {
			return "", err
		}
		return s.fragment("clusters", "rows", clustersView{Namespace: ns, Rows: rows})
	})
}

// liveCluster streams one cluster's live part.
func (s *Server) liveCluster(w http.ResponseWriter, r *http.Request) {
	key := keyOf(r)
	in := client.InNamespace(key.Namespace)
	targets := []watchTarget{
		{list: &nestv1.VirtualClusterList{}, opts: []client.ListOption{in, client.MatchingFields{"metadata.name": key.Name}}},
		{list: &corev1.PodList{}, opts: []client.ListOption{in}},
		{list: &corev1.ResourceQuotaList{}, opts: []client.ListOption{in, client.MatchingFields{"metadata.name": controlplane.Names{VirtualCluster: key.Name, Namespace: key.Namespace}.TenantQuota()}}},
		{list: &corev1.EventList{}, opts: []client.ListOption{in, client.MatchingFields{"involvedObject.name": key.Name}}},
	}
	s.stream(w, r, "cluster", targets, func(ctx context.Context, c client.Client) (string, error) {
		live, err := s.clusterLiveFor(ctx, c, key)
		if err != nil {
			return "", err
		}
		return s.fragment("cluster", "live", live)
	})
}

// fragment renders one named template of a page alone.
func (s *Server) fragment(page, name string, data any) (string, error) {
	var b bytes.Buffer
	if err := s.pages[page].ExecuteTemplate(&b, name, data); err != nil {
		return "", fmt.Errorf("render %s/%s: %w", page, name, err)
	}
	return b.String(), nil
}
