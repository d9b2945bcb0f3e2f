package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/controller/memberusage"
	"github.com/nestdev/nest/internal/controlplane"
	"github.com/nestdev/nest/internal/devcluster"
	"github.com/nestdev/nest/internal/images"
	"github.com/nestdev/nest/internal/syncer"
	"github.com/nestdev/nest/internal/syncer/contract"
	"github.com/nestdev/nest/internal/testutil"
	"github.com/nestdev/nest/test/e2e/framework"
)

// tokenMaxAge is how often TestMemberCluster's tenant has its tokens
// refreshed, and rotationWatch how long its rotation check calls the tenant
// API with the pod's token.
const (
	tokenMaxAge   = 20 * time.Second
	rotationWatch = 100 * time.Second
)

// gpuMember is the name of the MemberCluster TestMemberCluster registers
// (the local cluster standing in for it is named by its slot lease).
const gpuMember = "e2emem"

// TestMemberCluster runs a tenant's GPU work in a member cluster: a second
// local cluster on this machine whose worker advertises two fake GPUs,
// registered with `nest member add` and granted one GPU with `nest member
// grant`. Everything is real: two API servers, two sets of kubelets,
// containerd and CNI, and nest-syncer placing pods across them.
func TestMemberCluster(t *testing.T) {
	framework.RequireRoot(t)
	t.Parallel()
	clusters := framework.LeaseClusters(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	hostDir, memberDir := startHostAndMember(t, ctx, clusters[0], clusters[1])
	e := startMemberEnv(t, ctx, hostDir, memberDir)
	tn, vc, host, grant, memberCS := e.tn, e.vc, e.host, e.grant, e.member
	tenant := tn.Clientset(t)
	nodeName := contract.MemberNodeName(gpuMember)
	// The rotation check calls the tenant API for rotationWatch: its pod
	// starts now and runs beside the subtests up to the one that reads its
	// result.
	startRotator(t, ctx, tn, tenant)

	t.Run("the tenant sees the member as one tainted node sized to the grant", func(t *testing.T) {
		testutil.Eventually(t, 3*time.Minute, "member node Ready with 1 GPU", func() error {
			n, err := tenant.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
			if err != nil {
				return err
			}
			gpus := n.Status.Allocatable[devcluster.GPUResource]
			if !nodeReady(n) || gpus.Value() != 1 {
				return fmt.Errorf("ready %t, allocatable %v", nodeReady(n), n.Status.Allocatable)
			}
			if len(n.Spec.Taints) != 1 || n.Spec.Taints[0].Key != contract.MemberTaintKey {
				return fmt.Errorf("taints %v", n.Spec.Taints)
			}
			return nil
		})
	})

	t.Run("a GPU Job runs in the member, calls the tenant API with its projected token, and completes", func(t *testing.T) {
		tn.WaitDefaultServiceAccount(t, ctx)
		tn.Kubectl(t, ctx, "create", "rolebinding", "train-view", "-n", "default", "--clusterrole=view", "--serviceaccount=default:default")
		job := gpuJob("train", 1, "kube", "/api/v1/namespaces/default/pods")
		if _, err := tenant.BatchV1().Jobs("default").Create(ctx, job, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, 4*time.Minute, "Job train complete", func() error {
			j, err := tenant.BatchV1().Jobs("default").Get(ctx, "train", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if j.Status.Succeeded != 1 {
				return fmt.Errorf("succeeded %d failed %d; pods: %s", j.Status.Succeeded, j.Status.Failed, podSummary(ctx, tenant, "job-name=train"))
			}
			return nil
		})
		pods, err := tenant.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "job-name=train"})
		if err != nil || len(pods.Items) == 0 {
			t.Fatalf("the Job's pods: %v (%d)", err, len(pods.Items))
		}
		pod := pods.Items[0]
		if pod.Spec.NodeName != nodeName {
			t.Errorf("the Job's pod ran on %s, want %s", pod.Spec.NodeName, nodeName)
		}
		inMember, err := memberCS.CoreV1().Pods(grant.Namespace).Get(ctx, contract.HostName(tn.Name, "default", pod.Name), metav1.GetOptions{})
		if err != nil {
			t.Fatalf("the Job's pod in the member's namespace %s: %v", grant.Namespace, err)
		}
		if inMember.Spec.NodeName == "" || !strings.HasPrefix(inMember.Spec.NodeName, "nest-") {
			t.Errorf("member pod on node %q", inMember.Spec.NodeName)
		}
		logs := tn.Kubectl(t, ctx, "logs", "-n", "default", pod.Name)
		if !strings.Contains(logs, `"kind":"PodList"`) {
			t.Errorf("kubectl logs of the member pod = %q; want the PodList it read from the tenant API server", logs)
		}
		checkUsageRecorded(t, ctx, host, vc, pod)
	})

	t.Run("exec reaches a pod in the member", func(t *testing.T) {
		pod := memberPod("shell", 0)
		if _, err := tenant.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitTenantPodRunning(t, ctx, tenant, "shell")
		out := tn.Kubectl(t, ctx, "exec", "-n", "default", "shell", "--", "/testapp", "cat", "/etc/hostname")
		if strings.TrimSpace(out) == "" {
			t.Error("exec printed no hostname")
		}
	})

	t.Run("a member pod resolves and reaches a tenant NodePort Service by its DNS name", func(t *testing.T) {
		web := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", Labels: map[string]string{"app": "web"}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: images.TestApp, ImagePullPolicy: corev1.PullNever}}},
		}
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Selector: map[string]string{"app": "web"},
				Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}},
		}
		if _, err := tenant.CoreV1().Pods("default").Create(ctx, web, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := tenant.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		internal := svc.DeepCopy()
		internal.Name, internal.Spec.Type = "internal", corev1.ServiceTypeClusterIP
		if _, err := tenant.CoreV1().Services("default").Create(ctx, internal, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		client := memberPod("client", 0)
		if _, err := tenant.CoreV1().Pods("default").Create(ctx, client, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitTenantPodRunning(t, ctx, tenant, "web")
		waitTenantPodRunning(t, ctx, tenant, "client")
		// A new Service answers once the member's kube-proxy and
		// nest-syncer's node-port proxy have it, as in any cluster.
		testutil.Eventually(t, 2*time.Minute, "web reached from the member pod by name", func() error {
			out, err := tn.KubectlErr(ctx, "exec", "-n", "default", "client", "--", "/testapp", "get", "http://web.default.svc.cluster.local/echo?msg=from-the-member")
			if err != nil {
				return fmt.Errorf("%v: %s", err, out)
			}
			if !strings.Contains(out, "from-the-member") {
				return fmt.Errorf("GET printed %q; want the echo of the tenant's web pod", out)
			}
			return nil
		})
		// Only what the tenant exposes on its nodes resolves there: a
		// ClusterIP Service is a host address the member cannot route.
		out, err := tn.KubectlErr(ctx, "exec", "-n", "default", "client", "--", "/testapp", "dns", "internal.default.svc.cluster.local")
		if err == nil || !strings.Contains(err.Error(), "no such host") {
			t.Errorf("a ClusterIP Service's name from the member pod resolved (%q) or failed otherwise (%v); want no such host", out, err)
		}
	})

	t.Run("member pods reach the tenant through LoadBalancer addresses, not host node ports", func(t *testing.T) {
		memberLBIP := checkMemberPathIsLoadBalancers(t, ctx, host, vc, e.lb)
		// Every Service Nest keeps in the member points at one of the two
		// addresses: the tenant's for its API server, the grant's for the
		// rest. A host node's address there would be a node port.
		slices, err := memberCS.DiscoveryV1().EndpointSlices(grant.Namespace).List(ctx, metav1.ListOptions{LabelSelector: contract.LabelMemberNetwork})
		if err != nil {
			t.Fatal(err)
		}
		apiHost, _, _ := net.SplitHostPort(e.lb)
		seen := map[string]bool{}
		for _, s := range slices.Items {
			svc := s.Labels[discoveryv1.LabelServiceName]
			seen[svc] = true
			want := memberLBIP
			if svc == "kubernetes" {
				want = apiHost
			}
			if len(s.Endpoints) != 1 || s.Endpoints[0].Addresses[0] != want {
				t.Errorf("member EndpointSlice %s of %s points at %+v; want %s", s.Name, svc, s.Endpoints, want)
			}
		}
		for _, svc := range []string{"nest-dns", contract.MemberInjectorService, "kubernetes"} {
			if !seen[svc] {
				t.Errorf("no member EndpointSlice for %s among %d", svc, len(slices.Items))
			}
		}
	})

	t.Run("the injector in the member points a pod made there at the tenant and refuses one without the tenant's labels", func(t *testing.T) {
		testutil.Eventually(t, 3*time.Minute, "MemberCluster InjectorReady", func() error {
			mc := &nestv1.MemberCluster{}
			if err := host.Get(ctx, client.ObjectKey{Name: gpuMember}, mc); err != nil {
				return err
			}
			c := meta.FindStatusCondition(mc.Status.Conditions, nestv1.ConditionInjectorReady)
			if c == nil || c.Status != metav1.ConditionTrue {
				return fmt.Errorf("InjectorReady %+v", c)
			}
			return nil
		})
		dns, err := memberCS.CoreV1().Services(grant.Namespace).Get(ctx, "nest-dns", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// The member's own admin, not nest-syncer, creates these: a dry run,
		// so nothing is left behind.
		dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
		pod := restrictedPod("by-hand", map[string]string{contract.LabelTenantOf: tn.Name, contract.LabelTenantNamespace: "default"})
		got, err := memberCS.CoreV1().Pods(grant.Namespace).Create(ctx, pod, dryRun)
		if err != nil {
			t.Fatalf("a pod with the tenant's labels: %v", err)
		}
		env := map[string]string{}
		for _, v := range got.Spec.Containers[0].Env {
			env[v.Name] = v.Value
		}
		apiHost := strings.Split(e.lb, ":")[0]
		if env["KUBERNETES_SERVICE_HOST"] != apiHost || got.Spec.DNSPolicy != corev1.DNSNone ||
			got.Spec.DNSConfig == nil || got.Spec.DNSConfig.Nameservers[0] != dns.Spec.ClusterIP {
			t.Errorf("the injected pod has KUBERNETES_SERVICE_HOST %q, DNS %s %+v; want %s and nest-dns %s",
				env["KUBERNETES_SERVICE_HOST"], got.Spec.DNSPolicy, got.Spec.DNSConfig, apiHost, dns.Spec.ClusterIP)
		}
		_, err = memberCS.CoreV1().Pods(grant.Namespace).Create(ctx, restrictedPod("stray", nil), dryRun)
		if err == nil || !strings.Contains(err.Error(), "label "+contract.LabelTenantOf) {
			t.Errorf("a pod without the tenant's labels: %v; want it refused naming the label", err)
		}
	})

	t.Run("a pod over the grant stays Pending with QuotaExceeded and never reaches the member", func(t *testing.T) {
		pod := memberPod("greedy", 2)
		pod.Spec.NodeName = nodeName // past the scheduler, as a hostile tenant may
		if _, err := tenant.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, 2*time.Minute, "greedy held with QuotaExceeded", func() error {
			p, err := tenant.CoreV1().Pods("default").Get(ctx, "greedy", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if p.Status.Phase != corev1.PodPending || p.Status.Reason != syncer.ReasonQuotaExceeded {
				return fmt.Errorf("phase %s reason %q message %q", p.Status.Phase, p.Status.Reason, p.Status.Message)
			}
			return nil
		})
		_, err := memberCS.CoreV1().Pods(grant.Namespace).Get(ctx, contract.HostName(tn.Name, "default", "greedy"), metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			t.Errorf("the pod over the grant is in the member (get: %v)", err)
		}
	})

	t.Run("the member credential Nest keeps reaches only the tenant's namespace", func(t *testing.T) {
		mc := memberCredential(t, ctx, host, vc)
		if _, err := mc.CoreV1().Pods(grant.Namespace).List(ctx, metav1.ListOptions{}); err != nil {
			t.Errorf("list pods in the tenant's own member namespace: %v", err)
		}
		for what, call := range map[string]func() error{
			"list Secrets in kube-system": func() error {
				_, err := mc.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{})
				return err
			},
			"list Nodes": func() error { _, err := mc.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); return err },
			"list pods in default": func() error {
				_, err := mc.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
				return err
			},
		} {
			if err := call(); !apierrors.IsForbidden(err) {
				t.Errorf("%s with the member credential: %v, want Forbidden", what, err)
			}
		}
	})

	// Before the member loses its node: the rotator runs there.
	t.Run("the projected token is rotated in place and every call with it succeeds", func(t *testing.T) {
		testutil.Eventually(t, rotationWatch+3*time.Minute, "rotator done", func() error {
			p, err := tenant.CoreV1().Pods("default").Get(ctx, rotatorPod, metav1.GetOptions{})
			if err != nil {
				return err
			}
			switch p.Status.Phase {
			case corev1.PodSucceeded:
				return nil
			case corev1.PodFailed:
				t.Fatalf("a call with the rotated token failed: %s", tn.Kubectl(t, ctx, "logs", "-n", "default", rotatorPod, "--tail", "5"))
			}
			return fmt.Errorf("phase %s", p.Status.Phase)
		})
		tokens := map[string]bool{}
		calls := 0
		for line := range strings.Lines(tn.Kubectl(t, ctx, "logs", "-n", "default", rotatorPod)) {
			if digest, ok := strings.CutPrefix(strings.TrimSpace(line), "ok "); ok {
				tokens[digest] = true
				calls++
			}
		}
		t.Logf("%d calls, all successful, with %d tokens over %s (tokenMaxAge %s)", calls, len(tokens), rotationWatch, tokenMaxAge)
		if len(tokens) < 4 {
			t.Errorf("%d distinct tokens over %s, want at least 4 (3 rotations) with tokenMaxAge %s", len(tokens), rotationWatch, tokenMaxAge)
		}
	})

	// Last: it takes the member's worker away and brings it back.
	t.Run("losing the member's GPU node: the member node goes NotReady, the tenant keeps working, and comes back", func(t *testing.T) {
		worker := devcluster.NodeName(1)
		framework.KillRecorded(t, memberDir, worker+".kubelet", worker+".containerd")
		waitMemberNodeReady(t, ctx, tenant, nodeName, false, 4*time.Minute)
		if reason := readyReason(t, ctx, tenant, nodeName); reason != "MemberLostNodes" {
			t.Errorf("the member node is NotReady with reason %q, want MemberLostNodes: the member answers, but its only GPU node does not", reason)
		}
		if _, err := tenant.CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); err != nil {
			t.Errorf("the tenant API while its member is down: %v", err)
		}
		onHost := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "on-host", Namespace: "default"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: images.TestApp, ImagePullPolicy: corev1.PullNever}}}}
		if _, err := tenant.CoreV1().Pods("default").Create(ctx, onHost, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitTenantPodRunning(t, ctx, tenant, "on-host")
		// The worker's runtime starts again and nothing else, as a node's
		// does: a whole `nest dev up` would first wait, for over a minute,
		// on the deletion of the lost node's pods.
		if err := devcluster.RestartNodeRuntime(ctx, memberDir, worker); err != nil {
			t.Fatal(err)
		}
		waitMemberNodeReady(t, ctx, tenant, nodeName, true, 4*time.Minute)
		// The restarted kubelet kept the worker's GPUs, so the grant's one is back.
		n, err := tenant.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if gpus := n.Status.Allocatable[devcluster.GPUResource]; gpus.Value() != 1 {
			t.Errorf("the member node is back with allocatable %v, want 1 %s", n.Status.Allocatable, devcluster.GPUResource)
		}
	})
}

// memberEnv is a host cluster with Nest, a member cluster registered with
// `nest member add`, and a tenant granted one of the member's GPUs.
type memberEnv struct {
	host   client.Client
	tn     *framework.Tenant
	vc     *nestv1.VirtualCluster
	grant  nestv1.MemberGrantStatus
	member kubernetes.Interface
	// lb is host:port where member pods reach the tenant API server.
	lb string
}

// memberStateDir is the state directory of the member cluster of this
// test process.
func memberStateDir() string {
	return filepath.Join(os.TempDir(), fmt.Sprintf("nest-e2e-membercluster-member-%d", os.Getpid()))
}

// memberClusterFlags are the `nest dev up` flags of a member cluster leased
// as a: two nodes, the worker advertising two GPUs.
func memberClusterFlags(a devcluster.Addressing) []string {
	return append(framework.ClusterFlags(a), "--nodes", "2", "--gpus", "2")
}

// startHostAndMember starts the host cluster with Nest, leased as host, and
// the member cluster, leased as member, side by side, and returns their
// state directories.
func startHostAndMember(t *testing.T, ctx context.Context, host, member devcluster.Addressing) (hostDir, memberDir string) {
	t.Helper()
	memberDir = memberStateDir()
	framework.Concurrently(t,
		func() (err error) { hostDir, err = framework.UpHostCluster(t, ctx, host, "--with-nest"); return err },
		func() error { _, err := upLocalCluster(t, ctx, memberDir, memberClusterFlags(member)...); return err })
	return hostDir, memberDir
}

// startMemberEnv takes the running host cluster in hostDir and member
// cluster in memberDir, creates the tenant and grants it a GPU of the member.
func startMemberEnv(t testing.TB, ctx context.Context, hostDir, memberDir string) *memberEnv {
	t.Helper()
	e := &memberEnv{}
	memberKubeconfig := devcluster.Layout{Root: memberDir}.AdminKubeconfig()
	e.member = clientset(t, memberKubeconfig)

	host, hostKubeconfig, nest := framework.NestOn(t, ctx, hostDir)
	e.host = host
	e.tn = &framework.Tenant{Name: "mu", Dir: t.TempDir()}
	if out, err := nest("create", e.tn.Name); err != nil {
		t.Fatalf("nest create: %v\n%s", err, out)
	}
	e.vc = &nestv1.VirtualCluster{}
	if err := host.Get(ctx, client.ObjectKey{Namespace: "vc-" + e.tn.Name, Name: e.tn.Name}, e.vc); err != nil {
		t.Fatal(err)
	}
	// Tokens are refreshed every tokenMaxAge, so a short test sees several
	// rotations; the label is what the MemberCluster selects.
	before := e.vc.DeepCopy()
	e.vc.Labels = map[string]string{"team": "ml"}
	e.vc.Spec.VirtualNode.TokenMaxAge = &metav1.Duration{Duration: tokenMaxAge}
	if err := host.Patch(ctx, e.vc, client.MergeFrom(before)); err != nil {
		t.Fatal(err)
	}
	e.tn.Namespace = e.vc.Namespace
	framework.WaitReady(t, ctx, host, e.tn)
	e.tn.Load(t, nest)

	// The member is registered with no address of its own: the local host
	// cluster has a load balancer (MetalLB on its bridge, which the
	// member's nodes reach across the two bridges), so member pods reach
	// the tenant through LoadBalancer addresses, not host node ports.
	e.lb = tenantLoadBalancerAddress(t, ctx, host, e.vc)
	if out, err := framework.Run(ctx, t, "nest", "member", "add", gpuMember, "--kubeconfig", memberKubeconfig, "--host-kubeconfig", hostKubeconfig,
		"--selector", "team=ml"); err != nil {
		t.Fatalf("nest member add: %v\n%s", err, out)
	}
	if out, err := nest("member", "grant", e.tn.Name, gpuMember, "--gpu", "1"); err != nil {
		t.Fatalf("nest member grant: %v\n%s", err, out)
	}
	e.grant = waitGrantReady(t, ctx, host, e.vc)
	waitMemberNodeReady(t, ctx, e.tn.Clientset(t), contract.MemberNodeName(gpuMember), true, 3*time.Minute)
	return e
}

// rotatorPod is the tenant pod on the member that calls the tenant API
// with its projected token for rotationWatch, printing a digest of the
// token of every call.
const rotatorPod = "rotator"

// startRotator lets the tenant's default service account view the default
// namespace and starts rotatorPod there.
func startRotator(t *testing.T, ctx context.Context, tn *framework.Tenant, tenant kubernetes.Interface) {
	t.Helper()
	tn.WaitDefaultServiceAccount(t, ctx)
	tn.Kubectl(t, ctx, "create", "rolebinding", "rotator-view", "-n", "default", "--clusterrole=view", "--serviceaccount=default:default")
	pod := memberPod(rotatorPod, 0)
	pod.Spec.RestartPolicy = corev1.RestartPolicyNever
	pod.Spec.Containers[0].Args = []string{"kube-watch", "/api/v1/namespaces/default/pods", fmt.Sprint(int(rotationWatch.Seconds()))}
	if _, err := tenant.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// checkUsageRecorded waits for nest-manager to record the finished member
// pod's usage on the host: a record with its GPU and its end, and the
// member's summary counting it.
func checkUsageRecorded(t testing.TB, ctx context.Context, host client.Client, vc *nestv1.VirtualCluster, pod corev1.Pod) {
	t.Helper()
	testutil.Eventually(t, 2*time.Minute, "usage of "+pod.Name+" recorded", func() error {
		cm := &corev1.ConfigMap{}
		if err := host.Get(ctx, client.ObjectKey{Namespace: vc.Namespace, Name: memberusage.ConfigMapName(vc.Name)}, cm); err != nil {
			return err
		}
		var book memberusage.Book
		if err := json.Unmarshal([]byte(cm.Data[memberusage.RecordsKey]), &book); err != nil {
			return err
		}
		for _, r := range book.Records {
			if r.Name != pod.Name || r.Namespace != pod.Namespace {
				continue
			}
			gpus := r.Requests[devcluster.GPUResource]
			if r.Member != gpuMember || gpus.Value() != 1 || r.End == nil || r.End.Before(r.Start) {
				return fmt.Errorf("record %+v: want member %s, 1 GPU, an end (not before the start)", r, gpuMember)
			}
			got := &nestv1.VirtualCluster{}
			if err := host.Get(ctx, client.ObjectKeyFromObject(vc), got); err != nil {
				return err
			}
			if len(got.Status.MemberUsage) != 1 || got.Status.MemberUsage[0].Pods < 1 {
				return fmt.Errorf("status.memberUsage %+v", got.Status.MemberUsage)
			}
			t.Logf("usage recorded: %s ran %.1fs on %s; summary %+v", r.Name, r.End.Sub(r.Start).Seconds(), r.Member, got.Status.MemberUsage[0])
			return nil
		}
		return fmt.Errorf("no record of %s/%s among %d", pod.Namespace, pod.Name, len(book.Records))
	})
}

func readyReason(t testing.TB, ctx context.Context, tenant kubernetes.Interface, name string) string {
	t.Helper()
	n, err := tenant.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Reason
		}
	}
	return ""
}

func waitMemberNodeReady(t testing.TB, ctx context.Context, tenant kubernetes.Interface, name string, ready bool, timeout time.Duration) {
	t.Helper()
	start := time.Now()
	testutil.Eventually(t, timeout, fmt.Sprintf("member node %s Ready=%t", name, ready), func() error {
		n, err := tenant.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if nodeReady(n) != ready {
			return fmt.Errorf("conditions %v", n.Status.Conditions)
		}
		return nil
	})
	t.Logf("member node Ready=%t after %.0fs", ready, time.Since(start).Seconds())
}

// tenantLoadBalancerAddress is host:port of the tenant API server's
// LoadBalancer address, which the tenant is Ready only with.
func tenantLoadBalancerAddress(t testing.TB, ctx context.Context, host client.Client, vc *nestv1.VirtualCluster) string {
	t.Helper()
	svc := &corev1.Service{}
	if err := host.Get(ctx, client.ObjectKey{Namespace: vc.Namespace, Name: controlplane.NamesOf(vc).Service()}, svc); err != nil {
		t.Fatal(err)
	}
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer || len(svc.Status.LoadBalancer.Ingress) == 0 || svc.Status.LoadBalancer.Ingress[0].IP == "" {
		t.Fatalf("the tenant API server's Service %s is %s with ingress %+v; want a LoadBalancer with an IP (nest dev up's default)", svc.Name, svc.Spec.Type, svc.Status.LoadBalancer.Ingress)
	}
	return net.JoinHostPort(svc.Status.LoadBalancer.Ingress[0].IP, strconv.Itoa(int(svc.Spec.Ports[0].Port)))
}

// waitGrantReady waits for the VirtualCluster's one member grant to be set
// up, and returns its status.
func waitGrantReady(t testing.TB, ctx context.Context, host client.Client, vc *nestv1.VirtualCluster) nestv1.MemberGrantStatus {
	t.Helper()
	var got nestv1.MemberGrantStatus
	testutil.Eventually(t, 3*time.Minute, "member grant Ready", func() error {
		if err := host.Get(ctx, client.ObjectKeyFromObject(vc), vc); err != nil {
			return err
		}
		if len(vc.Status.Members) != 1 || !vc.Status.Members[0].Ready {
			return fmt.Errorf("status.members %+v", vc.Status.Members)
		}
		got = vc.Status.Members[0]
		return nil
	})
	return got
}

// memberCredential is a client of the member with the credential nest-manager
// handed nest-syncer.
func memberCredential(t testing.TB, ctx context.Context, host client.Client, vc *nestv1.VirtualCluster) kubernetes.Interface {
	t.Helper()
	secret := &corev1.Secret{}
	if err := host.Get(ctx, client.ObjectKey{Namespace: vc.Namespace, Name: contract.MembersSecret(vc.Name)}, secret); err != nil {
		t.Fatal(err)
	}
	p, err := contract.ParseMemberPlacements(secret.Data[contract.MembersKey])
	if err != nil || len(p.Members) != 1 {
		t.Fatalf("placements %+v: %v", p, err)
	}
	m := p.Members[0]
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: m.Server, BearerToken: m.Token,
		TLSClientConfig: rest.TLSClientConfig{CAData: m.CAData, ServerName: m.TLSServerName}})
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// memberPod is a tenant pod that tolerates the member node and asks for
// gpus GPUs, running testapp's server.
// restrictedPod is a pod within Pod Security "restricted", with labels.
func restrictedPod(name string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: corev1.PodSpec{
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65534),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{Name: "app", Image: images.TestApp, ImagePullPolicy: corev1.PullNever,
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false),
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}}},
		},
	}
}

func memberPod(name string, gpus int64) *corev1.Pod {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{
			Tolerations:  []corev1.Toleration{{Key: contract.MemberTaintKey, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
			NodeSelector: map[string]string{contract.MemberTaintKey: gpuMember},
			Containers:   []corev1.Container{{Name: "app", Image: images.TestApp, ImagePullPolicy: corev1.PullNever}},
		},
	}
	if gpus > 0 {
		q := *resource.NewQuantity(gpus, resource.DecimalSI)
		pod.Spec.Containers[0].Resources.Limits = corev1.ResourceList{devcluster.GPUResource: q}
	}
	return pod
}

// gpuJob is a Job of one pod on the member asking for gpus GPUs that runs
// testapp with args.
func gpuJob(name string, gpus int64, args ...string) *batchv1.Job {
	pod := memberPod(name, gpus)
	pod.Spec.Containers[0].Args = args
	pod.Spec.RestartPolicy = corev1.RestartPolicyNever
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec:       batchv1.JobSpec{BackoffLimit: ptr.To[int32](0), Template: corev1.PodTemplateSpec{Spec: pod.Spec}},
	}
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func waitTenantPodRunning(t testing.TB, ctx context.Context, tenant kubernetes.Interface, name string) {
	t.Helper()
	testutil.Eventually(t, 3*time.Minute, "pod "+name+" Running", func() error {
		p, err := tenant.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase != corev1.PodRunning {
			return fmt.Errorf("phase %s reason %q message %q", p.Status.Phase, p.Status.Reason, p.Status.Message)
		}
		return nil
	})
}

// podSummary is name, phase and message of the tenant pods selector picks,
// for failure messages.
func podSummary(ctx context.Context, tenant kubernetes.Interface, selector string) string {
	pods, err := tenant.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, p := range pods.Items {
		out = append(out, fmt.Sprintf("%s %s %s %q", p.Name, p.Spec.NodeName, p.Status.Phase, p.Status.Message))
	}
	return strings.Join(out, "; ")
}

// checkMemberPathIsLoadBalancers checks that the grant's status says member
// pods reach the tenant through LoadBalancer addresses, at tenantLB for its
// API server, and that the grant's host Service is a LoadBalancer with an
// address, which it returns.
func checkMemberPathIsLoadBalancers(t testing.TB, ctx context.Context, host client.Client, vc *nestv1.VirtualCluster, tenantLB string) string {
	t.Helper()
	cur := &nestv1.VirtualCluster{}
	if err := host.Get(ctx, client.ObjectKeyFromObject(vc), cur); err != nil {
		t.Fatal(err)
	}
	if len(cur.Status.Members) != 1 || cur.Status.Members[0].Network != nestv1.MemberNetworkLoadBalancer || cur.Status.Members[0].APIServerAddress != tenantLB {
		t.Errorf("status.members %+v; want network LoadBalancer and apiServerAddress %s", cur.Status.Members, tenantLB)
	}
	var ip string
	testutil.Eventually(t, time.Minute, "the grant's host LoadBalancer has an address", func() error {
		svc := &corev1.Service{}
		if err := host.Get(ctx, client.ObjectKey{Namespace: vc.Namespace, Name: contract.MemberHostService(vc.Name, gpuMember)}, svc); err != nil {
			return err
		}
		if svc.Spec.Type != corev1.ServiceTypeLoadBalancer || len(svc.Status.LoadBalancer.Ingress) == 0 || svc.Status.LoadBalancer.Ingress[0].IP == "" {
			return fmt.Errorf("%s is %s with ingress %+v", svc.Name, svc.Spec.Type, svc.Status.LoadBalancer.Ingress)
		}
		ip = svc.Status.LoadBalancer.Ingress[0].IP
		return nil
	})
	return ip
}
