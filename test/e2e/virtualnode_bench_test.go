package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	watchtools "k8s.io/client-go/tools/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/devcluster"
	"github.com/nestdev/nest/internal/images"
	"github.com/nestdev/nest/internal/testutil"
	"github.com/nestdev/nest/test/e2e/framework"
)

// BenchmarkVirtualNodePods measures shared mode on a local host cluster:
//   - pod create → Running, one pod at a time, 100 pods in the tenant and 100
//     created directly on the host, median and p99 of each, and the median the
//     virtual node adds;
//   - sync throughput: 200 tenant pods created at once by 20 clients, once
//     the host has finished tearing down earlier pods and the machine is
//     idle again; the rate of each stage
//     (created in the tenant, bound by the tenant scheduler, host pod made)
//     from the first create call. Once with pods that request an extended
//     resource only the virtual node has, so they stay Pending on the host
//     and the figure is the syncer's own, with the machine's busy cores and
//     the syncer's CPU time per pod; once with pods that start, where 200
//     container starts share the machine's CPU with the syncer, with the
//     time until all run.
//
// Run it with `make bench`.
func BenchmarkVirtualNodePods(b *testing.B) {
	framework.RequireRoot(b)
	ctx := context.Background()
	stateDir := startBenchCluster(b, ctx, "vn")
	hostCfg, err := clientcmd.BuildConfigFromFlags("", devcluster.Layout{Root: stateDir}.AdminKubeconfig())
	if err != nil {
		b.Fatal(err)
	}
	hostCfg.QPS, hostCfg.Burst = 500, 1000
	host := framework.HostClient(b, devcluster.Layout{Root: stateDir}.AdminKubeconfig())
	tenantCfg := benchTenant(b, ctx, host)
	tenantCS := kubernetes.NewForConfigOrDie(tenantCfg)
	hostCS := kubernetes.NewForConfigOrDie(hostCfg)
	if _, err := hostCS.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bench-direct"}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	waitServiceAccount(b, ctx, tenantCS, "default")
	waitServiceAccount(b, ctx, hostCS, "bench-direct")

	for i := 0; i < b.N; i++ {
		tenantTimes := sequentialStarts(b, ctx, tenantCS, "default", 100)
		hostTimes := sequentialStarts(b, ctx, hostCS, "bench-direct", 100)
		syncOnly := burst(b, ctx, tenantCS, hostCS, 200, "sync", false)
		starting := burst(b, ctx, tenantCS, hostCS, 200, "run", true)
		b.ReportMetric(ms(median(tenantTimes)), "tenant-median-ms")
		b.ReportMetric(ms(percentile(tenantTimes, 99)), "tenant-p99-ms")
		b.ReportMetric(ms(median(hostTimes)), "host-median-ms")
		b.ReportMetric(ms(percentile(hostTimes, 99)), "host-p99-ms")
		b.ReportMetric(ms(median(tenantTimes)-median(hostTimes)), "added-median-ms")
		b.ReportMetric(200/syncOnly.created.Seconds(), "tenant-created-pods/s")
		b.ReportMetric(200/syncOnly.scheduled.Seconds(), "tenant-scheduled-pods/s")
		b.ReportMetric(200/syncOnly.synced.Seconds(), "sync-only-pods/s")
		b.ReportMetric(syncOnly.cpu, "sync-only-busy-cores")
		b.ReportMetric(ms(syncOnly.syncerCPU)/200, "syncer-cpu-ms/pod")
		b.ReportMetric(200/starting.synced.Seconds(), "synced-while-starting-pods/s")
		b.ReportMetric(starting.running.Seconds(), "200-running-s")
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func percentile(ds []time.Duration, p int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[max(i-1, 0)]
}

// benchTenant creates a VirtualCluster large enough for 200 pods and returns
// its admin client configuration.
func benchTenant(b *testing.B, ctx context.Context, host client.Client) *rest.Config {
	if err := host.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "vc-bench"}}); err != nil {
		b.Fatal(err)
	}
	vc := &nestv1.VirtualCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: "vc-bench", Name: "bench"},
		Spec: nestv1.VirtualClusterSpec{PromoteResources: nestv1.PromoteResources{Resources: corev1.ResourceList{
			"cpu": resource.MustParse("100"), "memory": resource.MustParse("100Gi"), "pods": resource.MustParse("250"),
			syncSlot: resource.MustParse("1000"),
		}}},
	}
	if err := host.Create(ctx, vc); err != nil {
		b.Fatal(err)
	}
	framework.WaitReady(b, ctx, host, &framework.Tenant{Name: "bench", Namespace: "vc-bench"})
	secret := &corev1.Secret{}
	if err := host.Get(ctx, client.ObjectKey{Namespace: "vc-bench", Name: "bench-kubeconfig"}, secret); err != nil {
		b.Fatal(err)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(secret.Data["kubeconfig"])
	if err != nil {
		b.Fatal(err)
	}
	cfg.QPS, cfg.Burst = 500, 1000
	return cfg
}

func waitServiceAccount(b *testing.B, ctx context.Context, cs kubernetes.Interface, ns string) {
	testutil.Eventually(b, time.Minute, "default service account in "+ns, func() error {
		_, err := cs.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err
	})
}

// syncSlot is an extended resource only the virtual node offers: a tenant pod
// that requests it is scheduled in the tenant and synced, but no host node
// can run it.
const syncSlot corev1.ResourceName = "example.com/sync-slot"

func pausePod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"bench": "nest"}},
		Spec: corev1.PodSpec{
			Containers:                    []corev1.Container{{Name: "pause", Image: images.Pause, ImagePullPolicy: corev1.PullNever}},
			TerminationGracePeriodSeconds: new(int64),
		},
	}
}

// sequentialStarts creates n pods one after another and returns, for each,
// the time from the create call to the first watch event showing it Running.
func sequentialStarts(b *testing.B, ctx context.Context, cs kubernetes.Interface, ns string, n int) []time.Duration {
	var out []time.Duration
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("seq-%d", i)
		w, err := cs.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()})
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, pausePod(name), metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		took := passedBy(w, 1, start, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
		if took == 0 {
			b.Fatalf("pod %s/%s not Running within 10 minutes", ns, name)
		}
		out = append(out, took)
	}
	if err := cs.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "bench=nest"}); err != nil {
		b.Fatal(err)
	}
	return out
}

// burstTimes are the moments, from the first create call, when the last of
// a burst of tenant pods passed each stage.
type burstTimes struct {
	created, scheduled, synced, running time.Duration
	// cpu is the machine's busy CPU, in cores, averaged from the first create
	// until the last stage ended.
	cpu float64
	// syncerCPU is the CPU time all nest-syncer processes used meanwhile.
	syncerCPU time.Duration
}

// burstStage is one stage of a burst: the watch that sees pods pass it, the
// test they pass, and where its time goes.
type burstStage struct {
	w      watch.Interface
	passed func(*corev1.Pod) bool
	at     *time.Duration
}

// burst creates n tenant pods at once, from 20 clients, and times each
// stage with watches: created in the tenant, bound to the virtual node by
// the tenant scheduler, host pod made by the syncer and, with run, Running
// on the host. Without run the pods request a sync slot and stay Pending on
// the host. The pods are deleted before it returns.
func burst(b *testing.B, ctx context.Context, tenant, host kubernetes.Interface, n int, prefix string, run bool) burstTimes {
	waitGone(b, ctx, tenant, "default")
	// The burst starts on a quiet machine: earlier pods gone from the host
	// too, not still being torn down by its kubelets.
	waitGone(b, ctx, host, "vc-bench")
	waitGone(b, ctx, host, "bench-direct")
	waitQuiet(b)
	sel := metav1.ListOptions{LabelSelector: "bench=nest"}
	var t burstTimes
	stages := []burstStage{
		{retryWatch(b, ctx, tenant.CoreV1().Pods("default"), sel), func(p *corev1.Pod) bool { return p.Spec.NodeName != "" }, &t.scheduled},
		{retryWatch(b, ctx, host.CoreV1().Pods("vc-bench"), sel), func(*corev1.Pod) bool { return true }, &t.synced},
	}
	if run {
		stages = append(stages, burstStage{retryWatch(b, ctx, host.CoreV1().Pods("vc-bench"), sel), func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning }, &t.running})
	}
	cpu0, syncer0 := readCPU(b), processCPU(b, "nest-syncer")
	start := time.Now()
	var wg sync.WaitGroup
	for _, st := range stages {
		wg.Add(1)
		go func() {
			defer wg.Done()
			*st.at = passedBy(st.w, n, start, st.passed)
		}()
	}
	t.created = createAll(b, ctx, tenant, n, prefix, run)
	wg.Wait()
	t.cpu, t.syncerCPU = readCPU(b).busySince(cpu0), processCPU(b, "nest-syncer")-syncer0
	for _, st := range stages {
		if *st.at == 0 {
			b.Fatalf("a stage of the burst of %d pods did not finish within 10 minutes: %+v", n, t)
		}
	}
	if err := tenant.CoreV1().Pods("default").DeleteCollection(ctx, metav1.DeleteOptions{}, sel); err != nil {
		b.Fatal(err)
	}
	return t
}

// retryWatch watches pods from now on, and watches again from the last
// event when the API server closes the watch: a loaded API server drops
// watchers that fall behind a burst.
func retryWatch(b *testing.B, ctx context.Context, pods typedcorev1.PodInterface, opts metav1.ListOptions) watch.Interface {
	list, err := pods.List(ctx, opts)
	if err != nil {
		b.Fatal(err)
	}
	w, err := watchtools.NewRetryWatcherWithContext(ctx, list.ResourceVersion, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = opts.LabelSelector
			return pods.Watch(ctx, o)
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	return w
}

// createAll creates n tenant pods named prefix-<i> from 20 clients at once
// and returns how long that took; without run they request a sync slot.
func createAll(b *testing.B, ctx context.Context, tenant kubernetes.Interface, n int, prefix string, run bool) time.Duration {
	start := time.Now()
	var wg sync.WaitGroup
	work := make(chan int)
	for w := 0; w < 20; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				pod := pausePod(fmt.Sprintf("%s-%d", prefix, i))
				if !run {
					pod.Spec.Containers[0].Resources.Requests = corev1.ResourceList{syncSlot: resource.MustParse("1")}
					pod.Spec.Containers[0].Resources.Limits = corev1.ResourceList{syncSlot: resource.MustParse("1")}
				}
				if _, err := tenant.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
					b.Error(err)
				}
			}
		}()
	}
	for i := 0; i < n; i++ {
		work <- i
	}
	close(work)
	wg.Wait()
	return time.Since(start)
}

// passedBy returns when, counted from start, the n-th distinct pod of the
// watch first passed the test; zero if the watch ended or 10 minutes went by
// first. It stops the watch.
func passedBy(w watch.Interface, n int, start time.Time, passed func(*corev1.Pod) bool) time.Duration {
	defer w.Stop()
	seen := map[string]bool{}
	timeout := time.After(10 * time.Minute)
	for len(seen) < n {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return 0
			}
			if p, isPod := ev.Object.(*corev1.Pod); isPod && passed(p) {
				seen[p.Name] = true
			}
		case <-timeout:
			return 0
		}
	}
	return time.Since(start)
}

// cpuTimes is the machine's busy and total CPU time from /proc/stat, in ticks.
type cpuTimes struct{ busy, total float64 }

func readCPU(b *testing.B) cpuTimes {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		b.Fatal(err)
	}
	line, _, _ := strings.Cut(string(data), "\n")
	var t cpuTimes
	for i, f := range strings.Fields(line)[1:] {
		v, _ := strconv.ParseFloat(f, 64)
		t.total += v
		if i != 3 && i != 4 { // idle and iowait
			t.busy += v
		}
	}
	return t
}

// waitQuiet waits until the machine has been mostly idle (under half a core
// busy) for two seconds, or a deadline passes: after a burst the host's
// kubelets and containerds go on tearing down sandboxes for a while after
// the pod objects are gone.
func waitQuiet(b *testing.B) {
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		before := readCPU(b)
		time.Sleep(2 * time.Second) // measuring a window, not synchronising
		if busy := readCPU(b).busySince(before); busy < 0.5 {
			return
		}
	}
	b.Logf("the machine stayed busy for 3 minutes; measuring anyway")
}

// processCPU is the user and system CPU time used so far by the processes
// whose command name is comm, from /proc/PID/stat (in clock ticks of 10 ms,
// the Linux default USER_HZ).
func processCPU(b *testing.B, comm string) time.Duration {
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		b.Fatal(err)
	}
	var ticks int64
	for _, path := range stats {
		data, err := os.ReadFile(path)
		if err != nil {
			continue // the process has exited
		}
		open, end := strings.IndexByte(string(data), '('), strings.LastIndexByte(string(data), ')')
		if open < 0 || end < open || string(data[open+1:end]) != comm {
			continue
		}
		// After the command name: state is field 3, utime 14 and stime 15.
		fields := strings.Fields(string(data[end+1:]))
		utime, _ := strconv.ParseInt(fields[11], 10, 64)
		stime, _ := strconv.ParseInt(fields[12], 10, 64)
		ticks += utime + stime
	}
	return time.Duration(ticks) * 10 * time.Millisecond
}

// busySince is the number of cores kept busy on average since an earlier
// reading.
func (t cpuTimes) busySince(before cpuTimes) float64 {
	return float64(runtime.NumCPU()) * (t.busy - before.busy) / (t.total - before.total)
}

// waitGone waits until no bench pod is left in a namespace.
func waitGone(b *testing.B, ctx context.Context, cs kubernetes.Interface, ns string) {
	testutil.Eventually(b, 2*time.Minute, "bench pods gone from "+ns, func() error {
		list, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "bench=nest"})
		if err == nil && len(list.Items) > 0 {
			err = fmt.Errorf("%d left", len(list.Items))
		}
		return err
	})
}
