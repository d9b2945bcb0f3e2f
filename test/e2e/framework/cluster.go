package framework

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/addons"
	"github.com/nestdev/nest/internal/controlplane"
	"github.com/nestdev/nest/internal/devcluster"
	"github.com/nestdev/nest/internal/kube"
	"github.com/nestdev/nest/internal/syncer/contract"
	"github.com/nestdev/nest/internal/testutil"
)

// StartHostCluster starts a two-node local host cluster with `nest dev up`
// and extra flags, as the cluster a the test leased (LeaseCluster), in a
// state directory named for the test, and stops it with `nest dev down` when
// the test ends. It returns the state directory; Addressing tells its ranges.
func StartHostCluster(t testing.TB, ctx context.Context, a devcluster.Addressing, flags ...string) string {
	t.Helper()
	stateDir, err := UpHostCluster(t, ctx, a, flags...)
	if err != nil {
		t.Fatal(err)
	}
	return stateDir
}

// UpHostCluster is StartHostCluster returning its failure rather than
// failing the test, so that it can run in a goroutine beside another
// cluster's start (Concurrently), where t.Fatal must not be called.
func UpHostCluster(t testing.TB, ctx context.Context, a devcluster.Addressing, flags ...string) (string, error) {
	t.Helper()
	stateDir := filepath.Join(os.TempDir(), fmt.Sprintf("nest-e2e-%s-%d", strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-")), os.Getpid()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		if out, err := Run(ctx, t, "nest", append([]string{"dev", "down", "--state-dir", stateDir}, ClusterFlags(a)...)...); err != nil {
			t.Errorf("cleanup: nest dev down: %v\n%s", err, out)
		}
	})
	args := append(append([]string{"dev", "up", "--nodes", "2", "--state-dir", stateDir}, ClusterFlags(a)...), flags...)
	out, err := Run(ctx, t, "nest", args...)
	if err != nil {
		return "", fmt.Errorf("nest %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("nest dev up:\n%s", out)
	return stateDir, nil
}

// Concurrently runs steps each in a goroutine of its own, waits for all of
// them, and fails the test with every error they returned. Tests start
// their local clusters with it: a `nest dev up` mostly waits (on the API
// server, the kubelets, cluster DNS), so two side by side take little
// longer than one.
func Concurrently(t testing.TB, steps ...func() error) {
	t.Helper()
	errs := make([]error, len(steps))
	var wg sync.WaitGroup
	for i, step := range steps {
		wg.Go(func() { errs[i] = step() })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// Nest runs the nest CLI against one host cluster and returns its combined output.
type Nest func(args ...string) (string, error)

// StartNest starts the leased local host cluster a with Nest installed. It
// returns a client of the host cluster, the host's admin kubeconfig and the
// nest CLI bound to it.
func StartNest(t testing.TB, ctx context.Context, a devcluster.Addressing) (client.Client, string, Nest) {
	t.Helper()
	return NestOn(t, ctx, StartHostCluster(t, ctx, a, "--with-nest"))
}

// NestOn returns, for the local host cluster in stateDir, what StartNest
// returns.
func NestOn(t testing.TB, ctx context.Context, stateDir string) (client.Client, string, Nest) {
	t.Helper()
	hostKubeconfig := devcluster.Layout{Root: stateDir}.AdminKubeconfig()
	nest := func(args ...string) (string, error) {
		return Run(ctx, t, "nest", append(args, "--kubeconfig", hostKubeconfig)...)
	}
	return HostClient(t, hostKubeconfig), hostKubeconfig, nest
}

// HostClient is a controller-runtime client for kubeconfig with Nest's
// scheme, allowed 50 requests a second (bursts of 100): client-go's
// default of 5 made the tests' polls and bulk deletions wait on the client,
// not on the cluster.
func HostClient(t testing.TB, kubeconfig string) client.Client {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.QPS, cfg.Burst = 50, 100
	c, err := client.New(cfg, client.Options{Scheme: kube.NewScheme()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Tenant is one virtual cluster seen from outside: its kubeconfig file and
// client config.
type Tenant struct {
	// Name is the VirtualCluster's name, Namespace its host namespace.
	Name, Namespace string
	// Dir holds the kubeconfig file for the whole test.
	Dir        string
	Kubeconfig string
	Config     *rest.Config
}

// Load fetches the tenant's current kubeconfig with `nest kubeconfig`.
func (tn *Tenant) Load(t testing.TB, nest Nest) {
	t.Helper()
	tn.Namespace = "vc-" + tn.Name
	tn.Kubeconfig = filepath.Join(tn.Dir, tn.Name+".kubeconfig")
	if out, err := nest("kubeconfig", tn.Name, "-o", tn.Kubeconfig); err != nil {
		t.Fatalf("kubeconfig %s: %v\n%s", tn.Name, err, out)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", tn.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	tn.Config = cfg
}

// Kubectl runs kubectl against the tenant and fails the test on error.
func (tn *Tenant) Kubectl(t testing.TB, ctx context.Context, args ...string) string {
	t.Helper()
	out, err := tn.KubectlErr(ctx, args...)
	if err != nil {
		t.Fatalf("tenant %s: %v", tn.Name, err)
	}
	return out
}

// KubectlErr runs kubectl against the tenant.
func (tn *Tenant) KubectlErr(ctx context.Context, args ...string) (string, error) {
	return Kubectl(ctx, tn.Kubeconfig, args...)
}

// Clientset is a client-go clientset of the tenant cluster.
func (tn *Tenant) Clientset(t testing.TB) *kubernetes.Clientset {
	t.Helper()
	cs, err := kubernetes.NewForConfig(tn.Config)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// HostPods lists the host pods nest-syncer runs for the tenant.
func (tn *Tenant) HostPods(t testing.TB, ctx context.Context, host client.Client) []corev1.Pod {
	t.Helper()
	var list corev1.PodList
	if err := host.List(ctx, &list, client.InNamespace("vc-"+tn.Name), client.MatchingLabels{contract.LabelTenantOf: tn.Name}); err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// HostPodOf finds, among host pods, the one that runs the tenant pod
// namespace/name.
func HostPodOf(pods []corev1.Pod, namespace, name string) (corev1.Pod, bool) {
	for _, p := range pods {
		if p.Annotations[contract.AnnotationTenantName] == name && p.Annotations[contract.AnnotationTenantNamespace] == namespace {
			return p, true
		}
	}
	return corev1.Pod{}, false
}

// WaitDefaultServiceAccount waits for the tenant's default ServiceAccount
// in namespace default, without which the tenant API server refuses pods.
func (tn *Tenant) WaitDefaultServiceAccount(t testing.TB, ctx context.Context) {
	t.Helper()
	cs := tn.Clientset(t)
	testutil.Eventually(t, time.Minute, "default ServiceAccount in "+tn.Name, func() error {
		_, err := cs.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err
	})
}

// WaitReady waits until the tenant's VirtualCluster is Ready for its
// current generation.
func WaitReady(t testing.TB, ctx context.Context, c client.Client, tn *Tenant) {
	t.Helper()
	testutil.Eventually(t, 4*time.Minute, "virtual cluster "+tn.Name+" Ready", func() error {
		vc := &nestv1.VirtualCluster{}
		if err := c.Get(ctx, types.NamespacedName{Namespace: tn.Namespace, Name: tn.Name}, vc); err != nil {
			return err
		}
		if !meta.IsStatusConditionTrue(vc.Status.Conditions, nestv1.ConditionReady) || vc.Status.ObservedGeneration != vc.Generation {
			return fmt.Errorf("phase %s", vc.Status.Phase)
		}
		return nil
	})
}

// ControlPlanePods lists the tenant's control-plane replicas on the host.
func (tn *Tenant) ControlPlanePods(t testing.TB, ctx context.Context, host client.Client) []corev1.Pod {
	t.Helper()
	n := controlplane.Names{VirtualCluster: tn.Name, Namespace: tn.Namespace}
	var pods corev1.PodList
	if err := host.List(ctx, &pods, client.InNamespace(tn.Namespace), client.MatchingLabels(n.Labels())); err != nil {
		t.Fatal(err)
	}
	return pods.Items
}

// AnnouncingNode is the host node whose MetalLB speaker answers for the
// tenant API Service's LoadBalancer address (its ServiceL2Status), which
// must run one of the tenant's replicas; it fails t after a minute
// without one.
func (tn *Tenant) AnnouncingNode(t testing.TB, ctx context.Context, host client.Client) string {
	t.Helper()
	n := controlplane.Names{VirtualCluster: tn.Name, Namespace: tn.Namespace}
	var node string
	testutil.Eventually(t, time.Minute, "the node announcing the tenant's LoadBalancer address", func() error {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(schema.GroupVersionKind{Group: "metallb.io", Version: "v1beta1", Kind: "ServiceL2StatusList"})
		if err := host.List(ctx, list, client.InNamespace(addons.LoadBalancerNamespace)); err != nil {
			return err
		}
		for _, s := range list.Items {
			svc, _, _ := unstructured.NestedString(s.Object, "status", "serviceName")
			ns, _, _ := unstructured.NestedString(s.Object, "status", "serviceNamespace")
			if svc == n.Service() && ns == tn.Namespace {
				node, _, _ = unstructured.NestedString(s.Object, "status", "node")
				return nil
			}
		}
		return fmt.Errorf("no ServiceL2Status for %s/%s among %d", tn.Namespace, n.Service(), len(list.Items))
	})
	for _, p := range tn.ControlPlanePods(t, ctx, host) {
		if p.Spec.NodeName == node {
			return node
		}
	}
	t.Fatalf("%s announces %s's address but runs none of its replicas", node, tn.Name)
	return ""
}

// CordonOthers cordons, with kubectl as an operator would, every schedulable
// host node but node, so that pods placed meanwhile land on node. It returns
// the function that uncordons them again; that function runs once, and also
// when the test ends if it was not called before.
func CordonOthers(t testing.TB, ctx context.Context, hostKubeconfig string, host client.Client, node string) (uncordon func()) {
	t.Helper()
	var nodes corev1.NodeList
	if err := host.List(ctx, &nodes); err != nil {
		t.Fatal(err)
	}
	var others []string
	uncordon = func() {
		for _, n := range others {
			if out, err := Kubectl(context.Background(), hostKubeconfig, "uncordon", n); err != nil {
				t.Errorf("kubectl uncordon %s: %v\n%s", n, err, out)
			}
		}
		others = nil
	}
	t.Cleanup(uncordon)
	for _, n := range nodes.Items {
		if n.Name == node || n.Spec.Unschedulable {
			continue
		}
		others = append(others, n.Name)
		if out, err := Kubectl(ctx, hostKubeconfig, "cordon", n.Name); err != nil {
			t.Fatalf("kubectl cordon %s: %v\n%s", n.Name, err, out)
		}
	}
	return uncordon
}
