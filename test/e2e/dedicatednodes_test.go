package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/devcluster"
	"github.com/nestdev/nest/internal/images"
	"github.com/nestdev/nest/internal/testutil"
	"github.com/nestdev/nest/test/e2e/framework"
)

// dedicatedLabel marks the host worker the test promotes; the promote
// policy selects it, and it must be back on the host Node after release.
const dedicatedLabel = "e2e.nest.dev/pool"

// TestDedicatedNodes promotes a worker of a three-node local host cluster
// into a tenant cluster with `nest scale --nodes 1` and releases it with
// `--nodes 0`, on real parts: nest-agent, the kubelets' TLS bootstrapping
// with bootstrap tokens, and the tenant's and the host's API servers.
func TestDedicatedNodes(t *testing.T) {
	framework.RequireRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	stateDir := framework.StartHostCluster(t, ctx, "--with-nest", "--nodes", "3")
	host, _, nest := framework.NestOn(t, ctx, stateDir)
	tn := &framework.Tenant{Name: "gamma", Dir: t.TempDir()}
	if out, err := nest("create", tn.Name, "--wait", "--timeout", "4m"); err != nil {
		t.Fatalf("nest create: %v\n%s", err, out)
	}
	tn.Load(t, nest)
	worker := workerWithoutControlPlane(t, ctx, host, stateDir, tn)
	setLabel(t, ctx, host, worker, dedicatedLabel, "dedicated")
	holder := tn.Namespace + "/" + tn.Name
	scale := func(n int) {
		t.Helper()
		args := []string{"scale", tn.Name, "-n", tn.Namespace, "--nodes", fmt.Sprint(n)}
		if n > 0 {
			args = append(args, "--node-selector", dedicatedLabel+"=dedicated")
		}
		if out, err := nest(args...); err != nil {
			t.Fatalf("nest scale --nodes %d: %v\n%s", n, err, out)
		}
	}

	controlPlane := controlPlanePod(t, ctx, host, tn)
	scale(1)
	t.Run("the worker is promoted: occupied, gone from the host, Ready in the tenant", func(t *testing.T) {
		waitGlobalNode(t, ctx, host, worker, 8*time.Minute, func(gn *nestv1.GlobalNode) error {
			if gn.Status.Phase != nestv1.NodePhaseTenant || gn.Spec.State != nestv1.NodeStateOccupied || gn.Status.VirtualCluster != holder {
				return fmt.Errorf("phase %s state %s holder %q; Moving: %v", gn.Status.Phase, gn.Spec.State, gn.Status.VirtualCluster, meta.FindStatusCondition(gn.Status.Conditions, "Moving"))
			}
			return nil
		})
		if err := host.Get(ctx, client.ObjectKey{Name: worker}, &corev1.Node{}); !apierrors.IsNotFound(err) {
			t.Errorf("the host still has Node %s (get: %v)", worker, err)
		}
		waitNodeReady(t, ctx, tn.Clientset(t), worker)
		var vc nestv1.VirtualCluster
		if err := host.Get(ctx, client.ObjectKey{Namespace: tn.Namespace, Name: tn.Name}, &vc); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(vc.Status.AssignedNodes, []string{worker}) || !meta.IsStatusConditionTrue(vc.Status.Conditions, nestv1.ConditionNodesAssigned) {
			t.Errorf("status.assignedNodes %v, NodesAssigned %v; want [%s], True", vc.Status.AssignedNodes, meta.FindStatusCondition(vc.Status.Conditions, nestv1.ConditionNodesAssigned), worker)
		}
	})
	t.Run("a tenant pod runs on the promoted node and its logs are read through the tenant", func(t *testing.T) {
		checkTenantPodOn(t, ctx, host, tn, worker)
	})
	t.Run("pods on the promoted node and on the virtual node reach each other", func(t *testing.T) {
		checkAcrossModes(t, ctx, tn, worker)
	})

	scale(0)
	t.Run("the released worker is Ready in the host again, free, with its labels", func(t *testing.T) {
		waitGlobalNode(t, ctx, host, worker, 8*time.Minute, func(gn *nestv1.GlobalNode) error {
			if gn.Status.Phase != nestv1.NodePhaseHost || gn.Spec.State != nestv1.NodeStateFree || gn.Status.VirtualCluster != "" {
				return fmt.Errorf("phase %s state %s holder %q; Moving: %v", gn.Status.Phase, gn.Spec.State, gn.Status.VirtualCluster, meta.FindStatusCondition(gn.Status.Conditions, "Moving"))
			}
			return nil
		})
		waitNodeReady(t, ctx, clientset(t, devcluster.Layout{Root: stateDir}.AdminKubeconfig()), worker)
		var node corev1.Node
		if err := host.Get(ctx, client.ObjectKey{Name: worker}, &node); err != nil {
			t.Fatal(err)
		}
		if node.Labels[dedicatedLabel] != "dedicated" || node.Spec.Unschedulable {
			t.Errorf("host Node %s: labels %v, unschedulable %v; want %s=dedicated back and schedulable", worker, node.Labels, node.Spec.Unschedulable, dedicatedLabel)
		}
		testutil.Eventually(t, time.Minute, "no Node "+worker+" in the tenant", func() error {
			_, err := tn.Clientset(t).CoreV1().Nodes().Get(ctx, worker, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("the tenant still has Node %s (get: %v)", worker, err)
		})
		var vc nestv1.VirtualCluster
		if err := host.Get(ctx, client.ObjectKey{Namespace: tn.Namespace, Name: tn.Name}, &vc); err != nil {
			t.Fatal(err)
		}
		if len(vc.Status.AssignedNodes) != 0 {
			t.Errorf("status.assignedNodes = %v after release", vc.Status.AssignedNodes)
		}
	})
	t.Run("the tenant's control plane ran on through the promotion and the release", func(t *testing.T) {
		now := controlPlanePod(t, ctx, host, tn)
		if now.UID != controlPlane.UID || restarts(now) != restarts(controlPlane) {
			t.Errorf("control-plane pod %s: uid %s → %s, restarts %d → %d; the node moves must not roll it",
				now.Name, controlPlane.UID, now.UID, restarts(controlPlane), restarts(now))
		}
	})
}

func controlPlanePod(t testing.TB, ctx context.Context, host client.Client, tn *framework.Tenant) corev1.Pod {
	t.Helper()
	var pod corev1.Pod
	if err := host.Get(ctx, client.ObjectKey{Namespace: tn.Namespace, Name: tn.Name + "-0"}, &pod); err != nil {
		t.Fatal(err)
	}
	return pod
}

func restarts(p corev1.Pod) int32 {
	var n int32
	for _, c := range p.Status.ContainerStatuses {
		n += c.RestartCount
	}
	return n
}

// workerWithoutControlPlane is a worker with a GlobalNode that does not run
// tn's control-plane pod, which a drain would evict.
func workerWithoutControlPlane(t testing.TB, ctx context.Context, host client.Client, stateDir string, tn *framework.Tenant) string {
	t.Helper()
	pod := controlPlanePod(t, ctx, host, tn)
	nodes, err := devcluster.Topology(stateDir, 3)
	if err != nil {
		t.Fatal(err)
	}
	var candidates []string
	for _, n := range nodes {
		if n.ControlPlane() || n.Name == pod.Spec.NodeName {
			continue
		}
		var gn nestv1.GlobalNode
		if err := host.Get(ctx, client.ObjectKey{Name: n.Name}, &gn); err == nil {
			candidates = append(candidates, n.Name)
		}
	}
	if len(candidates) == 0 {
		t.Fatalf("no worker with a GlobalNode outside %s (control plane on %s)", tn.Name, pod.Spec.NodeName)
	}
	slices.Sort(candidates)
	return candidates[0]
}

func setLabel(t testing.TB, ctx context.Context, host client.Client, node, key, value string) {
	t.Helper()
	var n corev1.Node
	if err := host.Get(ctx, client.ObjectKey{Name: node}, &n); err != nil {
		t.Fatal(err)
	}
	before := n.DeepCopy()
	n.Labels[key] = value
	if err := host.Patch(ctx, &n, client.MergeFrom(before)); err != nil {
		t.Fatal(err)
	}
	// The policy selects on the GlobalNode's copy of the labels.
	waitGlobalNode(t, ctx, host, node, time.Minute, func(gn *nestv1.GlobalNode) error {
		if gn.Spec.Labels[key] != value {
			return fmt.Errorf("labels %v", gn.Spec.Labels)
		}
		return nil
	})
}

func waitGlobalNode(t testing.TB, ctx context.Context, host client.Client, name string, timeout time.Duration, want func(*nestv1.GlobalNode) error) {
	t.Helper()
	testutil.Eventually(t, timeout, "GlobalNode "+name, func() error {
		var gn nestv1.GlobalNode
		if err := host.Get(ctx, client.ObjectKey{Name: name}, &gn); err != nil {
			return err
		}
		return want(&gn)
	})
}

// checkTenantPodOn runs a testapp pod on node in tn and reads its log
// through the tenant API server, which reaches the node's kubelet.
func checkTenantPodOn(t *testing.T, ctx context.Context, host client.Client, tn *framework.Tenant, node string) {
	cs := tn.Clientset(t)
	pod := runTenantPod(t, ctx, cs, "on-dedicated", map[string]string{corev1.LabelHostname: node})
	if pod.Spec.NodeName != node {
		t.Fatalf("pod %s runs on %q, want %s", pod.Name, pod.Spec.NodeName, node)
	}
	testutil.Eventually(t, time.Minute, "log of the pod on "+node, func() error {
		data, err := cs.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
		if err != nil {
			return err
		}
		if !strings.Contains(string(data), "serving addr=") {
			return fmt.Errorf("log %q", data)
		}
		return nil
	})
	if _, synced := framework.HostPodOf(tn.HostPods(t, ctx, host), pod.Namespace, pod.Name); synced {
		t.Errorf("the pod on the dedicated node %s also got a host pod from the syncer", node)
	}
}

// checkAcrossModes runs a testapp pod on node (a promoted node) and one on
// a virtual node of tn, and has each fetch the other's hostname by pod IP:
// the host network routes the promoted node's pod CIDR, and the tenant's
// host NetworkPolicies admit it.
func checkAcrossModes(t *testing.T, ctx context.Context, tn *framework.Tenant, node string) {
	cs := tn.Clientset(t)
	dedicated := runTenantPod(t, ctx, cs, "across-dedicated", map[string]string{corev1.LabelHostname: node})
	virtual := runTenantPod(t, ctx, cs, "across-virtual", map[string]string{"type": "virtual-kubelet"})
	for _, pair := range [][2]*corev1.Pod{{virtual, dedicated}, {dedicated, virtual}} {
		from, to := pair[0], pair[1]
		url := fmt.Sprintf("http://%s:8080/hostname", to.Status.PodIP)
		testutil.Eventually(t, time.Minute, from.Name+" reaches "+to.Name+" at "+url, func() error {
			out, err := tn.KubectlErr(ctx, "exec", from.Name, "--", "/testapp", "get", url)
			if err != nil {
				return fmt.Errorf("%v: %s", err, out)
			}
			if strings.TrimSpace(out) != to.Name {
				return fmt.Errorf("got %q", out)
			}
			return nil
		})
	}
}

// runTenantPod runs a testapp pod named name in cs's default namespace on
// the nodes selector picks and returns it once it runs with an IP; it is
// deleted when the test ends.
func runTenantPod(t *testing.T, ctx context.Context, cs kubernetes.Interface, name string, selector map[string]string) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault},
		Spec: corev1.PodSpec{
			NodeSelector: selector,
			Containers:   []corev1.Container{{Name: "app", Image: images.TestApp, ImagePullPolicy: corev1.PullNever}},
		},
	}
	if _, err := cs.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.CoreV1().Pods(pod.Namespace).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	})
	var running *corev1.Pod
	testutil.Eventually(t, 2*time.Minute, "pod "+name+" Running", func() error {
		p, err := cs.CoreV1().Pods(pod.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" {
			return fmt.Errorf("node %q phase %s", p.Spec.NodeName, p.Status.Phase)
		}
		running = p
		return nil
	})
	return running
}
