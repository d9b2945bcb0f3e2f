package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nestdev/nest/internal/devcluster"
	"github.com/nestdev/nest/internal/images"
	"github.com/nestdev/nest/internal/testutil"
	"github.com/nestdev/nest/test/e2e/framework"
)

// TestTwoLocalClusters starts a local cluster and, beside it, a second
// named one standing in for a member cluster (a remote GPU pool): its
// workers advertise fake GPUs, its pods reach the first cluster's API
// server across the two bridges, and its teardown leaves the first
// cluster running.
func TestTwoLocalClusters(t *testing.T) {
	framework.RequireRoot(t)
	t.Parallel()
	clusters := framework.LeaseClusters(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	pid := os.Getpid()
	hostDir := filepath.Join(os.TempDir(), fmt.Sprintf("nest-e2e-twolocalclusters-host-%d", pid))
	memberDir := filepath.Join(os.TempDir(), fmt.Sprintf("nest-e2e-twolocalclusters-member-%d", pid))
	host, member := clusters[0], clusters[1]
	memberCluster := member.Cluster

	var hostUp, memberUp time.Duration
	framework.Concurrently(t,
		func() (err error) {
			hostUp, err = upLocalCluster(t, ctx, hostDir, append(framework.ClusterFlags(host), "--nodes", "1")...)
			return err
		},
		func() (err error) {
			memberUp, err = upLocalCluster(t, ctx, memberDir, memberClusterFlags(member)...)
			return err
		})
	t.Logf("nest dev up, side by side: host cluster %s (1 node) in %s, member cluster %s (2 nodes, --gpus 2) in %s", host.Cluster, hostUp, memberCluster, memberUp)

	hostKubeconfig := devcluster.Layout{Root: hostDir}.AdminKubeconfig()
	memberKubeconfig := devcluster.Layout{Root: memberDir}.AdminKubeconfig()
	hostC := &cluster{t: t, ctx: ctx, cs: clientset(t, hostKubeconfig), kubeconfig: hostKubeconfig}
	memberC := &cluster{t: t, ctx: ctx, cs: clientset(t, memberKubeconfig), kubeconfig: memberKubeconfig}
	hostNodes, err := host.Topology(hostDir, 1)
	if err != nil {
		t.Fatal(err)
	}
	memberNodes, err := member.Topology(memberDir, 2)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("the member cluster has its own addresses and links", func(t *testing.T) {
		out, err := framework.Run(ctx, t, "nest", "dev", "status", "--cluster", memberCluster, "--state-dir", memberDir)
		if err != nil {
			t.Fatalf("status: %v\n%s", err, out)
		}
		for _, want := range []string{fmt.Sprintf("cluster: %s (slot %d)", memberCluster, member.Slot), memberNodes[0].IP.String(), memberNodes[1].IP.String(), "kube-apiserver ready: true"} {
			if !strings.Contains(out, want) {
				t.Errorf("status of the member lacks %q:\n%s", want, out)
			}
		}
		for _, link := range []string{host.Bridge, member.Bridge} {
			if _, err := os.Stat("/sys/class/net/" + link); err != nil {
				t.Errorf("bridge %s: %v", link, err)
			}
		}
	})

	t.Run("the member's worker advertises 2 GPUs", func(t *testing.T) {
		worker := getNode(t, memberC, memberNodes[1].Name)
		for what, list := range map[string]corev1.ResourceList{"capacity": worker.Status.Capacity, "allocatable": worker.Status.Allocatable} {
			if q, ok := list[devcluster.GPUResource]; !ok || q.Value() != 2 {
				t.Errorf("%s %s of %s = %v (present %t), want 2", devcluster.GPUResource, what, worker.Name, q.String(), ok)
			}
		}
		cp := getNode(t, memberC, memberNodes[0].Name)
		if q, ok := cp.Status.Allocatable[devcluster.GPUResource]; ok {
			t.Errorf("the control-plane node advertises %s %s", q.String(), devcluster.GPUResource)
		}
	})

	t.Run("the GPUs survive the kubelet's status update", func(t *testing.T) {
		// The kubelet rewrites its Ready condition on its next status sync;
		// a message of ours there tells when that write has happened.
		name := memberNodes[1].Name
		marker := fmt.Sprintf("nest-e2e-%d", time.Now().UnixNano())
		patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []map[string]string{{"type": string(corev1.NodeReady), "message": marker}}}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := memberC.cs.CoreV1().Nodes().Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		testutil.Eventually(t, 2*time.Minute, "the kubelet rewrote the Ready condition of "+name, func() error {
			n := getNode(t, memberC, name)
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Message == marker {
					return fmt.Errorf("the Ready condition still carries %s", marker)
				}
			}
			return nil
		})
		t.Logf("the kubelet updated the status of %s %.1fs after the marker", name, time.Since(start).Seconds())
		n := getNode(t, memberC, name)
		if q, ok := n.Status.Allocatable[devcluster.GPUResource]; !ok || q.Value() != 2 {
			t.Errorf("after a kubelet status update, allocatable %s = %v (present %t), want 2", devcluster.GPUResource, q.String(), ok)
		}
		if q, ok := n.Status.Capacity[devcluster.GPUResource]; !ok || q.Value() != 2 {
			t.Errorf("after a kubelet status update, capacity %s = %v (present %t), want 2", devcluster.GPUResource, q.String(), ok)
		}
	})

	hostC.createNamespace(testNamespace)
	memberC.createNamespace(testNamespace)
	hostPod := runProbePod(t, hostC, "probe", hostNodes[0].Name)
	memberPod := runProbePod(t, memberC, "probe", memberNodes[1].Name)

	t.Run("a member pod reaches the host cluster's API server on its node IP", func(t *testing.T) {
		assertReachesAPIServer(t, memberC, memberPod, hostNodes[0])
	})

	t.Run("a host-cluster pod reaches the member's API server on its node IP", func(t *testing.T) {
		assertReachesAPIServer(t, hostC, hostPod, memberNodes[0])
	})

	t.Run("down of the member leaves the host cluster working", func(t *testing.T) {
		start := time.Now()
		if out, err := framework.Run(ctx, t, "nest", "dev", "down", "--cluster", memberCluster, "--state-dir", memberDir); err != nil {
			t.Fatalf("nest dev down --cluster %s: %v\n%s", memberCluster, err, out)
		}
		t.Logf("nest dev down of the member took %.1fs", time.Since(start).Seconds())
		assertClusterGone(t, ctx, member, memberDir)
		assertClusterLinks(t, ctx, host, hostNodes)
		out, err := framework.Run(ctx, t, "nest", "dev", "status", "--state-dir", hostDir)
		if err != nil {
			t.Fatalf("status of the host cluster after the member's down: %v\n%s", err, out)
		}
		body, err := hostC.cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err != nil || string(body) != "ok" {
			t.Fatalf("host cluster /readyz = %q, %v", body, err)
		}
		// Its pods still run and its node network still carries traffic.
		if got, err := hostC.execErr(hostPod, "/testapp", "get", fmt.Sprintf("http://%s:8080/hostname", podIP(t, hostC, hostPod))); err != nil || got != hostPod {
			t.Errorf("the host cluster's pod answered %q (%v), want %q", got, err, hostPod)
		}
	})
}

// startLocalCluster runs `nest dev up` with the state directory and args,
// stops the cluster with `nest dev down` (with the same --cluster and --slot) when the
// test ends, and returns how long up took.
func startLocalCluster(t testing.TB, ctx context.Context, stateDir string, args ...string) time.Duration {
	t.Helper()
	took, err := upLocalCluster(t, ctx, stateDir, args...)
	if err != nil {
		t.Fatal(err)
	}
	return took
}

// upLocalCluster is startLocalCluster returning its failure rather than
// failing the test, for framework.Concurrently.
func upLocalCluster(t testing.TB, ctx context.Context, stateDir string, args ...string) (time.Duration, error) {
	t.Helper()
	down := []string{"dev", "down", "--state-dir", stateDir}
	for i, a := range args {
		if (a == "--cluster" || a == "--slot") && i+1 < len(args) {
			down = append(down, a, args[i+1])
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		if out, err := framework.Run(ctx, t, "nest", down...); err != nil {
			t.Errorf("cleanup: nest %s: %v\n%s", strings.Join(down, " "), err, out)
		}
	})
	up := append([]string{"dev", "up", "--state-dir", stateDir}, args...)
	start := time.Now()
	out, err := framework.Run(ctx, t, "nest", up...)
	if err != nil {
		return 0, fmt.Errorf("nest %s: %w\n%s", strings.Join(up, " "), err, out)
	}
	t.Logf("nest %s:\n%s", strings.Join(up, " "), out)
	return time.Since(start).Round(100 * time.Millisecond), nil
}

func getNode(t *testing.T, c *cluster, name string) *corev1.Node {
	t.Helper()
	n, err := c.cs.CoreV1().Nodes().Get(c.ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// runProbePod runs a testapp pod on node and returns its name once it runs.
func runProbePod(t *testing.T, c *cluster, name, node string) string {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNamespace},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{"kubernetes.io/hostname": node},
			Containers:   []corev1.Container{{Name: "testapp", Image: images.TestApp, ImagePullPolicy: corev1.PullNever}},
		},
	}
	if _, err := c.cs.CoreV1().Pods(testNamespace).Create(c.ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 2*time.Minute, "pod "+name+" running on "+node, func() error {
		p, err := c.cs.CoreV1().Pods(testNamespace).Get(c.ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" {
			return fmt.Errorf("pod %s is %s", name, p.Status.Phase)
		}
		return nil
	})
	return name
}

func podIP(t *testing.T, c *cluster, name string) string {
	t.Helper()
	p, err := c.cs.CoreV1().Pods(testNamespace).Get(c.ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p.Status.PodIP
}

// assertReachesAPIServer checks that pod, in c, gets the version of the API
// server on the other cluster's control-plane node cp over HTTPS.
func assertReachesAPIServer(t *testing.T, c *cluster, pod string, cp devcluster.Node) {
	t.Helper()
	url := devcluster.APIServerURL(cp) + "/version"
	start := time.Now()
	var body string
	testutil.Eventually(t, 30*time.Second, "GET "+url+" from pod "+pod, func() error {
		out, err := c.execErr(pod, "/testapp", "get-insecure", url)
		body = out
		return err
	})
	// Only a kube-apiserver answers /version with these fields.
	var v struct {
		Major    string `json:"major"`
		Minor    string `json:"minor"`
		Platform string `json:"platform"`
	}
	if err := json.Unmarshal([]byte(body), &v); err != nil || v.Major != "1" || v.Minor == "" || v.Platform == "" {
		t.Fatalf("GET %s answered %q (%v), want a Kubernetes version", url, body, err)
	}
	t.Logf("pod %s got version %s.%s from %s in %.1fs", pod, v.Major, v.Minor, url, time.Since(start).Seconds())
}

// assertClusterGone checks that nothing of the cluster with addressing a
// is left: links, network namespaces, nftables table, cgroups, state.
func assertClusterGone(t *testing.T, ctx context.Context, a devcluster.Addressing, stateDir string) {
	t.Helper()
	if _, err := os.Stat("/sys/class/net/" + a.Bridge); err == nil {
		t.Errorf("bridge %s remains", a.Bridge)
	}
	entries, err := os.ReadDir("/run/netns")
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), a.NetnsPrefix) {
			t.Errorf("network namespace %s remains", e.Name())
		}
	}
	if exec.CommandContext(ctx, "nft", "list", "table", "inet", a.ForwardTable).Run() == nil {
		t.Errorf("nftables table inet %s remains", a.ForwardTable)
	}
	layout, err := devcluster.CurrentCgroupLayout()
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range layout.Hierarchies() {
		if _, err := os.Stat(filepath.Join(h, a.CgroupParent)); err == nil {
			t.Errorf("cgroup %s/%s remains", h, a.CgroupParent)
		}
	}
	if _, err := os.Stat(stateDir); err == nil {
		t.Errorf("state directory %s remains", stateDir)
	}
}

// assertClusterLinks checks that the cluster with addressing a still has
// its bridge, node namespaces, nftables table and cgroups.
func assertClusterLinks(t *testing.T, ctx context.Context, a devcluster.Addressing, nodes []devcluster.Node) {
	t.Helper()
	if _, err := os.Stat("/sys/class/net/" + a.Bridge); err != nil {
		t.Errorf("bridge %s: %v", a.Bridge, err)
	}
	for _, n := range nodes {
		if _, err := os.Stat(n.NetnsPath()); err != nil {
			t.Errorf("network namespace of %s: %v", n.Name, err)
		}
	}
	if err := exec.CommandContext(ctx, "nft", "list", "table", "inet", a.ForwardTable).Run(); err != nil {
		t.Errorf("nftables table inet %s: %v", a.ForwardTable, err)
	}
	layout, err := devcluster.CurrentCgroupLayout()
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range layout.Hierarchies() {
		if _, err := os.Stat(filepath.Join(h, a.CgroupParent)); err != nil {
			t.Errorf("cgroup %s/%s: %v", h, a.CgroupParent, err)
		}
	}
}
