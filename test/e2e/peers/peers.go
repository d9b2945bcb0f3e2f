// Package peers measures Nest and the systems it is compared with
// (vcluster) side by side on one host cluster, with the same functions:
// each row of the table is one Measure called once per System, in the
// same run, and a Measure that fails for any system fails the row: no
// figure is made up, and none stands without its counterpart.
//
// A System knows only how to make, reach and remove its tenants on the
// host; everything measured (when a tenant answers, what its pods use,
// how fast its pods start) is read by this package the same way for
// every system.
package peers

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nestdev/nest/internal/kube"
)

// System is one system of tenant clusters on the host.
type System interface {
	// Name names the system in the table, such as "Nest" or "vcluster".
	Name() string
	// Create starts making tenant name and returns once the host took
	// the request; the tenant is not Ready yet.
	Create(ctx context.Context, name string) error
	// Config is a client configuration of tenant name's API server as
	// the test process reaches it. It fails while the tenant's
	// credentials or address do not exist yet.
	Config(ctx context.Context, name string) (*rest.Config, error)
	// HostNamespace is the host namespace where tenant name's control
	// plane and synced pods run.
	HostNamespace(name string) string
	// Delete starts removing tenant name and returns once the host took
	// the request.
	Delete(ctx context.Context, name string) error
	// HostObjects lists what is left of tenant name on the host, as
	// "Kind namespace/name"; empty once everything is gone.
	HostObjects(ctx context.Context, name string) ([]string, error)
}

// Options bound how long a measure waits, and how often it looks.
type Options struct {
	// Timeout bounds each wait of a measure: a tenant that is not Ready,
	// a pod that does not run, a tenant that is not gone, within it,
	// fails the measure. Zero is 5 minutes.
	Timeout time.Duration
	// Poll is how often a wait looks. Zero is 100 ms.
	Poll time.Duration
}

func (o Options) timeout() time.Duration {
	if o.Timeout == 0 {
		return 5 * time.Minute
	}
	return o.Timeout
}

func (o Options) poll() time.Duration {
	if o.Poll == 0 {
		return 100 * time.Millisecond
	}
	return o.Poll
}

// Row is one line of the table: a figure per system, by its Name, in Unit.
type Row struct {
	Name, Unit string
	Values     map[string]float64
}

// Recorder takes the figures of one system's run.
type Recorder interface {
	// Record records value, in unit, for the row named row.
	Record(row, unit string, value float64)
}

// Suite measures one system, recording each figure as it goes. The same
// Suite runs for every system.
type Suite func(ctx context.Context, s System, rec Recorder) error

// Run runs suite for each system in turn and returns the rows, in the
// order the first system recorded them. The first error ends it with no
// rows: the error names the system. So does a row that a system did not
// record, or recorded twice, or a figure that is not a number.
func Run(ctx context.Context, systems []System, suite Suite) ([]Row, error) {
	var order []string
	rows := map[string]*Row{}
	for i, s := range systems {
		rec := &recorder{system: s.Name(), rows: rows, first: i == 0, order: &order}
		if err := suite(ctx, s, rec); err != nil {
			return nil, fmt.Errorf("%s: %w", s.Name(), err)
		}
		if rec.err != nil {
			return nil, fmt.Errorf("%s: %w", s.Name(), rec.err)
		}
		for _, name := range order {
			if _, ok := rows[name].Values[s.Name()]; !ok {
				return nil, fmt.Errorf("%s: recorded no figure for row %q", s.Name(), name)
			}
		}
	}
	out := make([]Row, 0, len(order))
	for _, name := range order {
		out = append(out, *rows[name])
	}
	return out, nil
}

type recorder struct {
	system string
	rows   map[string]*Row
	first  bool
	order  *[]string
	err    error
}

func (r *recorder) Record(row, unit string, value float64) {
	switch existing := r.rows[row]; {
	case r.err != nil:
	case math.IsNaN(value) || math.IsInf(value, 0):
		r.err = fmt.Errorf("row %q: the figure is %v", row, value)
	case existing == nil && !r.first:
		r.err = fmt.Errorf("row %q was not recorded for the first system", row)
	case existing == nil:
		r.rows[row] = &Row{Name: row, Unit: unit, Values: map[string]float64{r.system: value}}
		*r.order = append(*r.order, row)
	case existing.Unit != unit:
		r.err = fmt.Errorf("row %q recorded in %s, and in %s before", row, unit, existing.Unit)
	default:
		if _, twice := existing.Values[r.system]; twice {
			r.err = fmt.Errorf("row %q recorded twice", row)
			return
		}
		existing.Values[r.system] = value
	}
}

// Markdown renders rows as a table with a column per system, in the order
// of names, and the ratio of each other system to the first (the first
// is Nest: a ratio above 1 is a figure Nest is lower on).
func Markdown(rows []Row, names []string) string {
	var b strings.Builder
	b.WriteString("| row | unit |")
	for _, n := range names {
		b.WriteString(" " + n + " |")
	}
	for _, n := range names[1:] {
		fmt.Fprintf(&b, " %s / %s |", n, names[0])
	}
	b.WriteString("\n|---|---|")
	b.WriteString(strings.Repeat("---:|", 2*len(names)-1))
	b.WriteString("\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s |", r.Name, r.Unit)
		for _, n := range names {
			fmt.Fprintf(&b, " %s |", figure(r.Values[n]))
		}
		for _, n := range names[1:] {
			if first := r.Values[names[0]]; first != 0 {
				fmt.Fprintf(&b, " %.2f |", r.Values[n]/first)
			} else {
				b.WriteString(" – |")
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

// figure prints v with three significant digits at most.
func figure(v float64) string {
	switch a := math.Abs(v); {
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

// CreateToReady creates tenant name of s and returns how long it took
// until its API server answers with a Ready node (TenantReady).
func CreateToReady(ctx context.Context, s System, name string, o Options) (time.Duration, error) {
	start := time.Now()
	if err := s.Create(ctx, name); err != nil {
		return 0, fmt.Errorf("create %s: %w", name, err)
	}
	if err := WaitReady(ctx, s, name, o); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// WaitReady waits until tenant name of s answers with a Ready node; past
// o's timeout the error says what was seen last.
func WaitReady(ctx context.Context, s System, name string, o Options) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, o.poll(), o.timeout(), true, func(ctx context.Context) (bool, error) {
		cfg, err := s.Config(ctx, name)
		if err == nil {
			err = TenantReady(ctx, cfg)
		}
		last = err
		return err == nil, nil
	})
	if err != nil {
		return fmt.Errorf("tenant %s not Ready within %s: %w", name, o.timeout(), errors.Join(last, err))
	}
	return nil
}

// TenantReady checks that the tenant cfg reaches lists a node whose Ready
// condition is True.
func TenantReady(ctx context.Context, cfg *rest.Config) error {
	cs, err := clientOf(cfg)
	if err != nil {
		return err
	}
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for i := range nodes.Items {
		if kube.NodeReady(&nodes.Items[i]) {
			return nil
		}
	}
	return fmt.Errorf("%d nodes, none Ready", len(nodes.Items))
}

func clientOf(cfg *rest.Config) (*kubernetes.Clientset, error) {
	cfg = rest.CopyConfig(cfg)
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Second
	}
	return kubernetes.NewForConfig(cfg)
}

// DeleteToGone deletes tenant name of s and returns how long it took
// until the host holds nothing of it (System.HostObjects).
func DeleteToGone(ctx context.Context, s System, name string, o Options) (time.Duration, error) {
	start := time.Now()
	if err := s.Delete(ctx, name); err != nil {
		return 0, fmt.Errorf("delete %s: %w", name, err)
	}
	var left []string
	err := wait.PollUntilContextTimeout(ctx, o.poll(), o.timeout(), true, func(ctx context.Context) (bool, error) {
		var err error
		left, err = s.HostObjects(ctx, name)
		return err == nil && len(left) == 0, nil
	})
	if err != nil {
		return 0, fmt.Errorf("%s still has %s on the host after %s: %w", name, strings.Join(left, ", "), o.timeout(), err)
	}
	return time.Since(start), nil
}

// Median is the middle of ds (the mean of the two middle ones for an even
// count); zero for none.
func Median(ds []time.Duration) time.Duration { return Quantile(ds, 0.5) }

// Quantile is the q-quantile of ds (0 ≤ q ≤ 1) by linear interpolation
// between the closest ranks; zero for none.
func Quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	pos := q * float64(len(s)-1)
	lo := int(math.Floor(pos))
	hi := int(math.Ceil(pos))
	return s[lo] + time.Duration(float64(s[hi]-s[lo])*(pos-float64(lo)))
}
