package e2e

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/devcluster"
	"github.com/nestdev/nest/internal/testutil"
	"github.com/nestdev/nest/test/e2e/framework"
)

// BenchmarkVirtualClusterCreate measures, on a local host cluster, the time
// from creating a VirtualCluster to its Ready condition: the median of 5
// created one after another, and the median and maximum of 5 created at once.
// It also reports the resident memory of one idle tenant control-plane pod.
// Run it with `make bench`.
func BenchmarkVirtualClusterCreate(b *testing.B) {
	framework.RequireRoot(b)
	ctx := context.Background()
	stateDir := startBenchCluster(b, ctx, "vc")
	host := framework.HostClient(b, devcluster.Layout{Root: stateDir}.AdminKubeconfig())
	var sequential, parallel []time.Duration
	var mem podMemory
	for i := 0; i < b.N; i++ {
		for j := 0; j < 5; j++ {
			name := fmt.Sprintf("seq-%d-%d", i, j)
			sequential = append(sequential, createReady(b, ctx, host, name))
			if j == 0 && i == 0 {
				mem = idleMemory(b, ctx, host, name)
			}
			deleteVC(b, ctx, host, name)
		}
		var mu sync.Mutex
		var wg sync.WaitGroup
		for j := 0; j < 5; j++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				d := createReady(b, ctx, host, fmt.Sprintf("par-%d-%d", i, j))
				mu.Lock()
				parallel = append(parallel, d)
				mu.Unlock()
			}()
		}
		wg.Wait()
		for j := 0; j < 5; j++ {
			deleteVC(b, ctx, host, fmt.Sprintf("par-%d-%d", i, j))
		}
	}
	b.ReportMetric(median(sequential).Seconds(), "s-median-create-to-ready")
	b.ReportMetric(median(parallel).Seconds(), "s-median-create-to-ready-5-at-once")
	b.ReportMetric(slices.Max(parallel).Seconds(), "s-max-create-to-ready-5-at-once")
	b.ReportMetric(mem.RSS, "MB-rss-idle-control-plane")
	b.ReportMetric(mem.PSS, "MB-pss-idle-control-plane")
	b.ReportMetric(mem.Private, "MB-private-idle-control-plane")
	b.ReportMetric(mem.WorkingSet, "MB-working-set-idle-control-plane")
}

// startBenchCluster starts a two-node local host cluster with Nest for a
// benchmark and stops it when the benchmark ends. It returns the state directory.
func startBenchCluster(b *testing.B, ctx context.Context, name string) string {
	return startBenchClusterOf(b, ctx, name, 2)
}

// startBenchClusterOf is startBenchCluster with this many nodes.
func startBenchClusterOf(b *testing.B, ctx context.Context, name string, nodes int) string {
	stateDir := filepath.Join(os.TempDir(), fmt.Sprintf("nest-bench-%s-%d", name, os.Getpid()))
	if out, err := framework.Run(ctx, b, "nest", "dev", "up", "--nodes", strconv.Itoa(nodes), "--with-nest", "--state-dir", stateDir); err != nil {
		b.Fatalf("up: %v\n%s", err, out)
	}
	b.Cleanup(func() { _, _ = framework.Run(ctx, b, "nest", "dev", "down", "--state-dir", stateDir) })
	return stateDir
}

// createReady creates a VirtualCluster and returns how long it took to be
// Ready, or zero after reporting an error. It polls by hand rather than with
// testutil.Eventually because it runs in goroutines, where b.Fatal must not
// be called.
func createReady(b *testing.B, ctx context.Context, c client.Client, name string) time.Duration {
	vc := &nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}}
	start := time.Now()
	if err := c.Create(ctx, vc); err != nil {
		b.Error(err)
		return 0
	}
	deadline := start.Add(5 * time.Minute)
	for time.Now().Before(deadline) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(vc), vc); err == nil && meta.IsStatusConditionTrue(vc.Status.Conditions, nestv1.ConditionReady) {
			return time.Since(start)
		}
		time.Sleep(100 * time.Millisecond) // polling with a deadline
	}
	b.Errorf("%s not Ready after 5 minutes", name)
	return 0
}

func deleteVC(b *testing.B, ctx context.Context, c client.Client, name string) {
	vc := &nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}}
	if err := c.Delete(ctx, vc); err != nil {
		b.Fatal(err)
	}
	testutil.Eventually(b, 3*time.Minute, name+" deleted", func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(vc), vc); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there (%v)", err)
		}
		return nil
	})
}

// podMemory is a pod's memory in MiB (reported as MB), summed over its
// processes from /proc/PID/smaps_rollup. RSS counts the shared pages of the one multi-call
// binary once per process; PSS splits them between the processes that share
// them; Private is what the pod alone holds. WorkingSet is the pod cgroup's
// usage less its inactive file pages, the figure kubectl top and the
// kubelet's eviction use.
type podMemory struct {
	RSS, PSS, Private, WorkingSet float64
	// Processes are the figures of each process, which RSS, PSS and
	// Private sum.
	Processes []processMemory
}

// idleMemory reads the control-plane pod's memory once it has settled: two
// samples two seconds apart whose PSS is within 2%.
func idleMemory(b *testing.B, ctx context.Context, c client.Client, name string) podMemory {
	pod := &corev1.Pod{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: name + "-0"}, pod); err != nil {
		b.Fatal(err)
	}
	prev := memoryOf(b, string(pod.UID))
	for i := 0; i < 30; i++ {
		time.Sleep(2 * time.Second) // a measurement interval, not synchronisation
		cur := memoryOf(b, string(pod.UID))
		if prev.PSS > 0 && cur.PSS/prev.PSS < 1.02 && prev.PSS/cur.PSS < 1.02 {
			return cur
		}
		prev = cur
	}
	return prev
}

// memoryOf reads the memory of the pod with the given UID from its cgroup,
// in the memory hierarchy of either cgroup version. A pod cgroup that is not
// found, or a figure that cannot be read, fails the benchmark.
func memoryOf(b *testing.B, uid string) podMemory {
	layout, err := devcluster.CurrentCgroupLayout()
	if err != nil {
		b.Fatal(err)
	}
	hierarchy, err := layout.MemoryHierarchy()
	if err != nil {
		b.Fatal(err)
	}
	dir := podCgroup(b, hierarchy, uid)
	ws, err := layout.WorkingSetBytes(dir)
	if err != nil {
		b.Fatal(err)
	}
	m := podMemory{WorkingSet: float64(ws) / (1 << 20), Processes: processMemoryOf(dir)}
	for _, p := range m.Processes {
		m.RSS += p.RSS
		m.PSS += p.PSS
		m.Private += p.Private
	}
	return m
}

// processMemory is one process's memory in MiB, from /proc/PID/smaps_rollup.
type processMemory struct {
	Name              string
	RSS, PSS, Private float64
}

// processMemoryOf reads the memory of each process in the cgroup dir and its
// children; a process that exits meanwhile is left out.
func processMemoryOf(dir string) []processMemory {
	var out []processMemory
	for _, pid := range podPIDs(dir) {
		rollup, err := os.ReadFile("/proc/" + pid + "/smaps_rollup")
		if err != nil {
			continue
		}
		// The components run from symlinks named after them, so the
		// command name tells them apart (cut to 15 characters by the kernel).
		comm, _ := os.ReadFile("/proc/" + pid + "/comm")
		p := processMemory{Name: strings.TrimSpace(string(comm))}
		for _, line := range strings.Split(string(rollup), "\n") {
			f := strings.Fields(line)
			if len(f) < 2 {
				continue
			}
			kb, _ := strconv.ParseFloat(f[1], 64)
			switch f[0] {
			case "Rss:":
				p.RSS += kb / 1024
			case "Pss:":
				p.PSS += kb / 1024
			case "Private_Clean:", "Private_Dirty:":
				p.Private += kb / 1024
			}
		}
		out = append(out, p)
	}
	return out
}

// cpuOf reads the CPU time the pod with the given UID has used, from its
// cgroup in the CPU accounting hierarchy of either cgroup version.
func cpuOf(b *testing.B, uid string) time.Duration {
	layout, err := devcluster.CurrentCgroupLayout()
	if err != nil {
		b.Fatal(err)
	}
	hierarchy, err := layout.CPUHierarchy()
	if err != nil {
		b.Fatal(err)
	}
	used, err := layout.CPUUsage(podCgroup(b, hierarchy, uid))
	if err != nil {
		b.Fatal(err)
	}
	return used
}

// podCgroup is framework.PodCgroup, failing the benchmark when there is none.
func podCgroup(b *testing.B, hierarchy, uid string) string {
	dir, err := framework.PodCgroup(hierarchy, uid)
	if err != nil {
		b.Fatal(err)
	}
	return dir
}

// podPIDs lists the processes in a pod cgroup and its container cgroups.
func podPIDs(dir string) []string {
	var pids []string
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			procs, _ := os.ReadFile(filepath.Join(path, "cgroup.procs"))
			pids = append(pids, strings.Fields(string(procs))...)
		}
		return nil
	})
	slices.Sort(pids)
	return slices.Compact(pids)
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
