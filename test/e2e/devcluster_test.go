package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/nestdev/nest/internal/devcluster"
	"github.com/nestdev/nest/internal/images"
	"github.com/nestdev/nest/internal/testutil"
	"github.com/nestdev/nest/test/e2e/framework"
)

const testNamespace = "e2e"

// TestLocalHostCluster starts a two-node local host cluster and checks what
// issue 2 asks of it, then that `nest dev down` leaves nothing behind.
func TestLocalHostCluster(t *testing.T) {
	framework.RequireRoot(t)
	t.Parallel()
	// The default cluster, on purpose: its names and ranges are checked.
	framework.LeaseDefaultCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	stateDir := filepath.Join(os.TempDir(), fmt.Sprintf("nest-e2e-devcluster-%d", os.Getpid()))
	down := func() (string, error) {
		// Its own context: cleanup runs after ctx is cancelled.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		return framework.Run(ctx, t, "nest", "dev", "down", "--state-dir", stateDir)
	}
	t.Cleanup(func() {
		if out, err := down(); err != nil {
			t.Errorf("cleanup: nest dev down: %v\n%s", err, out)
		}
	})

	out, err := framework.Run(ctx, t, "nest", "dev", "up", "--nodes", "2", "--state-dir", stateDir)
	if err != nil {
		t.Fatalf("nest dev up: %v\n%s", err, out)
	}
	t.Logf("nest dev up:\n%s", out)
	kubeconfig := devcluster.Layout{Root: stateDir}.AdminKubeconfig()
	cs := clientset(t, kubeconfig)
	c := &cluster{t: t, ctx: ctx, cs: cs, kubeconfig: kubeconfig}

	t.Run("up is idempotent", func(t *testing.T) {
		before := recordedPIDs(t, stateDir)
		out, err := framework.Run(ctx, t, "nest", "dev", "up", "--nodes", "2", "--state-dir", stateDir)
		if err != nil || !strings.Contains(out, "already running") {
			t.Fatalf("second up: err=%v, want 'already running' in:\n%s", err, out)
		}
		if after := recordedPIDs(t, stateDir); !equalMaps(before, after) {
			t.Fatalf("second up changed the processes: before %v, after %v", before, after)
		}
	})

	t.Run("status reports the nodes", func(t *testing.T) {
		out, err := framework.Run(ctx, t, "nest", "dev", "status", "--state-dir", stateDir)
		if err != nil {
			t.Fatalf("status: %v\n%s", err, out)
		}
		for _, want := range []string{"nest-control-plane", "nest-worker", "control-plane", "kube-apiserver ready: true"} {
			if !strings.Contains(out, want) {
				t.Errorf("status output lacks %q:\n%s", want, out)
			}
		}
		path, err := framework.Run(ctx, t, "nest", "dev", "kubeconfig", "--state-dir", stateDir)
		if err != nil || strings.TrimSpace(path) != kubeconfig {
			t.Errorf("kubeconfig = %q, %v; want %s", path, err, kubeconfig)
		}
	})

	t.Run("every node runs the NetworkPolicy enforcer with its rules", func(t *testing.T) {
		procs := recordedPIDs(t, stateDir)
		nodes, err := devcluster.Topology(stateDir, 2)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range nodes {
			if p, ok := procs[n.Name+"."+devcluster.NetworkPolicyTable]; !ok || !p.Alive() {
				t.Errorf("node %s: no live enforcer process (recorded: %v)", n.Name, ok)
			}
			nft := exec.CommandContext(ctx, "nsenter", "--net="+n.NetnsPath(), "--", "nft", "list", "table", "inet", devcluster.NetworkPolicyTable).Run()
			ipt := exec.CommandContext(ctx, "nsenter", "--net="+n.NetnsPath(), "--", "iptables", "-w", "-n", "-L", devcluster.DivertChain).Run()
			if nft != nil && ipt != nil {
				t.Errorf("node %s: neither the enforcer's nftables table (%v) nor the diversion chain NEST-NETPOL (%v)", n.Name, nft, ipt)
			}
		}
	})

	c.createNamespace(testNamespace)
	var pods []corev1.Pod
	t.Run("deployment runs pods on both nodes", func(t *testing.T) {
		pods = c.spreadDeployment("web", 2)
	})
	if len(pods) != 2 {
		t.Fatal("no pods on both nodes; the tests below need them")
	}
	a, b := pods[0], pods[1]

	t.Run("pod reaches a pod on the other node", func(t *testing.T) {
		got := c.exec(a.Name, "/testapp", "get", fmt.Sprintf("http://%s:8080/hostname", b.Status.PodIP))
		if got != b.Name {
			t.Fatalf("pod %s on %s asked %s on %s for its hostname and got %q", a.Name, a.Spec.NodeName, b.Name, b.Spec.NodeName, got)
		}
	})

	svc := c.createService("web", corev1.ServiceTypeClusterIP)
	t.Run("ClusterIP service is reached by DNS name", func(t *testing.T) {
		url := fmt.Sprintf("http://web.%s.svc.%s/hostname", testNamespace, devcluster.ClusterDomain)
		testutil.Eventually(t, 30*time.Second, "service by DNS name", func() error {
			got, err := c.execErr(a.Name, "/testapp", "get", url)
			if err != nil {
				return err
			}
			if got != a.Name && got != b.Name {
				return fmt.Errorf("GET %s answered %q, not one of the pods", url, got)
			}
			return nil
		})
		if svc.Spec.ClusterIP == "" {
			t.Fatal("service has no ClusterIP")
		}
	})

	t.Run("NodePort is reached from the root network namespace", func(t *testing.T) {
		np := c.createService("web-nodeport", corev1.ServiceTypeNodePort)
		port := np.Spec.Ports[0].NodePort
		nodes, err := devcluster.Topology(stateDir, 2)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range nodes {
			waitAnsweredByPods(t, ctx, "NodePort on "+n.Name, fmt.Sprintf("http://%s:%d/hostname", n.IP, port), a, b)
		}
	})

	t.Run("a LoadBalancer Service gets an address from the pool, reached from the machine", func(t *testing.T) {
		c.createService("web-lb", corev1.ServiceTypeLoadBalancer)
		first, last := devcluster.DefaultAddressing().LoadBalancerRange()
		var ip netip.Addr
		testutil.Eventually(t, time.Minute, "a LoadBalancer address", func() error {
			svc, err := cs.CoreV1().Services(testNamespace).Get(ctx, "web-lb", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if len(svc.Status.LoadBalancer.Ingress) == 0 {
				return errors.New("no ingress address yet")
			}
			ip, err = netip.ParseAddr(svc.Status.LoadBalancer.Ingress[0].IP)
			return err
		})
		if ip.Less(first) || last.Less(ip) {
			t.Fatalf("LoadBalancer address %s is outside the pool %s-%s", ip, first, last)
		}
		// The Service's port (80), which the node's kube-proxy forwards from
		// the address the announcing node answers ARP for.
		waitAnsweredByPods(t, ctx, "the Service at its LoadBalancer address", fmt.Sprintf("http://%s/hostname", ip), a, b)
		out, err := framework.Run(ctx, t, "nest", "dev", "status", "--state-dir", stateDir)
		if err != nil || !strings.Contains(out, "MetalLB") || !strings.Contains(out, testNamespace+"/web-lb "+ip.String()) {
			t.Errorf("status does not show the load balancer and the Service's address %s (%v):\n%s", ip, err, out)
		}
	})

	t.Run("kubectl logs and exec", func(t *testing.T) {
		if got := c.exec(a.Name, "/testapp", "get", "http://127.0.0.1:8080/echo?msg=nest-exec"); got != "nest-exec" {
			t.Fatalf("kubectl exec echo = %q, want nest-exec", got)
		}
		testutil.Eventually(t, 30*time.Second, "request in kubectl logs", func() error {
			logs, err := framework.Kubectl(ctx, kubeconfig, "-n", testNamespace, "logs", a.Name)
			if err != nil {
				return err
			}
			if !strings.Contains(logs, "path=/echo") {
				return fmt.Errorf("logs of %s lack the echo request:\n%s", a.Name, logs)
			}
			return nil
		})
	})

	token := fmt.Sprintf("written-%d", time.Now().UnixNano())
	t.Run("volume data survives pod recreation", func(t *testing.T) {
		c.createClaim("data")
		c.runToCompletion("writer", "data", "echo "+token+" > /data/token && echo written")
		got := c.runToCompletion("reader", "data", "cat /data/token")
		if strings.TrimSpace(got) != token {
			t.Fatalf("the second pod read %q from the volume, want %q", got, token)
		}
	})

	t.Run("up recovers after every process was killed", func(t *testing.T) {
		killAll(t, recordedPIDs(t, stateDir))
		out, err := framework.Run(ctx, t, "nest", "dev", "up", "--nodes", "2", "--state-dir", stateDir)
		if err != nil {
			t.Fatalf("up after a crash: %v\n%s", err, out)
		}
		// etcd data and volumes are kept: the claim and its data are still there.
		if got := c.runToCompletion("reader-after-crash", "data", "cat /data/token"); strings.TrimSpace(got) != token {
			t.Fatalf("after the crash the volume holds %q, want %q", got, token)
		}
	})

	t.Run("up recovers after up itself was killed half-way", func(t *testing.T) {
		killAll(t, recordedPIDs(t, stateDir))
		before := recordedPIDs(t, stateDir)["kube-apiserver"]
		up := exec.CommandContext(ctx, filepath.Join(framework.BinDir(), "nest"), "dev", "up", "--nodes", "2", "--state-dir", stateDir)
		if err := up.Start(); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, time.Minute, "a new kube-apiserver started", func() error {
			p, ok := recordedPIDs(t, stateDir)["kube-apiserver"]
			if !ok || p.PID == before.PID || !p.Alive() {
				return fmt.Errorf("no new kube-apiserver yet")
			}
			return nil
		})
		if err := up.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		_ = up.Wait()
		out, err := framework.Run(ctx, t, "nest", "dev", "up", "--nodes", "2", "--state-dir", stateDir)
		if err != nil {
			t.Fatalf("up after a killed up: %v\n%s", err, out)
		}
		if out, err := framework.Run(ctx, t, "nest", "dev", "status", "--state-dir", stateDir); err != nil {
			t.Fatalf("status after recovery: %v\n%s", err, out)
		}
	})

	t.Run("down leaves nothing behind", func(t *testing.T) {
		pids := recordedPIDs(t, stateDir)
		if len(pids) == 0 {
			t.Fatal("no processes recorded before down")
		}
		if out, err := down(); err != nil {
			t.Fatalf("nest dev down: %v\n%s", err, out)
		}
		assertNothingLeft(t, stateDir, pids)
	})
}

// cluster drives the local host cluster through its API and kubectl.
type cluster struct {
	t          *testing.T
	ctx        context.Context
	cs         kubernetes.Interface
	kubeconfig string
}

func clientset(t testing.TB, kubeconfig string) kubernetes.Interface {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func (c *cluster) createNamespace(name string) {
	c.t.Helper()
	_, err := c.cs.CoreV1().Namespaces().Create(c.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
}

// spreadDeployment runs replicas testapp pods, at most one per node, and
// returns them once all are Running and ready.
func (c *cluster) spreadDeployment(name string, replicas int32) []corev1.Pod {
	c.t.Helper()
	labels := map[string]string{"app": name}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNamespace},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Affinity: &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
						RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
							LabelSelector: &metav1.LabelSelector{MatchLabels: labels},
							TopologyKey:   "kubernetes.io/hostname",
						}},
					}},
					Containers: []corev1.Container{{
						Name: "web", Image: images.TestApp, ImagePullPolicy: corev1.PullNever,
						Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
						ReadinessProbe: &corev1.Probe{
							ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080)}},
							PeriodSeconds: 1,
						},
					}},
				},
			},
		},
	}
	if _, err := c.cs.AppsV1().Deployments(testNamespace).Create(c.ctx, d, metav1.CreateOptions{}); err != nil {
		c.t.Fatal(err)
	}
	var pods []corev1.Pod
	testutil.Eventually(c.t, 2*time.Minute, "deployment pods ready on distinct nodes", func() error {
		list, err := c.cs.CoreV1().Pods(testNamespace).List(c.ctx, metav1.ListOptions{LabelSelector: "app=" + name})
		if err != nil {
			return err
		}
		pods = pods[:0]
		nodes := map[string]bool{}
		for _, p := range list.Items {
			if p.Status.Phase == corev1.PodRunning && podReady(&p) {
				pods = append(pods, p)
				nodes[p.Spec.NodeName] = true
			}
		}
		if len(pods) != int(replicas) || len(nodes) != int(replicas) {
			return fmt.Errorf("%d ready pods on %d nodes, want %d on %d", len(pods), len(nodes), replicas, replicas)
		}
		return nil
	})
	return pods
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func (c *cluster) createService(name string, typ corev1.ServiceType) *corev1.Service {
	c.t.Helper()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNamespace},
		Spec: corev1.ServiceSpec{
			Type:     typ,
			Selector: map[string]string{"app": "web"},
			Ports:    []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}
	created, err := c.cs.CoreV1().Services(testNamespace).Create(c.ctx, svc, metav1.CreateOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	return created
}

func (c *cluster) exec(pod string, command ...string) string {
	c.t.Helper()
	out, err := c.execErr(pod, command...)
	if err != nil {
		c.t.Fatal(err)
	}
	return out
}

func (c *cluster) execErr(pod string, command ...string) (string, error) {
	args := append([]string{"-n", testNamespace, "exec", pod, "--"}, command...)
	return framework.Kubectl(c.ctx, c.kubeconfig, args...)
}

func (c *cluster) createClaim(name string) {
	c.t.Helper()
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNamespace},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("16Mi")}},
		},
	}
	if _, err := c.cs.CoreV1().PersistentVolumeClaims(testNamespace).Create(c.ctx, pvc, metav1.CreateOptions{}); err != nil {
		c.t.Fatal(err)
	}
}

// runToCompletion runs script in a busybox pod with claim mounted at /data,
// waits for it to succeed, returns its log and deletes the pod.
func (c *cluster) runToCompletion(name, claim, script string) string {
	c.t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNamespace},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name: "main", Image: images.Busybox, ImagePullPolicy: corev1.PullNever,
				Command:      []string{"sh", "-c", script},
				VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
			}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim},
			}}},
		},
	}
	pods := c.cs.CoreV1().Pods(testNamespace)
	if _, err := pods.Create(c.ctx, pod, metav1.CreateOptions{}); err != nil {
		c.t.Fatal(err)
	}
	testutil.Eventually(c.t, 2*time.Minute, "pod "+name+" succeeded", func() error {
		p, err := pods.Get(c.ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		switch p.Status.Phase {
		case corev1.PodSucceeded:
			return nil
		case corev1.PodFailed:
			c.t.Fatalf("pod %s failed: %+v", name, p.Status)
		}
		return fmt.Errorf("pod %s is %s", name, p.Status.Phase)
	})
	// Every script prints; right after a kubelet restart its log can read
	// back empty for a moment, so poll until it is there.
	var logs string
	testutil.Eventually(c.t, 30*time.Second, "logs of pod "+name, func() error {
		out, err := framework.Kubectl(c.ctx, c.kubeconfig, "-n", testNamespace, "logs", name)
		if err != nil {
			return err
		}
		if strings.TrimSpace(out) == "" {
			return fmt.Errorf("pod %s has no output yet", name)
		}
		logs = out
		return nil
	})
	if err := pods.Delete(c.ctx, name, metav1.DeleteOptions{}); err != nil {
		c.t.Fatal(err)
	}
	testutil.Eventually(c.t, time.Minute, "pod "+name+" deleted", func() error {
		if _, err := pods.Get(c.ctx, name, metav1.GetOptions{}); err == nil {
			return fmt.Errorf("pod %s still exists", name)
		}
		return nil
	})
	return logs
}

func httpGet(ctx context.Context, url string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return string(body), err
}

// killAll sends SIGKILL to the recorded processes, as a crash would, and waits
// until they are gone.
func killAll(t *testing.T, procs map[string]devcluster.Process) {
	t.Helper()
	for _, p := range procs {
		if p.Alive() {
			_ = syscall.Kill(p.PID, syscall.SIGKILL)
		}
	}
	testutil.Eventually(t, 30*time.Second, "killed processes gone", func() error {
		for name, p := range procs {
			if p.Alive() {
				return fmt.Errorf("%s (pid %d) still runs", name, p.PID)
			}
		}
		return nil
	})
}

// recordedPIDs reads the process records under the state directory: name -> process.
func recordedPIDs(t testing.TB, stateDir string) map[string]devcluster.Process {
	t.Helper()
	procs, err := devcluster.RecordedProcesses(devcluster.Layout{Root: stateDir})
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]devcluster.Process, len(procs))
	for _, p := range procs {
		out[p.Name] = p
	}
	return out
}

func equalMaps(a, b map[string]devcluster.Process) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w.PID != v.PID || w.StartTime != v.StartTime {
			return false
		}
	}
	return true
}

// assertNothingLeft checks that no recorded process runs and that no network
// namespace, link, mount, cgroup or state directory of the cluster remains.
func assertNothingLeft(t *testing.T, stateDir string, pids map[string]devcluster.Process) {
	t.Helper()
	for name, p := range pids {
		if p.Alive() {
			t.Errorf("process %s (pid %d) still runs", name, p.PID)
		}
	}
	if entries, err := os.ReadDir("/run/netns"); err == nil {
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), "nestdev-") {
				t.Errorf("network namespace %s remains", e.Name())
			}
		}
	}
	if _, err := os.Stat("/sys/class/net/nestdev0"); err == nil {
		t.Error("bridge nestdev0 remains")
	}
	if exec.Command("nft", "list", "table", "inet", devcluster.DefaultAddressing().ForwardTable).Run() == nil {
		t.Error("nftables table inet nest-dev remains")
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(mounts), stateDir) {
		t.Errorf("mounts under %s remain", stateDir)
	}
	layout, err := devcluster.CurrentCgroupLayout()
	if err != nil {
		t.Fatal(err)
	}
	if len(layout.Hierarchies()) == 0 {
		t.Fatal("no cgroup hierarchy is mounted, so none could be checked")
	}
	for _, h := range layout.Hierarchies() {
		if _, err := os.Stat(filepath.Join(h, "nest-dev")); err == nil {
			t.Errorf("cgroup %s/nest-dev remains", h)
		}
	}
	if _, err := os.Stat(stateDir); err == nil {
		t.Errorf("state directory %s remains", stateDir)
	}
}

// waitAnsweredByPods polls url from this machine until it answers with the
// name of one of pods (testapp's /hostname), for at most 30 s.
func waitAnsweredByPods(t *testing.T, ctx context.Context, what, url string, pods ...corev1.Pod) {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, what, func() error {
		got, err := httpGet(ctx, url)
		if err != nil {
			return err
		}
		if !slices.ContainsFunc(pods, func(p corev1.Pod) bool { return p.Name == got }) {
			return fmt.Errorf("GET %s answered %q, not one of the pods", url, got)
		}
		return nil
	})
}
