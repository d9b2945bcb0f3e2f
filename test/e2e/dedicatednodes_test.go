package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/controlplane"
	"github.com/nestdev/nest/internal/devcluster"
	"github.com/nestdev/nest/internal/images"
	"github.com/nestdev/nest/internal/pki"
	"github.com/nestdev/nest/internal/syncer/contract"
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
	t.Parallel()
	// The default cluster: a dedicated node reaches tenant Services only
	// where the tenant's Service range is the host's (see docs/dedicated-nodes.md).
	cluster := framework.LeaseDefaultCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	stateDir := framework.StartHostCluster(t, ctx, cluster, "--with-nest", "--nodes", "3")
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
	blocker := blockDrain(t, ctx, host, worker)
	scale(1)
	t.Run("nest-manager killed while the promotion drains: the node stays in the host until a new one finishes the move", func(t *testing.T) {
		defer blocker.unblock(t, ctx, host)
		draining := func(gn *nestv1.GlobalNode) error {
			c := meta.FindStatusCondition(gn.Status.Conditions, "Moving")
			if gn.Status.Phase != nestv1.NodePhaseDraining || c == nil || !strings.Contains(c.Message, blocker.pod) {
				return fmt.Errorf("phase %s, Moving %v; want Draining, held up by %s", gn.Status.Phase, c, blocker.pod)
			}
			return nil
		}
		waitGlobalNode(t, ctx, host, worker, 2*time.Minute, draining)
		leader := managerLeader(t, ctx, host)
		framework.KillContainer(t, ctx, host, stateDir, framework.ManagerPod(t, ctx, host), "manager")
		testutil.Eventually(t, 2*time.Minute, "a new nest-manager leads", func() error {
			if now := managerLeader(t, ctx, host); now == leader || now == "" {
				return fmt.Errorf("leader %q, the killed one was %q", now, leader)
			}
			return nil
		})
		// Nothing half-done: still Draining, the node cordoned in the host
		// and nowhere else. The new manager finishes the move once the
		// budget is gone (the next subtest).
		waitGlobalNode(t, ctx, host, worker, time.Minute, draining)
		var node corev1.Node
		if err := host.Get(ctx, client.ObjectKey{Name: worker}, &node); err != nil {
			t.Fatalf("host Node %s while the promotion drains: %v", worker, err)
		}
		if !node.Spec.Unschedulable {
			t.Errorf("host Node %s is schedulable while the promotion drains it", worker)
		}
		if _, err := tn.Clientset(t).CoreV1().Nodes().Get(ctx, worker, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the tenant has Node %s before the host let it go (get: %v)", worker, err)
		}
	})
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
		checkNodeIP(t, ctx, host, tn, worker)
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
	t.Run("a privileged pod the virtual node refuses runs on the promoted node", func(t *testing.T) {
		checkPrivilegedOn(t, ctx, tn, worker)
	})
	t.Run("the promoted kubelet holds a node credential, not an admin one", func(t *testing.T) {
		checkNodeCredential(t, ctx, tn, node(t, stateDir, worker), worker)
	})
	t.Run("the promoted node's agent serves its pull proxy, which refuses the host's node subnet", func(t *testing.T) {
		checkPullProxyOn(t, node(t, stateDir, worker), cluster)
	})
	t.Run("a second VirtualCluster asking for the held node gets none and says why", func(t *testing.T) {
		checkNodeHeld(t, ctx, host, nest, worker)
	})
	// The DaemonSet's pod stays on the node until the release resets it.
	var footprint *podFootprint
	t.Run("a tenant DaemonSet runs a pod on the promoted node, which the host copy of its Service names", func(t *testing.T) {
		footprint = runDaemonSetOn(t, ctx, tn, node(t, stateDir, worker))
		testutil.Eventually(t, time.Minute, "a host EndpointSlice of nest-syncer naming "+footprint.podIP, func() error {
			if len(syncerSlicesNaming(t, ctx, host, tn.Namespace, footprint.podIP)) == 0 {
				return fmt.Errorf("none")
			}
			return nil
		})
	})
	t.Run("the tenant's control plane ran on through the promotion", func(t *testing.T) {
		checkRanOn(t, ctx, host, tn, controlPlane)
	})
	t.Run("the cluster CA rotates with the node in the tenant: it rejoins in place, keeps its pods Ready, and ends on the new CA alone", func(t *testing.T) {
		rotateClusterCAWithTheNode(t, ctx, host, nest, tn, node(t, stateDir, worker))
	})
	// The rotation rolls the control plane; the release must not.
	controlPlane = controlPlanePod(t, ctx, host, tn)

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
	t.Run("the released node keeps nothing of the tenant's pods: no kubelet directory, mount or pod IP", func(t *testing.T) {
		if footprint == nil {
			t.Fatal("the DaemonSet subtest recorded no pod footprint to look for")
		}
		footprint.checkGone(t)
	})
	t.Run("the tenant no longer admits the released node's pod range on the host", func(t *testing.T) {
		if footprint == nil {
			t.Fatal("the DaemonSet subtest recorded no pod footprint to look for")
		}
		var cm corev1.ConfigMap
		if err := host.Get(ctx, client.ObjectKey{Namespace: tn.Namespace, Name: contract.DedicatedNodesConfigMap(tn.Name)}, &cm); err != nil {
			t.Fatal(err)
		}
		if cidrs := cm.Data[contract.DedicatedPodCIDRsKey]; cidrs != "" {
			t.Errorf("ConfigMap %s still admits %q", cm.Name, cidrs)
		}
		if names := syncerSlicesNaming(t, ctx, host, tn.Namespace, footprint.podIP); len(names) > 0 {
			t.Errorf("nest-syncer's host EndpointSlices %v still name %s, the DaemonSet pod's address on the released node", names, footprint.podIP)
		}
	})
	t.Run("the tenant's control plane ran on through the release", func(t *testing.T) {
		checkRanOn(t, ctx, host, tn, controlPlane)
	})
}

// checkRanOn checks that tn's control-plane pod is still was, not
// restarted: node moves must not roll it.
func checkRanOn(t *testing.T, ctx context.Context, host client.Client, tn *framework.Tenant, was corev1.Pod) {
	now := controlPlanePod(t, ctx, host, tn)
	if now.UID != was.UID || restarts(now) != restarts(was) {
		t.Errorf("control-plane pod %s: uid %s → %s, restarts %d → %d; the node moves must not roll it",
			now.Name, was.UID, now.UID, restarts(was), restarts(now))
	}
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
	nodes := framework.Topology(t, stateDir, 3)
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

// checkNodeIP shows the promoted node registered in the tenant with its real
// address, the GlobalNode's nodeIP, where the tenant API server reaches its
// kubelet.
func checkNodeIP(t *testing.T, ctx context.Context, host client.Client, tn *framework.Tenant, name string) {
	t.Helper()
	var gn nestv1.GlobalNode
	if err := host.Get(ctx, client.ObjectKey{Name: name}, &gn); err != nil {
		t.Fatal(err)
	}
	node, err := tn.Clientset(t).CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var internal []string
	for _, a := range node.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			internal = append(internal, a.Address)
		}
	}
	if gn.Spec.NodeIP == "" || !slices.Contains(internal, gn.Spec.NodeIP) {
		t.Errorf("tenant Node %s has InternalIPs %v, want its GlobalNode's nodeIP %q", name, internal, gn.Spec.NodeIP)
	}
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
// a virtual node of tn, and has each fetch the other's hostname by pod IP
// (the host network routes the promoted node's pod CIDR, and the tenant's
// host NetworkPolicies admit it) and by the name of a Service in front of
// it (the promoted node's kube-proxy serves tenant Services and its pods
// use the tenant's DNS; nest-syncer names the promoted node's pods behind
// the Service's host copy).
func checkAcrossModes(t *testing.T, ctx context.Context, tn *framework.Tenant, node string) {
	cs := tn.Clientset(t)
	dedicated := runTenantPod(t, ctx, cs, "across-dedicated", map[string]string{corev1.LabelHostname: node})
	virtual := runTenantPod(t, ctx, cs, "across-virtual", map[string]string{"type": "virtual-kubelet"})
	for _, p := range []*corev1.Pod{dedicated, virtual} {
		exposeTenantPod(t, ctx, cs, p)
	}
	pairs := [][2]*corev1.Pod{{virtual, dedicated}, {dedicated, virtual}}
	t.Run("by pod IP", func(t *testing.T) {
		for _, pair := range pairs {
			checkFetch(t, ctx, tn, pair[0], fmt.Sprintf("http://%s:8080/hostname", pair[1].Status.PodIP), pair[1].Name)
		}
	})
	t.Run("by Service DNS name", func(t *testing.T) {
		for _, pair := range pairs {
			checkFetch(t, ctx, tn, pair[0], fmt.Sprintf("http://%s.%s.svc:8080/hostname", pair[1].Name, pair[1].Namespace), pair[1].Name)
		}
	})
}

// checkFetch has pod from fetch url until the answer is want.
func checkFetch(t *testing.T, ctx context.Context, tn *framework.Tenant, from *corev1.Pod, url, want string) {
	t.Helper()
	testutil.Eventually(t, time.Minute, from.Name+" fetches "+url, func() error {
		out, err := tn.KubectlErr(ctx, "exec", from.Name, "--", "/testapp", "get", url)
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		if strings.TrimSpace(out) != want {
			return fmt.Errorf("got %q, want %q", out, want)
		}
		return nil
	})
}

// exposeTenantPod puts a Service of the pod's name on port 8080 in front of
// pod, selecting it by its app label; it is deleted when the test ends.
func exposeTenantPod(t *testing.T, ctx context.Context, cs kubernetes.Interface, pod *corev1.Pod) {
	t.Helper()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": pod.Labels["app"]},
			Ports:    []corev1.ServicePort{{Port: 8080, TargetPort: intstr.FromInt32(8080)}},
		},
	}
	if _, err := cs.CoreV1().Services(svc.Namespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.CoreV1().Services(svc.Namespace).Delete(context.Background(), svc.Name, metav1.DeleteOptions{})
	})
}

// checkPrivilegedOn shows that the promoted node is the tenant's alone: a
// privileged pod runs there, while the virtual node, which shares host
// nodes, refuses it.
func checkPrivilegedOn(t *testing.T, ctx context.Context, tn *framework.Tenant, node string) {
	cs := tn.Clientset(t)
	privileged := func(p *corev1.Pod) {
		p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
	}
	onNode := startTenantPod(t, ctx, cs, "privileged-dedicated", map[string]string{corev1.LabelHostname: node}, privileged)
	waitTenantPod(t, ctx, cs, onNode, 2*time.Minute, func(p *corev1.Pod) error {
		if p.Status.Phase != corev1.PodRunning {
			return fmt.Errorf("phase %s, reason %q: %s", p.Status.Phase, p.Status.Reason, p.Status.Message)
		}
		return nil
	})
	onVirtual := startTenantPod(t, ctx, cs, "privileged-virtual", map[string]string{"type": "virtual-kubelet"}, privileged)
	waitTenantPod(t, ctx, cs, onVirtual, 2*time.Minute, func(p *corev1.Pod) error {
		if p.Status.Reason != "ProviderFailed" || !strings.Contains(p.Status.Message, "violates PodSecurity") {
			return fmt.Errorf("phase %s, reason %q, message %q; want it refused by Pod Security", p.Status.Phase, p.Status.Reason, p.Status.Message)
		}
		return nil
	})
}

// checkNodeCredential reads the promoted kubelet's client certificate from
// the node and shows the tenant API server takes it as that node
// (system:node:<name> in system:nodes), which may not list Secrets.
func checkNodeCredential(t *testing.T, ctx context.Context, tn *framework.Tenant, n devcluster.Node, name string) {
	certFile := filepath.Join(devcluster.AgentConfig(devcluster.Layout{}, n).Kubelet.CertDir, "kubelet-client-current.pem")
	if _, err := os.Stat(certFile); err != nil {
		t.Fatalf("the kubelet's client certificate: %v", err)
	}
	cfg := rest.AnonymousClientConfig(tn.Config)
	cfg.TLSClientConfig.CertFile, cfg.TLSClientConfig.KeyFile = certFile, certFile
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	review, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("self subject review with the kubelet's certificate: %v", err)
	}
	user := review.Status.UserInfo
	if user.Username != "system:node:"+name || !slices.Contains(user.Groups, "system:nodes") || slices.Contains(user.Groups, "system:masters") {
		t.Errorf("the kubelet is %q in %v; want system:node:%s in system:nodes, not system:masters", user.Username, user.Groups, name)
	}
	_, err = cs.CoreV1().Secrets("").List(ctx, metav1.ListOptions{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("listing Secrets with the kubelet's credential: %v; want Forbidden", err)
	}
}

// checkNodeHeld creates a second VirtualCluster whose promote policy asks
// for the node another holds: it holds nothing and says why.
func checkNodeHeld(t *testing.T, ctx context.Context, host client.Client, nest framework.Nest, held string) {
	const other = "delta"
	if out, err := nest("create", other, "--nodes", "1", "--node-selector", dedicatedLabel+"=dedicated"); err != nil {
		t.Fatalf("nest create %s: %v\n%s", other, err, out)
	}
	t.Cleanup(func() { _, _ = nest("delete", other) })
	key := client.ObjectKey{Namespace: "vc-" + other, Name: other}
	testutil.Eventually(t, 2*time.Minute, "NodesAssigned of "+other, func() error {
		var vc nestv1.VirtualCluster
		if err := host.Get(ctx, key, &vc); err != nil {
			return err
		}
		c := meta.FindStatusCondition(vc.Status.Conditions, nestv1.ConditionNodesAssigned)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != "InsufficientNodes" {
			return fmt.Errorf("NodesAssigned %v; want False, InsufficientNodes", c)
		}
		if len(vc.Status.AssignedNodes) != 0 {
			return fmt.Errorf("status.assignedNodes %v; want none", vc.Status.AssignedNodes)
		}
		return nil
	})
	var gn nestv1.GlobalNode
	if err := host.Get(ctx, client.ObjectKey{Name: held}, &gn); err != nil {
		t.Fatal(err)
	}
	if gn.Annotations["nest.dev/held-by"] == key.String() || gn.Status.VirtualCluster == key.String() {
		t.Errorf("GlobalNode %s names %s as its holder", held, key)
	}
}

// drainBlocker is a host pod on a node that a PodDisruptionBudget keeps
// from being evicted, so a drain of the node waits for it.
type drainBlocker struct {
	namespace, pod string
}

// blockDrain starts a drainBlocker on node; its namespace goes when the
// test ends.
func blockDrain(t *testing.T, ctx context.Context, host client.Client, node string) *drainBlocker {
	t.Helper()
	b := &drainBlocker{namespace: "e2e-drain-blocker", pod: "blocker"}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: b.namespace}}
	if err := host.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = host.Delete(context.Background(), ns) })
	labels := map[string]string{"app": b.pod}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: b.pod, Namespace: b.namespace, Labels: labels},
		Spec: corev1.PodSpec{
			NodeName:   node,
			Containers: []corev1.Container{{Name: "pause", Image: images.Pause, ImagePullPolicy: corev1.PullNever}},
		},
	}
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: b.pod, Namespace: b.namespace},
		Spec:       policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(1)), Selector: &metav1.LabelSelector{MatchLabels: labels}},
	}
	for _, obj := range []client.Object{pod, pdb} {
		if err := host.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	// The budget only counts a pod that runs.
	testutil.Eventually(t, 2*time.Minute, "the drain blocker protected", func() error {
		if err := host.Get(ctx, client.ObjectKeyFromObject(pdb), pdb); err != nil {
			return err
		}
		if pdb.Status.DisruptionsAllowed != 0 || pdb.Status.CurrentHealthy != 1 {
			return fmt.Errorf("budget: %d healthy, %d disruptions allowed", pdb.Status.CurrentHealthy, pdb.Status.DisruptionsAllowed)
		}
		return nil
	})
	return b
}

// unblock deletes the budget, so the drain evicts the pod.
func (b *drainBlocker) unblock(t *testing.T, ctx context.Context, host client.Client) {
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: b.pod, Namespace: b.namespace}}
	if err := host.Delete(ctx, pdb); client.IgnoreNotFound(err) != nil {
		t.Errorf("delete the drain blocker's budget: %v", err)
	}
}

// podFootprint is what a running pod leaves on its node: its directory
// under the kubelet's root, its volume mounts, and the pod IP its CNI
// IPAM recorded for its sandbox.
type podFootprint struct {
	uid, ipamFile, sandbox string
	kubeletDir, podIP      string
}

// runDaemonSetOn runs a tenant DaemonSet on node n and returns its pod's
// footprint there, each part checked to exist, so its absence later means
// something.
func runDaemonSetOn(t *testing.T, ctx context.Context, tn *framework.Tenant, n devcluster.Node) *podFootprint {
	cs := tn.Clientset(t)
	labels := map[string]string{"app": "ds-dedicated"}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "ds-dedicated", Namespace: metav1.NamespaceDefault},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeSelector: map[string]string{corev1.LabelHostname: n.Name},
					Containers:   []corev1.Container{{Name: "app", Image: images.TestApp, ImagePullPolicy: corev1.PullNever}},
				},
			},
		},
	}
	if _, err := cs.AppsV1().DaemonSets(ds.Namespace).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: ds.Name, Namespace: ds.Namespace},
		Spec:       corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Port: 8080}}},
	}
	if _, err := cs.CoreV1().Services(svc.Namespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var pod corev1.Pod
	testutil.Eventually(t, 2*time.Minute, "a running pod of DaemonSet "+ds.Name+" on "+n.Name, func() error {
		list, err := cs.CoreV1().Pods(ds.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app=ds-dedicated"})
		if err != nil {
			return err
		}
		for _, p := range list.Items {
			if p.Spec.NodeName == n.Name && p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" {
				pod = p
				return nil
			}
		}
		return fmt.Errorf("%d pods, none running on %s", len(list.Items), n.Name)
	})
	f := &podFootprint{uid: string(pod.UID), podIP: pod.Status.PodIP, kubeletDir: filepath.Join(devcluster.AgentConfig(devcluster.Layout{}, n).Kubelet.RootDir, "pods", string(pod.UID))}
	if _, err := os.Stat(f.kubeletDir); err != nil {
		t.Fatalf("the pod's kubelet directory: %v", err)
	}
	if mounts := mountsOf(t, f.uid); len(mounts) == 0 {
		t.Fatalf("no mount names pod UID %s: the footprint check would look for the wrong thing", f.uid)
	}
	matches, err := filepath.Glob(filepath.Join(n.IPAMDir(), "*", pod.Status.PodIP))
	if err != nil || len(matches) != 1 {
		t.Fatalf("IPAM files for %s under %s: %v (%v); want one", pod.Status.PodIP, n.IPAMDir(), matches, err)
	}
	data, err := os.ReadFile(matches[0])
	if err != nil {
		t.Fatal(err)
	}
	f.ipamFile, f.sandbox = matches[0], strings.Fields(string(data))[0]
	return f
}

// checkGone fails for every part of the footprint still on the node. The
// IP may be given again, to a host pod: only a record for the tenant pod's
// sandbox counts.
func (f *podFootprint) checkGone(t *testing.T) {
	if _, err := os.Stat(f.kubeletDir); !os.IsNotExist(err) {
		t.Errorf("the pod's kubelet directory %s: %v; want it gone", f.kubeletDir, err)
	}
	if mounts := mountsOf(t, f.uid); len(mounts) > 0 {
		t.Errorf("mounts of pod %s are left: %q", f.uid, mounts)
	}
	if data, err := os.ReadFile(f.ipamFile); err == nil && strings.Contains(string(data), f.sandbox) {
		t.Errorf("the CNI IPAM still records the tenant pod's sandbox %s in %s", f.sandbox, f.ipamFile)
	}
}

// syncerSlicesNaming returns the host EndpointSlices nest-syncer wrote in
// namespace that name address.
func syncerSlicesNaming(t *testing.T, ctx context.Context, host client.Client, namespace, address string) []string {
	t.Helper()
	var list discoveryv1.EndpointSliceList
	if err := host.List(ctx, &list, client.InNamespace(namespace), client.MatchingLabels{discoveryv1.LabelManagedBy: contract.EndpointSliceManager}); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, s := range list.Items {
		for _, e := range s.Endpoints {
			if slices.Contains(e.Addresses, address) {
				out = append(out, s.Name)
			}
		}
	}
	return out
}

// managerLeader is the identity holding nest-manager's leader election
// Lease, "" while none does.
func managerLeader(t *testing.T, ctx context.Context, host client.Client) string {
	t.Helper()
	var lease coordinationv1.Lease
	if err := host.Get(ctx, client.ObjectKey{Namespace: "nest-system", Name: "nest-manager.nest.dev"}, &lease); err != nil {
		t.Fatal(err)
	}
	return ptr.Deref(lease.Spec.HolderIdentity, "")
}

// mountsOf returns the mount points that name a pod UID. The nodes of the
// local host cluster share this process's mount namespace.
func mountsOf(t *testing.T, uid string) []string {
	t.Helper()
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for line := range strings.Lines(string(data)) {
		if fields := strings.Fields(line); len(fields) > 4 && strings.Contains(fields[4], uid) {
			out = append(out, fields[4])
		}
	}
	return out
}

// checkPullProxyOn checks that n, out of the host with the host's node
// network agent gone from it, still has a pull proxy where its containerd
// looks for one: its nest-agent's, which refuses the bridge of the host's
// node subnet (a range only nest-manager's --host-node-cidrs names) before
// it dials it. Without a proxy, the node's pulls of every registry without
// a hosts.toml of its own would fail.
func checkPullProxyOn(t *testing.T, n devcluster.Node, a devcluster.Addressing) {
	t.Helper()
	registry := net.JoinHostPort(a.BridgeIP().String(), "1")
	status, body := framework.PullManifestFromNode(t, n, registry)
	if status != http.StatusForbidden || !strings.Contains(body, "DENIED") {
		t.Fatalf("a manifest of %s from %s's pull proxy: %d %s; want 403 DENIED, the host's node subnet %s refused before it is dialled", registry, n.Name, status, body, a.NodeSubnet)
	}
}

// node is the local host cluster's node name.
func node(t *testing.T, stateDir, name string) devcluster.Node {
	t.Helper()
	nodes := framework.Topology(t, stateDir, 3)
	for _, n := range nodes {
		if n.Name == name {
			return n
		}
	}
	t.Fatalf("no node %s in the local host cluster", name)
	return devcluster.Node{}
}

// runTenantPod runs a testapp pod named name, labelled app=name, in cs's
// default namespace on the nodes selector picks and returns it once it
// runs with an IP; it is deleted when the test ends.
func runTenantPod(t *testing.T, ctx context.Context, cs kubernetes.Interface, name string, selector map[string]string) *corev1.Pod {
	t.Helper()
	pod := startTenantPod(t, ctx, cs, name, selector)
	return waitTenantPod(t, ctx, cs, pod, 2*time.Minute, func(p *corev1.Pod) error {
		if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" {
			return fmt.Errorf("node %q phase %s", p.Spec.NodeName, p.Status.Phase)
		}
		return nil
	})
}

// startTenantPod creates the testapp pod runTenantPod runs, changed by
// each of mutate, and deletes it when the test ends.
func startTenantPod(t *testing.T, ctx context.Context, cs kubernetes.Interface, name string, selector map[string]string, mutate ...func(*corev1.Pod)) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault, Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{
			NodeSelector: selector,
			Containers:   []corev1.Container{{Name: "app", Image: images.TestApp, ImagePullPolicy: corev1.PullNever}},
		},
	}
	for _, m := range mutate {
		m(pod)
	}
	created, err := cs.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.CoreV1().Pods(pod.Namespace).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	})
	return created
}

// waitTenantPod polls pod until want accepts it, and returns it.
func waitTenantPod(t *testing.T, ctx context.Context, cs kubernetes.Interface, pod *corev1.Pod, timeout time.Duration, want func(*corev1.Pod) error) *corev1.Pod {
	t.Helper()
	var last *corev1.Pod
	testutil.Eventually(t, timeout, "pod "+pod.Name, func() error {
		p, err := cs.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		last = p
		return want(p)
	})
	return last
}

// rotateClusterCAWithTheNode rotates tn's cluster CA with n, a dedicated
// node, in the tenant: the node rejoins in place in each phase and stays
// Ready, the DaemonSet's pod there keeps its container, and at the end
// the kubelet trusts the new CA alone and holds a client certificate it
// signed, which the tenant takes; the pod's logs are read through the
// tenant.
func rotateClusterCAWithTheNode(t *testing.T, ctx context.Context, host client.Client, nest framework.Nest, tn *framework.Tenant, n devcluster.Node) {
	before := daemonSetPodOn(t, ctx, tn.Clientset(t), n.Name)
	bootstraps := bootstrapRequests(t, ctx, tn.Clientset(t))
	watch := watchNode(ctx, t, nest, tn, n.Name, before)
	start := time.Now()
	if out, err := nest("certs", "rotate-ca", tn.Name, "--ca", "cluster", "--grace", "0s", "--wait", "--timeout", "12m"); err != nil {
		watch.stop()
		t.Fatalf("certs rotate-ca: %v\n%s", err, out)
	}
	if out, err := nest("certs", "rotate-ca", tn.Name, "--finish", "--wait", "--timeout", "8m"); err != nil {
		watch.stop()
		t.Fatalf("certs rotate-ca --finish: %v\n%s", err, out)
	}
	took := time.Since(start)
	seen := watch.stop()
	t.Logf("cluster CA rotation of a 1-replica tenant with a dedicated node: %s; of %d answered polls, the node Unknown in %d, not Ready at most %s (its kubelet restarting), the pod on it not Ready in %d; the node's Ready condition:\n%s",
		took.Round(100*time.Millisecond), seen.polls, seen.unknown, seen.longestNotReady.Round(time.Second), seen.podNotReady, strings.Join(seen.changes, "\n"))
	// A poll a second over a rotation of a minute or more: at least 10
	// answers, or the watch saw too little to tell.
	if seen.polls < 10 || seen.unknown > 0 || seen.podNotReady > 0 {
		t.Errorf("during the rotation, of %d answered polls the node was Unknown (lost by the control plane) in %d and its pod not Ready in %d; want 10 answers or more, and neither", seen.polls, seen.unknown, seen.podNotReady)
	}
	// Past the node monitor's grace (40 s) the tenant's node lifecycle
	// controller would act on it: a kubelet restart must be far shorter.
	if seen.longestNotReady >= 40*time.Second {
		t.Errorf("the node was not Ready for %s in a row during the rotation, want well under the node monitor's grace of 40s", seen.longestNotReady)
	}

	tn.Load(t, nest)
	cs := tn.Clientset(t)
	pkiSecret := &corev1.Secret{}
	if err := host.Get(ctx, client.ObjectKey{Namespace: tn.Namespace, Name: controlplane.Names{VirtualCluster: tn.Name, Namespace: tn.Namespace}.PKISecret()}, pkiSecret); err != nil {
		t.Fatal(err)
	}
	bundle := pkiSecret.Data[controlplane.CACert]
	cas, err := pki.ParseCertificates(bundle)
	if err != nil || len(cas) != 1 {
		t.Fatalf("ca.crt after the rotation holds %d CAs, want the new one alone: %v", len(cas), err)
	}
	waitGlobalNode(t, ctx, host, n.Name, time.Minute, func(gn *nestv1.GlobalNode) error {
		if gn.Status.Phase != nestv1.NodePhaseTenant || gn.Status.CABundleHash != pki.BundleHash(bundle) {
			return fmt.Errorf("phase %s, caBundleHash %q; want Tenant with the new bundle's", gn.Status.Phase, gn.Status.CABundleHash)
		}
		return nil
	})
	kubelet := devcluster.AgentConfig(devcluster.Layout{}, n).Kubelet
	kubeconfig, err := clientcmd.LoadFromFile(kubelet.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if cluster := kubeconfig.Clusters[kubeconfig.Contexts[kubeconfig.CurrentContext].Cluster]; pki.BundleHash(cluster.CertificateAuthorityData) != pki.BundleHash(bundle) {
		t.Error("the kubelet's kubeconfig does not trust the new cluster CA alone")
	}
	data, err := os.ReadFile(filepath.Join(kubelet.CertDir, "kubelet-client-current.pem"))
	if err != nil {
		t.Fatal(err)
	}
	if certs, err := pki.ParseCertificates(data); err != nil || certs[0].CheckSignatureFrom(cas[0]) != nil {
		t.Errorf("the kubelet's client certificate is not signed by the new cluster CA (%v)", err)
	}
	checkNodeCredential(t, ctx, tn, n, n.Name)
	waitNodeReady(t, ctx, cs, n.Name)
	// Two rejoins, each one TLS bootstrap: Reissue's and Retire's.
	if got := bootstrapRequests(t, ctx, cs) - bootstraps; got != 2 {
		t.Errorf("the kubelet bootstrapped %d times during the rotation, want twice (in Reissue and in Retire)", got)
	}

	after := daemonSetPodOn(t, ctx, cs, n.Name)
	if after.UID != before.UID || containerID(after) != containerID(before) {
		t.Errorf("the DaemonSet's pod on %s is %s in container %s after the rotation, was %s in %s: want it kept running", n.Name, after.UID, containerID(after), before.UID, containerID(before))
	}
	testutil.Eventually(t, time.Minute, "the log of the DaemonSet's pod, through the tenant", func() error {
		_, err := cs.CoreV1().Pods(after.Namespace).GetLogs(after.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
		return err
	})
}

// bootstrapRequests counts the tenant's kubelet client certificate
// requests made with a bootstrap token: one per TLS bootstrap.
func bootstrapRequests(t *testing.T, ctx context.Context, cs kubernetes.Interface) int {
	t.Helper()
	list, err := cs.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, csr := range list.Items {
		if csr.Spec.SignerName == certificatesv1.KubeAPIServerClientKubeletSignerName && strings.HasPrefix(csr.Spec.Username, "system:bootstrap:") {
			n++
		}
	}
	return n
}

// daemonSetPodOn is the running pod of runDaemonSetOn's DaemonSet on node.
func daemonSetPodOn(t *testing.T, ctx context.Context, cs kubernetes.Interface, node string) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	testutil.Eventually(t, time.Minute, "the running pod of DaemonSet ds-dedicated on "+node, func() error {
		list, err := cs.CoreV1().Pods(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{LabelSelector: "app=ds-dedicated"})
		if err != nil {
			return err
		}
		for i := range list.Items {
			if p := &list.Items[i]; p.Spec.NodeName == node && p.Status.Phase == corev1.PodRunning && containerID(p) != "" {
				pod = p
				return nil
			}
		}
		return fmt.Errorf("none of %d", len(list.Items))
	})
	return pod
}

// containerID is the ID of the pod's first container, with its restart
// count: a container restarted or replaced gets another.
func containerID(p *corev1.Pod) string {
	if len(p.Status.ContainerStatuses) == 0 || p.Status.ContainerStatuses[0].ContainerID == "" {
		return ""
	}
	c := p.Status.ContainerStatuses[0]
	return fmt.Sprintf("%s#%d", c.ContainerID, c.RestartCount)
}

// nodeWatch polls a tenant Node and a pod on it every second.
type nodeWatch struct {
	cancel context.CancelFunc
	done   chan struct{}
	seen   nodeSeen
}

// nodeSeen is what a nodeWatch saw: how many polls answered; the node's
// Ready condition each time it changed (time, status, reason); how many
// answers showed it Unknown (its kubelet lost to the control plane) and
// the longest stretch it was not Ready; how many showed the pod not Ready.
type nodeSeen struct {
	polls, unknown, podNotReady int
	changes                     []string
	longestNotReady             time.Duration
}

// watchNode polls node and pod in tn until stop, fetching a new
// kubeconfig (nest kubeconfig) when the one it holds is refused, as after
// a CA rotation's Retire; calls that fail (the API server restarts) count
// for nothing.
func watchNode(ctx context.Context, t *testing.T, nest framework.Nest, tn *framework.Tenant, node string, pod *corev1.Pod) *nodeWatch {
	ctx, cancel := context.WithCancel(ctx)
	w := &nodeWatch{cancel: cancel, done: make(chan struct{})}
	path := filepath.Join(t.TempDir(), "watch.kubeconfig")
	client := func() (*kubernetes.Clientset, error) {
		if out, err := nest("kubeconfig", tn.Name, "-o", path); err != nil {
			return nil, fmt.Errorf("%v: %s", err, out)
		}
		cfg, err := clientcmd.BuildConfigFromFlags("", path)
		if err != nil {
			return nil, err
		}
		cfg.Timeout = 5 * time.Second
		return kubernetes.NewForConfig(cfg)
	}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		cs, err := client()
		last, notReadySince := "", time.Time{}
		for {
			var nerr, perr error
			var n *corev1.Node
			var p *corev1.Pod
			if err != nil {
				nerr = err
			} else {
				n, nerr = cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
				p, perr = cs.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
			}
			if err != nil || apierrors.IsUnauthorized(nerr) || nerr != nil && strings.Contains(nerr.Error(), "certificate signed by unknown authority") {
				cs, err = client()
			}
			if nerr == nil && perr == nil {
				w.seen.polls++
				c := readyConditionOf(n)
				if now := fmt.Sprintf("%s %s", c.Status, c.Reason); now != last {
					w.seen.changes = append(w.seen.changes, fmt.Sprintf("%s %s: %s", time.Now().Format(time.TimeOnly), now, c.Message))
					last = now
				}
				switch {
				case c.Status == corev1.ConditionUnknown:
					w.seen.unknown++
				case c.Status == corev1.ConditionTrue:
					notReadySince = time.Time{}
				}
				if c.Status != corev1.ConditionTrue {
					if notReadySince.IsZero() {
						notReadySince = time.Now()
					}
					w.seen.longestNotReady = max(w.seen.longestNotReady, time.Since(notReadySince))
				}
				if !podReady(p) {
					w.seen.podNotReady++
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return w
}

// readyConditionOf is node's Ready condition; Unknown when it has none.
func readyConditionOf(node *corev1.Node) corev1.NodeCondition {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c
		}
	}
	return corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, Reason: "NoCondition"}
}

// stop ends the polls and returns what they saw.
func (w *nodeWatch) stop() nodeSeen {
	w.cancel()
	<-w.done
	return w.seen
}
