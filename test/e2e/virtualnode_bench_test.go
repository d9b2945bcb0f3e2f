package e2e

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/devcluster"
	"github.com/nestdev/nest/internal/images"
	"github.com/nestdev/nest/internal/syncer"
	"github.com/nestdev/nest/test/e2e/framework"
)

// BenchmarkVirtualNodePods measures shared mode on a local host cluster:
//   - pod create → Running, one pod at a time, 100 pods in the tenant and 100
//     created directly on the host, median and p99 of each, and the median the
//     virtual node adds;
//   - sync throughput: 200 tenant pods created at once, host pods made per
//     second. Once with pods that request an extended resource only the
//     virtual node has, so they stay Pending on the host and the figure is the
//     syncer's own; once with pods that start, where 200 container starts
//     share the machine's CPU with the syncer, with the time until all run.
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
	host := hostClient(b, devcluster.Layout{Root: stateDir}.AdminKubeconfig())
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
		syncOnly, _ := burst(b, ctx, tenantCS, hostCS, 200, "sync", false)
		synced, running := burst(b, ctx, tenantCS, hostCS, 200, "run", true)
		b.ReportMetric(ms(median(tenantTimes)), "tenant-median-ms")
		b.ReportMetric(ms(percentile(tenantTimes, 99)), "tenant-p99-ms")
		b.ReportMetric(ms(median(hostTimes)), "host-median-ms")
		b.ReportMetric(ms(percentile(hostTimes, 99)), "host-p99-ms")
		b.ReportMetric(ms(median(tenantTimes)-median(hostTimes)), "added-median-ms")
		b.ReportMetric(200/syncOnly.Seconds(), "sync-only-pods/s")
		b.ReportMetric(200/synced.Seconds(), "synced-while-starting-pods/s")
		b.ReportMetric(running.Seconds(), "200-running-s")
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
	waitReady(b, ctx, host, &tenant{name: "bench", ns: "vc-bench"})
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
	deadline := time.Now().Add(time.Minute)
	for {
		if _, err := cs.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{}); err == nil {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("no default service account in %s", ns)
		}
		time.Sleep(100 * time.Millisecond) // polling with a deadline
	}
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
		waitRunning(b, w, name)
		out = append(out, time.Since(start))
	}
	if err := cs.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "bench=nest"}); err != nil {
		b.Fatal(err)
	}
	return out
}

func waitRunning(b *testing.B, w watch.Interface, name string) {
	defer w.Stop()
	timeout := time.After(2 * time.Minute)
	for {
		select {
		case ev := <-w.ResultChan():
			if p, ok := ev.Object.(*corev1.Pod); ok && p.Status.Phase == corev1.PodRunning {
				return
			}
		case <-timeout:
			b.Fatalf("pod %s not Running within 2 minutes", name)
		}
	}
}

// burst creates n tenant pods at once and returns how long the syncer took
// to create all their host pods and, with run, how long until all were
// Running. Without run the pods request a sync slot and stay Pending on the
// host. The pods are deleted before it returns.
func burst(b *testing.B, ctx context.Context, tenant, host kubernetes.Interface, n int, prefix string, run bool) (synced, running time.Duration) {
	waitGone(b, ctx, tenant, "default")
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
	selector := metav1.ListOptions{LabelSelector: syncer.LabelTenantOf + "=bench,bench=nest"}
	for synced == 0 || (run && running == 0) {
		list, err := host.CoreV1().Pods("vc-bench").List(ctx, selector)
		if err != nil {
			b.Fatal(err)
		}
		if synced == 0 && len(list.Items) >= n {
			synced = time.Since(start)
		}
		up := 0
		for _, p := range list.Items {
			if p.Status.Phase == corev1.PodRunning {
				up++
			}
		}
		if up >= n {
			running = time.Since(start)
		}
		if time.Since(start) > 10*time.Minute {
			b.Fatalf("after 10 minutes: %d host pods, %d running", len(list.Items), up)
		}
		time.Sleep(50 * time.Millisecond) // polling with a deadline
	}
	if err := tenant.CoreV1().Pods("default").DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "bench=nest"}); err != nil {
		b.Fatal(err)
	}
	return synced, running
}

// waitGone waits until the sequential pods of the tenant have left the host.
func waitGone(b *testing.B, ctx context.Context, cs kubernetes.Interface, ns string) {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		list, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "bench=nest"})
		if err == nil && len(list.Items) == 0 {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("old bench pods still there")
		}
		time.Sleep(100 * time.Millisecond) // polling with a deadline
	}
}
