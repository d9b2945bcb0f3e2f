package peers_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nestdev/nest/internal/devcluster"
	"github.com/nestdev/nest/internal/images"
	"github.com/nestdev/nest/internal/version"
	"github.com/nestdev/nest/test/e2e/framework"
	"github.com/nestdev/nest/test/e2e/peers"
)

// repoRoot is the repository's root, from this package's directory, where
// go test runs it (a path from runtime.Caller is module-relative under
// -trimpath).
const repoRoot = "../../.."

// VClusterVersion is the vcluster release measured: the version
// k8s/vcluster/go.mod pins (TestTheMeasuredVClusterIsThePinnedOne).
const VClusterVersion = "v0.36.1"

// The images vcluster's chart runs here, built from local binaries.
var vclusterImages = peers.VClusterImages{
	Syncer:     "nest.local/peers/vcluster-oss:" + strings.TrimPrefix(VClusterVersion, "v"),
	Kubernetes: "nest.local/peers/vcluster-kubernetes:" + version.Kubernetes,
	CoreDNS:    "nest.local/peers/coredns:1.14.2",
	Shell:      images.Busybox,
}

// BenchmarkPeers measures Nest and vcluster side by side on one local host
// cluster, one after the other, with the same suite (peersSuite), and
// logs the table of docs/performance.md. Run it with `make bench-peers`.
func BenchmarkPeers(b *testing.B) {
	framework.RequireRoot(b)
	ctx := context.Background()
	stateDir := filepath.Join(os.TempDir(), fmt.Sprintf("nest-bench-peers-%d", os.Getpid()))
	if out, err := framework.Run(ctx, b, "nest", "dev", "up", "--nodes", "2", "--with-nest", "--state-dir", stateDir); err != nil {
		b.Fatalf("up: %v\n%s", err, out)
	}
	b.Cleanup(func() { _, _ = framework.Run(ctx, b, "nest", "dev", "down", "--state-dir", stateDir) })
	kubeconfig := devcluster.Layout{Root: stateDir}.AdminKubeconfig()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		b.Fatal(err)
	}
	hostCS := kubernetes.NewForConfigOrDie(cfg)
	importPeerImages(b, ctx, stateDir)
	address := nodeAddress(b, ctx, hostCS)
	systems := []peers.System{
		&peers.Nest{Host: framework.HostClient(b, kubeconfig), HostCS: hostCS, Resources: nestShare},
		&peers.VCluster{ChartDir: vclusterChart(b), Values: peers.VClusterValues(vclusterImages, address),
			HostKubeconfig: kubeconfig, HostCS: hostCS, NodeAddress: address},
	}
	if only := os.Getenv("NEST_PEERS_ONLY"); only != "" {
		// A development aid: one system alone, to try a change to it.
		systems = slices.DeleteFunc(systems, func(s peers.System) bool { return !slices.Contains(strings.Split(only, ","), s.Name()) })
	}
	o := peers.Options{Timeout: 5 * time.Minute}
	onHost := hostPodStarts(b, ctx, hostCS, o)
	for i := 0; i < b.N; i++ {
		rows, err := peers.Run(ctx, systems, peersSuite(hostCS, onHost, o, b.Logf))
		if err != nil {
			b.Fatal(err)
		}
		var names []string
		for _, s := range systems {
			names = append(names, s.Name())
		}
		b.Logf("%s, %s, %s:\n%s", time.Now().UTC().Format(time.DateOnly), version.Nest, machine(), peers.Markdown(rows, names))
		for _, r := range rows {
			for sys, v := range r.Values {
				b.ReportMetric(v, metricName(sys, r))
			}
		}
	}
}

// testPod is the pod every workload row starts: small, with requests and
// limits of its own, so that 200 fit on the two-core host whatever
// defaults a system gives a container (Nest's give each 500m of CPU
// limit, of a tenant's 4 times its share).
var testPod = peers.PodTemplate{Image: images.TestApp, Resources: corev1.ResourceRequirements{
	Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1m"), corev1.ResourceMemory: resource.MustParse("8Mi")},
	Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("20m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
}}

// nestShare is each Nest tenant's share of the host: room for the 200-pod
// burst (the default virtual node holds 110 pods). vcluster's chart sets
// no quota.
var nestShare = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("8Gi"), corev1.ResourcePods: resource.MustParse("250")}

// hostPodStarts measures pod create → Running straight on the host, the
// figure each tenant's is compared with.
func hostPodStarts(b *testing.B, ctx context.Context, host kubernetes.Interface, o peers.Options) []time.Duration {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "peers-host"}}
	if _, err := host.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		b.Fatal(err)
	}
	if err := peers.WaitServiceAccount(ctx, host, ns.Name, peers.Options{Timeout: time.Minute}); err != nil {
		b.Fatal(err)
	}
	starts, err := peers.PodStarts(ctx, host, ns.Name, "host", 50, testPod, o)
	if err != nil {
		b.Fatalf("pod starts on the host: %v", err)
	}
	return starts
}

// peersSuite is what is measured of each system, in this order; logf
// says what a figure alone does not.
func peersSuite(host kubernetes.Interface, onHost []time.Duration, o peers.Options, logf func(string, ...any)) peers.Suite {
	return func(ctx context.Context, s peers.System, rec peers.Recorder) error {
		var creates, deletes []time.Duration
		for i := range 3 {
			d, err := peers.CreateToReady(ctx, s, fmt.Sprintf("p%d", i), o)
			if err != nil {
				return err
			}
			creates = append(creates, d)
		}
		rec.Record("create → API answers with a Ready node (median of 3, one after another)", "s", peers.Median(creates).Seconds())
		for _, name := range []string{"p1", "p2"} {
			d, err := peers.DeleteToGone(ctx, s, name, o)
			if err != nil {
				return err
			}
			deletes = append(deletes, d)
		}
		idle, err := settledWorkingSet(ctx, host, s, "p0")
		if err != nil {
			return err
		}
		rec.Record("idle control plane: working set of the tenant's host pods", "MiB", idle)

		cfg, err := s.Config(ctx, "p0")
		if err != nil {
			return err
		}
		// client-go's default 5 calls a second would measure the client.
		cfg.QPS, cfg.Burst = 500, 1000
		tenant, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return err
		}
		if err := peers.WaitServiceAccount(ctx, tenant, metav1.NamespaceDefault, o); err != nil {
			return err
		}
		starts, err := peers.PodStarts(ctx, tenant, metav1.NamespaceDefault, "start", 50, testPod, o)
		if err != nil {
			return err
		}
		rec.Record("pod create → Running through the tenant, minus on the host: p50 (50 pods)", "ms", ms(peers.Median(starts)-peers.Median(onHost)))
		rec.Record("pod create → Running through the tenant, minus on the host: p99 (50 pods)", "ms", ms(peers.Quantile(starts, 0.99)-peers.Quantile(onHost, 0.99)))
		burst, err := peers.Burst(ctx, tenant, metav1.NamespaceDefault, "burst", 200, testPod, o)
		if err != nil {
			return err
		}
		rec.Record("200-pod burst: create → all Running", "s", burst.Seconds())

		for i := 1; i < 5; i++ {
			if _, err := peers.CreateToReady(ctx, s, fmt.Sprintf("i%d", i), o); err != nil {
				return err
			}
		}
		total := idle
		for i := 1; i < 5; i++ {
			w, err := settledWorkingSet(ctx, host, s, fmt.Sprintf("i%d", i))
			if err != nil {
				return err
			}
			total += w
		}
		rec.Record("idle control plane per tenant, 5 tenants", "MiB", total/5)
		lists, err := peers.ListLatencies(ctx, tenant, 200)
		if err != nil {
			return err
		}
		rec.Record("tenant API LIST pods p99, 5 tenants idle beside it", "ms", ms(peers.Quantile(lists, 0.99)))

		for _, name := range []string{"p0", "i1", "i2", "i3", "i4"} {
			d, err := peers.DeleteToGone(ctx, s, name, o)
			if err != nil {
				return err
			}
			deletes = append(deletes, d)
		}
		rec.Record("delete → every host object gone (median of 7)", "s", peers.Median(deletes).Seconds())

		if densityMax == 0 {
			return nil
		}
		fitted, stop, err := peers.Density(ctx, s, 10, testPod, peers.DensityLimits{Max: densityMax, MemoryUsed: hostMemoryUsed, MemoryShare: 0.8,
			Wait: peers.Options{Timeout: 2 * time.Minute}})
		if err != nil {
			return err
		}
		logf("%s density: %d tenants, stopped by %s", s.Name(), fitted, stop)
		rec.Record("density: tenants with 10 pods each, made one after another until one is not Ready within 2 minutes or 80% of the host's memory is used", "tenants", float64(fitted))
		return nil
	}
}

// densityMax is the most tenants the density row makes of each system:
// $NEST_PEERS_DENSITY_MAX, 60 by default; 0 leaves the row out, to try a
// change to the other rows in minutes.
var densityMax = func() int {
	if v, err := strconv.Atoi(os.Getenv("NEST_PEERS_DENSITY_MAX")); err == nil && v >= 0 {
		return v
	}
	return 60
}()

// hostMemoryUsed is the share of this machine's memory in use, 0 to 1
// (MemTotal less MemAvailable): every node of the local host cluster
// shares it.
func hostMemoryUsed() (float64, error) {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	fields := map[string]float64{}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 {
			v, _ := strconv.ParseFloat(f[1], 64)
			fields[strings.TrimSuffix(f[0], ":")] = v
		}
	}
	if fields["MemTotal"] == 0 {
		return 0, fmt.Errorf("/proc/meminfo has no MemTotal")
	}
	return (fields["MemTotal"] - fields["MemAvailable"]) / fields["MemTotal"], nil
}

// settledWorkingSet is peers.IdleWorkingSet of tenant name once it has
// settled: two readings 5 seconds apart within 2% of each other, or the
// last of 24.
func settledWorkingSet(ctx context.Context, host kubernetes.Interface, s peers.System, name string) (float64, error) {
	ws := func(p *corev1.Pod) (float64, error) {
		b, err := framework.PodWorkingSet(string(p.UID))
		return float64(b), err
	}
	prev, err := peers.IdleWorkingSet(ctx, host, s, name, ws)
	if err != nil {
		return 0, err
	}
	for range 24 {
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(5 * time.Second): // a measurement interval, not synchronisation
		}
		cur, err := peers.IdleWorkingSet(ctx, host, s, name, ws)
		if err != nil {
			return 0, err
		}
		if cur/prev < 1.02 && prev/cur < 1.02 {
			return cur, nil
		}
		prev = cur
	}
	return prev, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// nodeAddress is the InternalIP of a Ready host node, where NodePorts are
// reached.
func nodeAddress(b *testing.B, ctx context.Context, host kubernetes.Interface) string {
	nodes, err := host.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range nodes.Items {
		for _, a := range n.Status.Addresses {
			if a.Type == corev1.NodeInternalIP {
				return a.Address
			}
		}
	}
	b.Fatal("no host node has an InternalIP")
	return ""
}

// vclusterChart is the chart directory of the vcluster module k8s/vcluster
// pins, in the module cache.
func vclusterChart(b *testing.B) string {
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/loft-sh/vcluster")
	cmd.Dir = filepath.Join(repoRoot, "k8s", "vcluster")
	out, err := cmd.Output()
	if err != nil {
		b.Fatalf("find vcluster's module (make build-peers downloads it): %v", err)
	}
	dir, err := peers.ChartDir(strings.TrimSpace(string(out)))
	if err != nil {
		b.Fatal(err)
	}
	return dir
}

// importPeerImages builds vcluster's images from _output/peers (make
// build-peers) and imports them into every node of the local host cluster.
func importPeerImages(b *testing.B, ctx context.Context, stateDir string) {
	bin := framework.BinDir()
	peersDir := filepath.Join(filepath.Dir(bin), "peers")
	busybox := filepath.Join(bin, "busybox")
	applets, err := images.BusyboxApplets(ctx, busybox)
	if err != nil {
		b.Fatal(err)
	}
	k8s := []images.File{{Path: "/tmp", Dir: true, Mode: 0o1777}, {Path: "/bin/busybox", Source: busybox, Mode: 0o755}}
	for _, a := range applets {
		if a != "busybox" {
			k8s = append(k8s, images.File{Path: "/bin/" + a, Link: "busybox"})
		}
	}
	for _, c := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kine"} {
		k8s = append(k8s, images.File{Path: "/kubernetes/" + c, Source: filepath.Join(peersDir, c), Mode: 0o755})
	}
	specs := []images.Spec{
		{Name: vclusterImages.CoreDNS, Files: []images.File{{Path: "/tmp", Dir: true, Mode: 0o1777},
			{Path: "/coredns", Source: filepath.Join(peersDir, "coredns"), Mode: 0o755}},
			Entrypoint: []string{"/coredns"}},
		{Name: vclusterImages.Syncer, Files: []images.File{{Path: "/tmp", Dir: true, Mode: 0o1777},
			{Path: "/vcluster", Source: filepath.Join(peersDir, "vcluster"), Mode: 0o755}},
			Entrypoint: []string{"/vcluster", "start"}},
		{Name: vclusterImages.Kubernetes, Files: k8s},
	}
	dir := filepath.Join(filepath.Dir(bin), "images")
	var tarballs []string
	for _, s := range specs {
		t, err := images.Build(s, dir)
		if err != nil {
			b.Fatalf("build image %s (run make build-peers first): %v", s.Name, err)
		}
		tarballs = append(tarballs, t)
	}
	if err := devcluster.ImportImages(ctx, stateDir, tarballs); err != nil {
		b.Fatal(err)
	}
}

// machine says what the figures were measured on.
func machine() string {
	cpus := strconv.Itoa(runtime.NumCPU())
	mem := "?"
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		if f := strings.Fields(strings.SplitN(string(data), "\n", 2)[0]); len(f) >= 2 {
			if kb, err := strconv.ParseFloat(f[1], 64); err == nil {
				mem = fmt.Sprintf("%.0f GiB", kb/(1<<20))
			}
		}
	}
	return cpus + " cores, " + mem
}

// metricName is a benchmark metric name for system's figure of row.
func metricName(system string, r peers.Row) string {
	words := strings.FieldsFunc(strings.ToLower(r.Name), func(c rune) bool {
		return !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9')
	})
	return r.Unit + "-" + strings.ToLower(system) + "-" + strings.Join(words, "-")
}

// The vcluster measured, and whose images are named for it, is the one
// k8s/vcluster pins.
func TestTheMeasuredVClusterIsThePinnedOne(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoRoot, "k8s", "vcluster", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "github.com/loft-sh/vcluster " + VClusterVersion; !strings.Contains(string(data), want) {
		t.Errorf("k8s/vcluster/go.mod does not require %q: VClusterVersion and the module drifted", want)
	}
}
