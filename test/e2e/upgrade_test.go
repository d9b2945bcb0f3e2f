package e2e

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/controller/virtualcluster"
	"github.com/nestdev/nest/internal/controlplane"
	"github.com/nestdev/nest/internal/images"
	"github.com/nestdev/nest/internal/testutil"
	"github.com/nestdev/nest/internal/version"
	"github.com/nestdev/nest/test/e2e/framework"
)

// TestUpgrades moves tenants in place from the oldest supported Kubernetes
// version to the newest, on a local host cluster of three nodes: one
// replica holding a workload, and three replicas under a client calling
// every 100 ms, side by side.
func TestUpgrades(t *testing.T) {
	framework.RequireRoot(t)
	t.Parallel()
	ctx, _, host, hostKubeconfig, nest := startHAHost(t)
	from, to := version.Supported[0], version.Newest()
	if from == to {
		t.Fatalf("one supported version (%s): nothing to upgrade to", from)
	}
	dir := t.TempDir()

	t.Run("tenants", func(t *testing.T) {
		t.Run("a 1-replica tenant keeps its objects, host pods and volume data through an upgrade, and refuses a downgrade", func(t *testing.T) {
			t.Parallel()
			tn := &framework.Tenant{Name: "single", Dir: dir}
			createAt(t, nest, tn, from)
			tn.WaitDefaultServiceAccount(t, ctx)
			w := startWorkload(t, ctx, host, tn)
			checkSteps(t, upgradeTo(t, ctx, host, nest, tn, to), to, controlplane.UpgradeControlPlane)
			checkRunsVersion(t, ctx, tn, to)
			w.checkKept(t, ctx, host)
			checkUpgradeEvents(t, ctx, host, tn, controlplane.UpgradeControlPlane)
			checkRefusals(t, ctx, hostKubeconfig, nest, tn, from)
			deleteTenant(t, nest, tn)
		})
		t.Run("an upgrade held by clients of an API the target removes names it and goes on with the override", func(t *testing.T) {
			t.Parallel()
			tn := &framework.Tenant{Name: "held", Dir: dir}
			createAt(t, nest, tn, from, "--runtime-config", heldAPI.GroupVersion().String())
			if err := listHeldAPI(ctx, tn.Clientset(t)); err != nil {
				t.Fatalf("list %s in %s at %s: %v", heldAPI, tn.Name, from, err)
			}
			if out, err := nest("upgrade", tn.Name, "--version", to); err != nil {
				t.Fatalf("upgrade %s to %s: %v\n%s", tn.Name, to, err, out)
			}
			// A pre-flight that could not run (a tenant API server slow on a
			// loaded host) holds the upgrade too, and says so; the held API
			// is named once the checks run.
			name := heldAPI.Resource + "." + heldAPI.Version + "." + heldAPI.Group
			blocked := waitUpgradingReason(t, ctx, host, tn, virtualcluster.ReasonUpgradeBlocked, name, nestv1.AnnotationIgnoreRemovedAPIs)
			if !strings.Contains(blocked.Message, name) || !strings.Contains(blocked.Message, nestv1.AnnotationIgnoreRemovedAPIs) {
				t.Errorf("UpgradeBlocked says %q; want it to name %s and the annotation that overrides it", blocked.Message, name)
			}
			vc := getVirtualCluster(t, ctx, host, tn)
			if vc.Status.Version != from {
				t.Errorf("held: status.version %q, want %s still", vc.Status.Version, from)
			}
			patch := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"`+nestv1.AnnotationIgnoreRemovedAPIs+`":"true"}}}`))
			if err := host.Patch(ctx, vc, patch); err != nil {
				t.Fatal(err)
			}
			waitUpgradingReason(t, ctx, host, tn, virtualcluster.ReasonUpToDate)
			checkRunsVersion(t, ctx, tn, to)
			// What the pre-flight warned of: the new version serves nothing
			// of it, and nest-manager says so rather than pass it on.
			if err := listHeldAPI(ctx, tn.Clientset(t)); !apierrors.IsNotFound(err) {
				t.Errorf("%s after the upgrade to %s: listing %s gave %v, want NotFound", tn.Name, to, heldAPI, err)
			}
			checkUpgradeEvents(t, ctx, host, tn, virtualcluster.ReasonUpgradeBlocked, controlplane.UpgradeControlPlane, virtualcluster.ReasonRuntimeConfigNotServed)
			deleteTenant(t, nest, tn)
		})
		t.Run("a 3-replica tenant upgrades one replica and one component group at a time while a client calls it every 100 ms", func(t *testing.T) {
			t.Parallel()
			tn := &framework.Tenant{Name: "replicated", Dir: dir}
			createAt(t, nest, tn, from, "--replicas", "3", "--service-type", "LoadBalancer")
			waitReadyReplicas(t, ctx, host, tn.Name, 3)
			tn.WaitDefaultServiceAccount(t, ctx)
			pods := tenantDeployment(t, ctx, host, tn, "app", "web")
			prober := startProber(t, ctx, tn)
			out := upgradeTo(t, ctx, host, nest, tn, to)
			waitReadyReplicas(t, ctx, host, tn.Name, 3)
			waitProbeCalls(t, prober, prober.Calls()+20)
			res := prober.Stop()
			t.Logf("3 replicas, %s -> %s: %s", from, to, res)
			checkFaultBounds(t, "the upgrade", res)
			checkNoWriteLost(t, ctx, tn.Clientset(t), res, "during the upgrade")
			checkSteps(t, out, to, controlplane.UpgradeEtcd, controlplane.UpgradeAPIServer, controlplane.UpgradeControllers)
			checkRunsVersion(t, ctx, tn, to)
			checkSameHostPods(t, ctx, host, tn, "app", pods)
			checkEtcdMembers(t, ctx, host, hostKubeconfig, tn, 3)
			checkUpgradeEvents(t, ctx, host, tn, controlplane.UpgradeEtcd, controlplane.UpgradeAPIServer, controlplane.UpgradeControllers)
			deleteTenant(t, nest, tn)
		})
	})
}

// createAt makes the tenant tn at Kubernetes v and loads its kubeconfig.
func createAt(t *testing.T, nest framework.Nest, tn *framework.Tenant, v string, flags ...string) {
	t.Helper()
	args := append([]string{"create", tn.Name, "--kubernetes-version", v, "--wait", "--timeout", "6m"}, flags...)
	if out, err := nest(args...); err != nil {
		t.Fatalf("create %s: %v\n%s", tn.Name, err, out)
	}
	tn.Load(t, nest)
}

// upgradeTo runs nest upgrade --wait, logs how long it took and returns
// what it printed; the VirtualCluster then says it runs v.
func upgradeTo(t *testing.T, ctx context.Context, host client.Client, nest framework.Nest, tn *framework.Tenant, v string) string {
	t.Helper()
	start := time.Now()
	out, err := nest("upgrade", tn.Name, "--version", v, "--wait", "--timeout", "12m")
	if err != nil {
		t.Fatalf("upgrade %s to %s: %v\n%s", tn.Name, v, err, out)
	}
	t.Logf("%s: upgrade to %s took %s:\n%s", tn.Name, v, time.Since(start).Round(100*time.Millisecond), out)
	vc := &nestv1.VirtualCluster{}
	if err := host.Get(ctx, client.ObjectKey{Namespace: tn.Namespace, Name: tn.Name}, vc); err != nil {
		t.Fatal(err)
	}
	if vc.Status.Version != v {
		t.Errorf("%s after the upgrade: status.version %q, want %s", tn.Name, vc.Status.Version, v)
	}
	return out
}

// checkSteps: nest upgrade's progress (out) names the steps in that order,
// each once, and ends with the control plane at to.
func checkSteps(t *testing.T, out, to string, steps ...string) {
	t.Helper()
	var seen []string
	for _, line := range strings.Split(out, "\n") {
		for _, step := range steps {
			if strings.Contains(line, "  "+step+": ") && !slices.Contains(seen, step) {
				seen = append(seen, step)
			}
		}
	}
	if !slices.Equal(seen, steps) {
		t.Errorf("nest upgrade showed the steps %v, want %v in that order:\n%s", seen, steps, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if last := lines[len(lines)-1]; !strings.Contains(last, virtualcluster.ReasonUpToDate+": the control plane runs "+to) {
		t.Errorf("nest upgrade's last line %q, want the control plane at %s", last, to)
	}
}

// checkRunsVersion: the tenant's API server and every node report v.
func checkRunsVersion(t *testing.T, ctx context.Context, tn *framework.Tenant, v string) {
	t.Helper()
	cs := tn.Clientset(t)
	info, err := cs.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	if info.GitVersion != v {
		t.Errorf("%s's API server is %s, want %s", tn.Name, info.GitVersion, v)
	}
	testutil.Eventually(t, time.Minute, tn.Name+"'s nodes report kubelet "+v, func() error {
		nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, n := range nodes.Items {
			if n.Status.NodeInfo.KubeletVersion != v {
				return fmt.Errorf("node %s reports %s", n.Name, n.Status.NodeInfo.KubeletVersion)
			}
		}
		return nil
	})
}

// tenantDeployment runs a 2-pod Deployment name in the tenant's namespace
// ns and returns the host pod UID of each of its tenant pods.
func tenantDeployment(t *testing.T, ctx context.Context, host client.Client, tn *framework.Tenant, ns, name string) map[string]types.UID {
	t.Helper()
	if _, err := tn.KubectlErr(ctx, "create", "namespace", ns); err != nil && !strings.Contains(err.Error(), "AlreadyExists") {
		t.Fatal(err)
	}
	tn.Kubectl(t, ctx, "-n", ns, "create", "deployment", name, "--image="+testImage, "--replicas=2")
	tn.Kubectl(t, ctx, "-n", ns, "rollout", "status", "deployment/"+name, "--timeout=3m")
	return hostPodUIDs(t, ctx, host, tn, ns)
}

// hostPodUIDs maps each tenant pod of namespace ns to its host pod's UID.
func hostPodUIDs(t *testing.T, ctx context.Context, host client.Client, tn *framework.Tenant, ns string) map[string]types.UID {
	t.Helper()
	pods, err := tn.Clientset(t).CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hostPods := tn.HostPods(t, ctx, host)
	out := map[string]types.UID{}
	for _, p := range pods.Items {
		hp, ok := framework.HostPodOf(hostPods, ns, p.Name)
		if !ok {
			t.Fatalf("tenant pod %s/%s has no host pod", ns, p.Name)
		}
		out[p.Name] = hp.UID
	}
	return out
}

// checkSameHostPods: the tenant pods of namespace ns are the ones of
// before, each on the same host pod.
func checkSameHostPods(t *testing.T, ctx context.Context, host client.Client, tn *framework.Tenant, ns string, before map[string]types.UID) {
	t.Helper()
	after := hostPodUIDs(t, ctx, host, tn, ns)
	if !maps.Equal(after, before) {
		t.Errorf("%s's pods in %s and their host pods changed: before %v, after %v", tn.Name, ns, before, after)
	}
}

// workload is what a tenant holds before an upgrade: a Deployment behind a
// Service, a ConfigMap, a CRD with objects, and a pod writing a volume.
type workload struct {
	tn     *framework.Tenant
	pods   map[string]types.UID
	marker string
}

const workloadNamespace = "shop"

// startWorkload makes the workload in the tenant and waits until it runs.
func startWorkload(t *testing.T, ctx context.Context, host client.Client, tn *framework.Tenant) *workload {
	t.Helper()
	tn.Kubectl(t, ctx, "create", "namespace", workloadNamespace)
	tn.Kubectl(t, ctx, "-n", workloadNamespace, "create", "configmap", "settings", "--from-literal=owner="+tn.Name)
	manifest := `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.dev}
spec:
  group: example.dev
  names: {kind: Widget, plural: widgets, singular: widget}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object, properties: {spec: {type: object, properties: {size: {type: integer}}}}}}
`
	tn.Kubectl(t, ctx, "apply", "-f", writeFile(t, tn, "crd.yaml", manifest))
	tn.Kubectl(t, ctx, "wait", "--for=condition=Established", "crd/widgets.example.dev", "--timeout=1m")
	var widgets strings.Builder
	for i := range 3 {
		fmt.Fprintf(&widgets, "---\napiVersion: example.dev/v1\nkind: Widget\nmetadata: {name: w%d, namespace: %s}\nspec: {size: %d}\n", i, workloadNamespace, i)
	}
	tn.Kubectl(t, ctx, "apply", "-f", writeFile(t, tn, "widgets.yaml", widgets.String()))
	// The volume's writer keeps the marker it wrote first: a pod started
	// again would find it, and a volume lost would have none.
	store := `apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data, namespace: ` + workloadNamespace + `}
spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 16Mi}}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: store, namespace: ` + workloadNamespace + `}
spec:
  replicas: 1
  selector: {matchLabels: {app: store}}
  template:
    metadata: {labels: {app: store}}
    spec:
      containers:
      - name: c
        image: ` + images.Busybox + `
        imagePullPolicy: Never
        command: [sh, -c, 'test -s /data/marker || echo "written $(date +%s%N)" > /data/marker; exec sleep 86400']
        volumeMounts: [{name: data, mountPath: /data}]
      volumes: [{name: data, persistentVolumeClaim: {claimName: data}}]
`
	tn.Kubectl(t, ctx, "apply", "-f", writeFile(t, tn, "store.yaml", store))
	w := &workload{tn: tn}
	w.pods = tenantDeployment(t, ctx, host, tn, workloadNamespace, "web")
	tn.Kubectl(t, ctx, "-n", workloadNamespace, "expose", "deployment", "web", "--port=80", "--target-port=8080")
	tn.Kubectl(t, ctx, "-n", workloadNamespace, "rollout", "status", "deployment/store", "--timeout=3m")
	w.pods = hostPodUIDs(t, ctx, host, tn, workloadNamespace)
	w.marker = w.readMarker(t, ctx)
	if !strings.HasPrefix(w.marker, "written ") {
		t.Fatalf("the store pod wrote %q to its volume", w.marker)
	}
	return w
}

func (w *workload) readMarker(t *testing.T, ctx context.Context) string {
	t.Helper()
	var out string
	testutil.Eventually(t, time.Minute, "the store pod's marker", func() error {
		var err error
		out, err = w.tn.KubectlErr(ctx, "-n", workloadNamespace, "exec", "deploy/store", "--", "cat", "/data/marker")
		return err
	})
	return strings.TrimSpace(out)
}

// checkKept: every object is there, the pods run on the same host pods,
// the Service has both web pods as endpoints, and the volume holds the
// marker written before.
func (w *workload) checkKept(t *testing.T, ctx context.Context, host client.Client) {
	t.Helper()
	tn := w.tn
	if got := tn.Kubectl(t, ctx, "-n", workloadNamespace, "get", "configmap", "settings", "-o", "jsonpath={.data.owner}"); got != tn.Name {
		t.Errorf("ConfigMap settings holds owner %q after the upgrade", got)
	}
	if got := tn.Kubectl(t, ctx, "-n", workloadNamespace, "get", "widgets", "-o", "jsonpath={.items[*].spec.size}"); got != "0 1 2" {
		t.Errorf("the widgets' sizes after the upgrade: %q, want 0 1 2", got)
	}
	checkSameHostPods(t, ctx, host, tn, workloadNamespace, w.pods)
	testutil.Eventually(t, time.Minute, "Service web's ready endpoints", func() error {
		out, err := tn.KubectlErr(ctx, "-n", workloadNamespace, "get", "endpointslices", "-l", "kubernetes.io/service-name=web",
			"-o", "jsonpath={.items[*].endpoints[?(@.conditions.ready==true)].targetRef.name}")
		if err != nil {
			return err
		}
		if got := strings.Fields(out); len(got) != 2 {
			return fmt.Errorf("ready endpoints %v, want the 2 web pods", got)
		}
		return nil
	})
	if got := w.readMarker(t, ctx); got != w.marker {
		t.Errorf("the volume holds %q after the upgrade, want %q", got, w.marker)
	}
}

// writeFile writes content to the file TENANT-name in the tenant's
// directory, and returns its path. Not a subtest's directory: its name
// holds the subtest's commas, which kubectl -f splits paths at.
func writeFile(t testing.TB, tn *framework.Tenant, name, content string) string {
	t.Helper()
	path := filepath.Join(tn.Dir, tn.Name+"-"+name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// checkUpgradeEvents: the VirtualCluster has an event for each step, and
// one for the end.
func checkUpgradeEvents(t *testing.T, ctx context.Context, host client.Client, tn *framework.Tenant, steps ...string) {
	t.Helper()
	// The recorder writes events in the background.
	testutil.Eventually(t, time.Minute, "an event for each step of "+tn.Name+"'s upgrade", func() error {
		var events corev1.EventList
		if err := host.List(ctx, &events, client.InNamespace(tn.Namespace)); err != nil {
			return err
		}
		var reasons []string
		for _, e := range events.Items {
			if e.InvolvedObject.Kind == nestv1.VirtualClusterKind && e.InvolvedObject.Name == tn.Name {
				reasons = append(reasons, e.Reason)
			}
		}
		for _, want := range append(steps, virtualcluster.ReasonUpToDate) {
			if !slices.Contains(reasons, want) {
				return fmt.Errorf("no %s event among %v", want, reasons)
			}
		}
		return nil
	})
}

// checkRefusals: a downgrade to older and an unknown version are refused,
// by nest upgrade and by the host API server, with the field named.
func checkRefusals(t *testing.T, ctx context.Context, hostKubeconfig string, nest framework.Nest, tn *framework.Tenant, older string) {
	t.Helper()
	for _, tc := range []struct{ to, want string }{
		{older, "downgrades are refused"},
		{"v1.99.0", "unsupported Kubernetes version"},
	} {
		out, err := nest("upgrade", tn.Name, "--version", tc.to)
		if err == nil || !strings.Contains(out+err.Error(), tc.want) || !strings.Contains(out+err.Error(), "kubernetesVersion") {
			t.Errorf("nest upgrade --version %s: %v\n%s\nwant a refusal naming kubernetesVersion: %s", tc.to, err, out, tc.want)
		}
		patch := fmt.Sprintf(`{"spec":{"kubernetesVersion":%q}}`, tc.to)
		_, err = framework.Kubectl(ctx, hostKubeconfig, "-n", tn.Namespace, "patch", "virtualcluster", tn.Name, "--type", "merge", "-p", patch)
		if err == nil || !strings.Contains(err.Error(), "spec.kubernetesVersion") {
			t.Errorf("patching kubernetesVersion to %s: %v, want a refusal naming spec.kubernetesVersion", tc.to, err)
		}
	}
}

// heldAPI is an API that v1.37 removes, off by default in v1.36: a tenant
// that turned it on and listed it holds its upgrade to v1.37.
var heldAPI = schema.GroupVersionResource{Group: "networking.k8s.io", Version: "v1beta1", Resource: "servicecidrs"}

// listHeldAPI lists heldAPI in the tenant of cs: its API server counts the
// request in apiserver_requested_deprecated_apis.
func listHeldAPI(ctx context.Context, cs kubernetes.Interface) error {
	path := "/apis/" + heldAPI.GroupVersion().String() + "/" + heldAPI.Resource
	_, err := cs.Discovery().RESTClient().Get().AbsPath(path).DoRaw(ctx)
	return err
}

// waitUpgradingReason waits until tn's Upgrading condition has reason and
// a message holding each of saying, and returns it.
func waitUpgradingReason(t *testing.T, ctx context.Context, host client.Client, tn *framework.Tenant, reason string, saying ...string) metav1.Condition {
	t.Helper()
	var c metav1.Condition
	testutil.Eventually(t, 6*time.Minute, tn.Name+": Upgrading "+reason+" saying "+strings.Join(saying, ", "), func() error {
		vc := &nestv1.VirtualCluster{}
		if err := host.Get(ctx, client.ObjectKey{Namespace: tn.Namespace, Name: tn.Name}, vc); err != nil {
			return err
		}
		got := meta.FindStatusCondition(vc.Status.Conditions, nestv1.ConditionUpgrading)
		if got == nil || got.Reason != reason {
			return fmt.Errorf("Upgrading is %+v", got)
		}
		for _, want := range saying {
			if !strings.Contains(got.Message, want) {
				return fmt.Errorf("Upgrading %s says %q, not yet %q", reason, got.Message, want)
			}
		}
		c = *got
		return nil
	})
	return c
}
