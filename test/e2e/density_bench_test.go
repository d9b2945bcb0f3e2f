package e2e

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/devcluster"
	"github.com/nestdev/nest/internal/images"
	"github.com/nestdev/nest/internal/vcops"
	"github.com/nestdev/nest/test/e2e/framework"
)

// densityPods is the size of each tenant's workload; densityNodes the
// local host cluster's node count.
const (
	densityPods  = 10
	densityNodes = 4
)

// BenchmarkDensity creates tenants one after another on one four-node local
// host cluster, each with a 10-pod Deployment, until NEST_DENSITY_TENANTS
// (default 20) run or the host has no room for the next control plane. At
// 5, 10 and the last tenant it reports: that tenant's create-to-Ready time,
// the mean idle working set of a control-plane pod, nest-manager's working
// set and CPU per tenant, and, at the end, the p99 latency of a LIST of pods
// in every tenant. A prober LISTs the earlier tenants' pods all along, and
// its failures are reported: new tenants must not disturb the old ones.
// Run it with `make bench-density`.
func BenchmarkDensity(b *testing.B) {
	framework.RequireRoot(b)
	budget := benchCount(b, "NEST_DENSITY_TENANTS", 20)
	ctx := context.Background()
	for range b.N {
		// Every node reports the machine's CPUs as allocatable; each control
		// plane requests 300m of them. Four nodes give the scheduler room
		// for 20 tenants on a 2-core machine, which really holds them idle.
		stateDir := startBenchClusterOf(b, ctx, "density", densityNodes)
		host := framework.HostClient(b, devcluster.Layout{Root: stateDir}.AdminKubeconfig())
		d := &density{b: b, ctx: ctx, host: host}
		d.run(budget)
	}
}

type density struct {
	b    *testing.B
	ctx  context.Context
	host client.Client

	mu      sync.Mutex
	tenants []kubernetes.Interface
	// probeFailures and probeTimes are the prober's record of the earlier
	// tenants' LISTs while new ones start.
	probeFailures int
	probeTimes    []time.Duration
}

func (d *density) run(budget int) {
	managerBase := d.managerWorkingSet()
	stop := d.startProber()
	defer stop()
	for k := 1; k <= budget; k++ {
		name := densityTenant(k)
		took, ok := d.createTenant(name)
		if !ok {
			d.b.Logf("the host has no room for tenant %d: stopping at %d tenants", k, k-1)
			d.b.ReportMetric(float64(k-1), "tenants-fit")
			break
		}
		d.b.Logf("tenant %d Ready in %.1fs with %d pods running", k, took.Seconds(), densityPods)
		if k == 5 || k == 10 || k == budget {
			d.report(k, took, managerBase)
		}
		if k == budget {
			d.b.ReportMetric(float64(k), "tenants-fit")
		}
	}
	stop()
	d.mu.Lock()
	d.b.ReportMetric(float64(d.probeFailures), "prober-failures")
	if len(d.probeTimes) > 0 {
		d.b.ReportMetric(ms(percentile(d.probeTimes, 99)), "ms-prober-list-p99")
	}
	d.mu.Unlock()
	d.b.ReportMetric(ms(d.listP99()), "ms-list-p99-at-end")
}

// createTenant creates a VirtualCluster with its 10-pod Deployment and
// returns the time to Ready; false when its control plane cannot be
// scheduled on the host.
func (d *density) createTenant(name string) (time.Duration, bool) {
	took, ok := d.createReadyOrFull(name)
	if !ok {
		return 0, false
	}
	kubeconfig, err := vcops.ReadKubeconfig(d.ctx, d.host, types.NamespacedName{Namespace: densityNamespace(name), Name: name}, false)
	if err != nil {
		d.b.Fatal(err)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		d.b.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	deploy := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "idle", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](densityPods),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "idle"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "idle"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "app", Image: images.TestApp, ImagePullPolicy: corev1.PullNever,
					Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1m"), corev1.ResourceMemory: resource.MustParse("8Mi")}},
				}}},
			},
		},
	}
	// The NodePort may take a moment to carry traffic from here, and the
	// default ServiceAccount to appear: retry the create.
	err = wait.PollUntilContextTimeout(d.ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := cs.AppsV1().Deployments("default").Create(ctx, deploy, metav1.CreateOptions{})
		return err == nil, nil
	})
	if err != nil {
		d.b.Fatalf("%s: create the Deployment: %v", name, err)
	}
	err = wait.PollUntilContextTimeout(d.ctx, time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := cs.AppsV1().Deployments("default").Get(ctx, "idle", metav1.GetOptions{})
		return err == nil && got.Status.ReadyReplicas == densityPods, nil
	})
	if err != nil {
		d.b.Fatalf("%s: %d pods not ready after 5 minutes", name, densityPods)
	}
	d.mu.Lock()
	d.tenants = append(d.tenants, cs)
	d.mu.Unlock()
	return took, true
}

// createReadyOrFull creates the VirtualCluster and waits until it is Ready,
// or until the host scheduler finds no node for its control-plane pod.
func (d *density) createReadyOrFull(name string) (time.Duration, bool) {
	// A namespace holds one virtual cluster.
	vc := &nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: densityNamespace(name)}}
	start := time.Now()
	if err := d.host.Create(d.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: vc.Namespace}}); err != nil {
		d.b.Fatal(err)
	}
	if err := d.host.Create(d.ctx, vc); err != nil {
		d.b.Fatal(err)
	}
	full := false
	err := wait.PollUntilContextTimeout(d.ctx, 100*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := d.host.Get(ctx, client.ObjectKeyFromObject(vc), vc); err == nil && meta.IsStatusConditionTrue(vc.Status.Conditions, nestv1.ConditionReady) {
			return true, nil
		}
		pod := &corev1.Pod{}
		if err := d.host.Get(ctx, client.ObjectKey{Namespace: vc.Namespace, Name: name + "-0"}, pod); err == nil {
			for _, c := range pod.Status.Conditions {
				if c.Type == corev1.PodScheduled && c.Reason == corev1.PodReasonUnschedulable {
					d.b.Logf("%s: %s", name, c.Message)
					full = true
					return true, nil
				}
			}
		}
		return false, nil
	})
	if err != nil {
		d.b.Fatalf("%s not Ready after 5 minutes", name)
	}
	return time.Since(start), !full
}

// report measures the host once every tenant so far is idle.
func (d *density) report(k int, took time.Duration, managerBase float64) {
	at := fmt.Sprintf("-at-%d", k)
	d.b.ReportMetric(took.Seconds(), "s-create-to-ready"+at)
	var sum float64
	for i := 1; i <= k; i++ {
		sum += memoryOf(d.b, string(d.controlPlanePod(densityTenant(i)).UID)).WorkingSet
	}
	d.b.ReportMetric(sum/float64(k), "MB-working-set-per-control-plane"+at)
	d.logProcesses(densityTenant(1))
	manager := d.managerWorkingSet()
	d.b.ReportMetric(manager, "MB-manager-working-set"+at)
	d.b.ReportMetric((manager-managerBase)/float64(k), "MB-manager-per-tenant"+at)
	d.b.ReportMetric(d.managerMilliCPU(20*time.Second)/float64(k), "mCPU-manager-per-tenant"+at)
}

// logProcesses logs the memory of each process in tenant name's
// control-plane pod, to show where a control plane's memory goes.
func (d *density) logProcesses(name string) {
	for _, p := range memoryOf(d.b, string(d.controlPlanePod(name).UID)).Processes {
		d.b.Logf("%s: %-28s PSS %6.1f MiB, private %6.1f MiB, RSS %6.1f MiB", name, p.Name, p.PSS, p.Private, p.RSS)
	}
}

// controlPlanePod is tenant name's control-plane pod on the host.
func (d *density) controlPlanePod(name string) *corev1.Pod {
	pod := &corev1.Pod{}
	if err := d.host.Get(d.ctx, client.ObjectKey{Namespace: densityNamespace(name), Name: name + "-0"}, pod); err != nil {
		d.b.Fatal(err)
	}
	return pod
}

// densityTenant is the name of the k-th tenant, from 1.
func densityTenant(k int) string { return fmt.Sprintf("dens-%02d", k) }

// densityNamespace is the host namespace of tenant name.
func densityNamespace(name string) string { return "vc-" + name }

func (d *density) managerPod() *corev1.Pod {
	var pods corev1.PodList
	if err := d.host.List(d.ctx, &pods, client.InNamespace("nest-system"), client.MatchingLabels{"app.kubernetes.io/name": "nest-manager"}); err != nil {
		d.b.Fatal(err)
	}
	if len(pods.Items) != 1 {
		d.b.Fatalf("%d nest-manager pods, want 1", len(pods.Items))
	}
	return &pods.Items[0]
}

func (d *density) managerWorkingSet() float64 {
	return memoryOf(d.b, string(d.managerPod().UID)).WorkingSet
}

// managerMilliCPU is nest-manager's CPU use over window, in millicores.
func (d *density) managerMilliCPU(window time.Duration) float64 {
	uid := string(d.managerPod().UID)
	before := cpuOf(d.b, uid)
	start := time.Now()
	time.Sleep(window) // a measurement window, not synchronisation
	used := cpuOf(d.b, uid) - before
	return float64(used) / float64(time.Since(start)) * 1000
}

// startProber LISTs the pods of every tenant made so far, one after
// another, until the returned function is called (more than once is fine).
func (d *density) startProber() func() {
	ctx, cancel := context.WithCancel(d.ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			d.mu.Lock()
			tenants := slices.Clone(d.tenants)
			d.mu.Unlock()
			if len(tenants) == 0 {
				select {
				case <-ctx.Done():
				case <-time.After(200 * time.Millisecond): // an idle prober's pause, not synchronisation
				}
				continue
			}
			for _, cs := range tenants {
				start := time.Now()
				_, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
				if ctx.Err() != nil {
					return
				}
				d.mu.Lock()
				if err != nil {
					d.probeFailures++
					d.b.Logf("prober: %v", err)
				} else {
					d.probeTimes = append(d.probeTimes, time.Since(start))
				}
				d.mu.Unlock()
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { cancel(); <-done }) }
}

// listP99 LISTs the pods of every tenant 20 times and returns the p99.
func (d *density) listP99() time.Duration {
	var times []time.Duration
	for _, cs := range d.tenants {
		for range 20 {
			start := time.Now()
			if _, err := cs.CoreV1().Pods("default").List(d.ctx, metav1.ListOptions{}); err != nil {
				d.b.Fatal(err)
			}
			times = append(times, time.Since(start))
		}
	}
	if len(times) == 0 {
		d.b.Fatal("no tenant to LIST")
	}
	return percentile(times, 99)
}
