package peers

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
)

// tenantAPI serves /api/v1/nodes with one node whose Ready condition is
// ready, on loopback.
func tenantAPI(t *testing.T, ready corev1.ConditionStatus) *rest.Config {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/nodes" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(corev1.NodeList{
			TypeMeta: metav1.TypeMeta{Kind: "NodeList", APIVersion: "v1"},
			Items: []corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
				Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready}}}}},
		})
	}))
	t.Cleanup(srv.Close)
	return &rest.Config{Host: srv.URL}
}

// fakeSystem is a System whose tenants are reached at cfg, or not at all
// when cfg is nil, and which records the calls made to it.
type fakeSystem struct {
	name  string
	cfg   *rest.Config
	calls []string
}

func (f *fakeSystem) Name() string { return f.name }
func (f *fakeSystem) Create(_ context.Context, name string) error {
	f.calls = append(f.calls, "create "+name)
	return nil
}
func (f *fakeSystem) Config(context.Context, string) (*rest.Config, error) {
	if f.cfg == nil {
		return nil, errors.New("no kubeconfig Secret yet")
	}
	return f.cfg, nil
}
func (f *fakeSystem) HostNamespace(name string) string { return "host-" + name }
func (f *fakeSystem) Delete(_ context.Context, name string) error {
	f.calls = append(f.calls, "delete "+name)
	return nil
}
func (f *fakeSystem) HostObjects(context.Context, string) ([]string, error) { return nil, nil }

var quick = Options{Timeout: 300 * time.Millisecond, Poll: 20 * time.Millisecond}

// createSuite records create → Ready of tenant t1.
func createSuite(ran *[]string) Suite {
	return func(ctx context.Context, s System, rec Recorder) error {
		*ran = append(*ran, s.Name())
		d, err := CreateToReady(ctx, s, "t1", quick)
		if err != nil {
			return err
		}
		rec.Record("create → Ready", "s", d.Seconds())
		return nil
	}
}

func TestTheSameSuiteMeasuresEverySystem(t *testing.T) {
	nest := &fakeSystem{name: "Nest", cfg: tenantAPI(t, corev1.ConditionTrue)}
	peer := &fakeSystem{name: "vcluster", cfg: tenantAPI(t, corev1.ConditionTrue)}
	var ran []string
	rows, err := Run(context.Background(), []System{nest, peer}, createSuite(&ran))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(ran, ",") != "Nest,vcluster" {
		t.Errorf("the suite ran for %v, want Nest then vcluster", ran)
	}
	if len(rows) != 1 || rows[0].Name != "create → Ready" {
		t.Fatalf("rows %+v, want one: create → Ready", rows)
	}
	for _, s := range []*fakeSystem{nest, peer} {
		if v, ok := rows[0].Values[s.name]; !ok || v <= 0 {
			t.Errorf("row value of %s = %v (present %v), want a positive duration", s.name, v, ok)
		}
		if strings.Join(s.calls, ",") != "create t1" {
			t.Errorf("%s was asked %v, want one create of t1", s.name, s.calls)
		}
	}
}

func TestATenantThatCannotBeReachedFailsTheRun(t *testing.T) {
	for _, tt := range []struct {
		name string
		cfg  func(t *testing.T) *rest.Config
	}{
		{"no credentials", func(*testing.T) *rest.Config { return nil }},
		{"no node Ready", func(t *testing.T) *rest.Config { return tenantAPI(t, corev1.ConditionFalse) }},
		{"nothing listening", func(*testing.T) *rest.Config { return &rest.Config{Host: "http://127.0.0.1:1"} }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			nest := &fakeSystem{name: "Nest", cfg: tenantAPI(t, corev1.ConditionTrue)}
			peer := &fakeSystem{name: "vcluster", cfg: tt.cfg(t)}
			var ran []string
			rows, err := Run(context.Background(), []System{nest, peer}, createSuite(&ran))
			if err == nil || !strings.Contains(err.Error(), "vcluster") || !strings.Contains(err.Error(), "not Ready") {
				t.Errorf("Run error %v, want one naming vcluster's tenant not Ready", err)
			}
			if rows != nil {
				t.Errorf("a failed run gave rows %+v, want none", rows)
			}
		})
	}
}

func TestARowEverySystemDoesNotRecordFailsTheRun(t *testing.T) {
	systems := []System{&fakeSystem{name: "Nest"}, &fakeSystem{name: "vcluster"}}
	for _, tt := range []struct {
		name  string
		suite Suite
		want  string
	}{
		{"missing for the second", func(_ context.Context, s System, rec Recorder) error {
			if s.Name() == "Nest" {
				rec.Record("r", "s", 1)
			}
			return nil
		}, `vcluster: recorded no figure for row "r"`},
		{"only the second's", func(_ context.Context, s System, rec Recorder) error {
			if s.Name() == "vcluster" {
				rec.Record("r", "s", 1)
			}
			return nil
		}, "not recorded for the first system"},
		{"twice", func(_ context.Context, _ System, rec Recorder) error {
			rec.Record("r", "s", 1)
			rec.Record("r", "s", 2)
			return nil
		}, "recorded twice"},
		{"not a number", func(_ context.Context, _ System, rec Recorder) error {
			rec.Record("r", "s", math.NaN())
			return nil
		}, "NaN"},
		{"another unit", func(_ context.Context, s System, rec Recorder) error {
			unit := map[string]string{"Nest": "s", "vcluster": "ms"}[s.Name()]
			rec.Record("r", unit, 1)
			return nil
		}, "recorded in ms, and in s before"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rows, err := Run(context.Background(), systems, tt.suite)
			if err == nil || !strings.Contains(err.Error(), tt.want) || rows != nil {
				t.Errorf("Run = %v, %v; want no rows and an error saying %q", rows, err, tt.want)
			}
		})
	}
}

func TestQuantiles(t *testing.T) {
	ds := []time.Duration{5, 1, 3, 2, 4}
	if Median(ds) != 3 || Quantile(ds, 0) != 1 || Quantile(ds, 1) != 5 {
		t.Errorf("median %d, q0 %d, q1 %d; want 3, 1, 5", Median(ds), Quantile(ds, 0), Quantile(ds, 1))
	}
	if got := Median([]time.Duration{1, 2}); got != 1 {
		// Integer nanoseconds: 1.5 rounds down.
		t.Errorf("median of 1 and 2 = %d, want 1", got)
	}
	if Quantile(nil, 0.99) != 0 {
		t.Error("the quantile of nothing is not zero")
	}
	if ds[0] != 5 {
		t.Error("Quantile sorted its argument")
	}
}

func TestMarkdownGivesEachSystemAColumnAndTheRatioToTheFirst(t *testing.T) {
	md := Markdown([]Row{{Name: "idle memory", Unit: "MiB", Values: map[string]float64{"Nest": 200, "vcluster": 300}}}, []string{"Nest", "vcluster"})
	for _, want := range []string{"| row | unit | Nest | vcluster | vcluster / Nest |", "| idle memory | MiB | 200 | 300 | 1.50 |"} {
		if !strings.Contains(md, want) {
			t.Errorf("table lacks %q:\n%s", want, md)
		}
	}
}

func TestIdleWorkingSetSumsTheTenantsRunningHostPods(t *testing.T) {
	pod := func(ns, name string, phase corev1.PodPhase) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Status: corev1.PodStatus{Phase: phase}}
	}
	host := fake.NewClientset(pod("host-a", "control-plane", corev1.PodRunning), pod("host-a", "coredns", corev1.PodRunning),
		pod("host-a", "done", corev1.PodSucceeded), pod("host-b", "other", corev1.PodRunning))
	s := &fakeSystem{name: "Nest"}
	read := map[string]bool{}
	mib, err := IdleWorkingSet(context.Background(), host, s, "a", func(p *corev1.Pod) (float64, error) {
		read[p.Name] = true
		return 100 << 20, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if mib != 200 || len(read) != 2 || !read["control-plane"] || !read["coredns"] {
		t.Errorf("%v MiB from %v, want 200 from the two running pods of host-a", mib, read)
	}
	if _, err := IdleWorkingSet(context.Background(), host, s, "c", func(*corev1.Pod) (float64, error) { return 1, nil }); err == nil {
		t.Error("a tenant with no host pod has a working set")
	}
	if _, err := IdleWorkingSet(context.Background(), host, s, "a", func(*corev1.Pod) (float64, error) { return 0, errors.New("no cgroup") }); err == nil {
		t.Error("a pod whose working set cannot be read was counted")
	}
}

func TestDensityStopsAtTheFirstTenantThatDoesNotFitAndDeletesWhatItMade(t *testing.T) {
	free := func() (float64, error) { return 0.1, nil }
	s := &fakeSystem{name: "vcluster"} // never Ready: no credentials
	fitted, stop, err := Density(context.Background(), s, 10, PodTemplate{}, DensityLimits{Max: 5, MemoryUsed: free, MemoryShare: 0.8, Wait: quick})
	if err != nil || fitted != 0 || !strings.Contains(stop, "tenant 1") || !strings.Contains(stop, "not Ready") {
		t.Errorf("Density = %d, %q, %v; want 0 tenants, stopped by tenant 1 not Ready", fitted, stop, err)
	}
	if strings.Join(s.calls, ",") != "create d0,delete d0" {
		t.Errorf("calls %v, want d0 made, then deleted", s.calls)
	}

	full := func() (float64, error) { return 0.85, nil }
	s = &fakeSystem{name: "Nest"}
	fitted, stop, err = Density(context.Background(), s, 10, PodTemplate{}, DensityLimits{Max: 5, MemoryUsed: full, MemoryShare: 0.8, Wait: quick})
	if err != nil || fitted != 0 || !strings.Contains(stop, "85% used") || len(s.calls) != 0 {
		t.Errorf("Density on a full host = %d, %q, %v, calls %v; want no tenant made, stopped by memory", fitted, stop, err, s.calls)
	}
	if _, _, err := Density(context.Background(), s, 10, PodTemplate{}, DensityLimits{Max: 5, MemoryShare: 0.8, Wait: quick,
		MemoryUsed: func() (float64, error) { return 0, errors.New("no /proc") }}); err == nil {
		t.Error("a host whose memory cannot be read gave a density")
	}
}

func TestVClusterValuesNameTheLocalImages(t *testing.T) {
	v := VClusterValues(VClusterImages{Syncer: "nest.local/peers/vcluster-oss:0.36.1", Kubernetes: "nest.local/peers/vcluster-kubernetes:v1.36.3",
		CoreDNS: "nest.local/peers/coredns:1.14.2", Shell: "nest.local/busybox:1.35"}, "198.51.100.10")
	sts := v["controlPlane"].(map[string]any)["statefulSet"].(map[string]any)
	img := sts["image"].(map[string]any)
	if img["repository"] != "nest.local/peers/vcluster-oss" || img["tag"] != "0.36.1" || img["registry"] != "" || sts["imagePullPolicy"] != "Never" {
		t.Errorf("syncer image values %v, pull policy %v", img, sts["imagePullPolicy"])
	}
}
