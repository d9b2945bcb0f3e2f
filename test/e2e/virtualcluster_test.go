package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/controller/globalnode"
	"github.com/nestdev/nest/internal/controlplane"
	"github.com/nestdev/nest/internal/testutil"
	"github.com/nestdev/nest/internal/version"
	"github.com/nestdev/nest/test/e2e/framework"
)

// TestVirtualClusters runs Nest on a local host cluster and checks what issue 3
// asks of VirtualClusters: creation, tenant access and isolation, convergence,
// deletion and validation.
func TestVirtualClusters(t *testing.T) {
	framework.RequireRoot(t)
	t.Parallel()
	cluster := framework.LeaseCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	host, hostKubeconfig, nest := framework.StartNest(t, ctx, cluster)

	t.Run("the GlobalNode inventory lists the host's worker nodes and not its control-plane node", func(t *testing.T) {
		checkInventory(t, ctx, host, nest)
	})

	dir := t.TempDir()
	tenants := map[string]*framework.Tenant{"alpha": {Name: "alpha", Dir: dir}, "beta": {Name: "beta", Dir: dir}}
	// beta is reached through the local host cluster's load balancer, its
	// default (it names no type), alpha through a node port. alpha runs
	// the default Kubernetes version, the newest, beta the oldest.
	oldest := version.Supported[0]
	wantVersion := map[string]string{"alpha": version.Newest(), "beta": oldest}
	createFlags := map[string][]string{"alpha": {"--service-type", "NodePort"}, "beta": {"--kubernetes-version", oldest}}
	t.Run("two virtual clusters created at once both become Ready", func(t *testing.T) {
		var wg sync.WaitGroup
		errs := make(chan error, len(tenants))
		for name := range tenants {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if out, err := nest(append([]string{"create", name, "--wait", "--timeout", "4m"}, createFlags[name]...)...); err != nil {
					errs <- fmt.Errorf("create %s: %v\n%s", name, err, out)
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		for _, tn := range tenants {
			tn.Load(t, nest)
		}
	})
	if t.Failed() {
		t.FailNow()
	}
	alpha, beta := tenants["alpha"], tenants["beta"]

	t.Run("tenants use their cluster with kubectl", func(t *testing.T) {
		for _, tn := range tenants {
			tn.Kubectl(t, ctx, "get", "nodes")
			tn.Kubectl(t, ctx, "create", "namespace", "app")
			tn.Kubectl(t, ctx, "-n", "app", "create", "configmap", "settings", "--from-literal=owner="+tn.Name)
			tn.Kubectl(t, ctx, "-n", "app", "create", "deployment", "web", "--image=nest.local/testapp:dev", "--replicas=2")
			if got := tn.Kubectl(t, ctx, "-n", "app", "get", "configmap", "settings", "-o", "jsonpath={.data.owner}"); got != tn.Name {
				t.Errorf("%s reads owner %q from its ConfigMap", tn.Name, got)
			}
		}
	})

	t.Run("each tenant's API server and virtual node run the Kubernetes version it was made with", func(t *testing.T) {
		for _, tn := range tenants {
			cs := tn.Clientset(t)
			info, err := cs.Discovery().ServerVersion()
			if err != nil {
				t.Fatal(err)
			}
			if info.GitVersion != wantVersion[tn.Name] {
				t.Errorf("%s's API server is %s, want %s", tn.Name, info.GitVersion, wantVersion[tn.Name])
			}
			nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(nodes.Items) == 0 {
				t.Fatalf("%s has no node", tn.Name)
			}
			for _, n := range nodes.Items {
				if n.Status.NodeInfo.KubeletVersion != wantVersion[tn.Name] {
					t.Errorf("%s's node %s reports kubelet %s, want %s", tn.Name, n.Name, n.Status.NodeInfo.KubeletVersion, wantVersion[tn.Name])
				}
			}
		}
	})

	t.Run("a tenant of the host's default type has a kubeconfig naming its address from the host's pool, and a NodePort tenant's a host node", func(t *testing.T) {
		first, last := cluster.LoadBalancerRange()
		serviceType := map[string]string{"alpha": "NodePort", "beta": "LoadBalancer (the host's default)"}
		for _, tn := range tenants {
			u, err := url.Parse(tn.Config.Host)
			if err != nil {
				t.Fatal(err)
			}
			ip, err := netip.ParseAddr(u.Hostname())
			if err != nil {
				t.Fatalf("%s's kubeconfig names %s, not an address: %v", tn.Name, tn.Config.Host, err)
			}
			inPool := !ip.Less(first) && !last.Less(ip)
			if want := tn.Name == "beta"; inPool != want || !cluster.NodeSubnet.Contains(ip) {
				t.Errorf("%s (%s) is reached at %s: in the pool %s-%s %v, want %v", tn.Name, serviceType[tn.Name], tn.Config.Host, first, last, inPool, want)
			}
		}
		// Through the address: the kubectl calls above went there too.
		beta.Kubectl(t, ctx, "get", "--raw", "/readyz")
	})

	t.Run("a tenant's credentials are rejected elsewhere", func(t *testing.T) {
		hostCfg, err := clientcmd.BuildConfigFromFlags("", hostKubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		for target, server := range map[string]*rest.Config{"tenant beta": beta.Config, "the host": hostCfg} {
			cfg := rest.CopyConfig(alpha.Config)
			cfg.Host, cfg.CAData = server.Host, server.CAData
			cs := kubernetes.NewForConfigOrDie(cfg)
			_, err := cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
			if !apierrors.IsUnauthorized(err) {
				t.Errorf("alpha's credentials against %s: %v, want 401 Unauthorized", target, err)
			}
		}
	})

	t.Run("deleted host objects are recreated and tenant data survives", func(t *testing.T) {
		n := controlplane.Names{VirtualCluster: "alpha", Namespace: alpha.Namespace}
		for _, obj := range []client.Object{
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: n.PKISecret(), Namespace: n.Namespace}},
			&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: n.Service(), Namespace: n.Namespace}},
			&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: n.StatefulSet(), Namespace: n.Namespace}},
		} {
			if err := host.Delete(ctx, obj); err != nil {
				t.Fatalf("delete %T: %v", obj, err)
			}
			waitRecreated(t, ctx, host, obj)
			framework.WaitReady(t, ctx, host, alpha)
			testutil.Eventually(t, 2*time.Minute, fmt.Sprintf("alpha's data after deleting its %T", obj), func() error {
				// Ready may still be the condition from before the deletion,
				// and a recreated PKI brings a new kubeconfig only once the
				// operator has run: fetch it on every try.
				alpha.Load(t, nest)
				got, err := alpha.KubectlErr(ctx, "-n", "app", "get", "configmap", "settings", "-o", "jsonpath={.data.owner}")
				if err != nil {
					return err
				}
				if got != "alpha" {
					return fmt.Errorf("owner = %q", got)
				}
				return nil
			})
		}
	})

	t.Run("killing the control-plane pod loses no tenant object", func(t *testing.T) {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "beta-0", Namespace: beta.Namespace}}
		if err := host.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			t.Fatal(err)
		}
		oldUID := pod.UID
		if err := host.Delete(ctx, pod, client.GracePeriodSeconds(0)); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, 3*time.Minute, "beta answers from a new pod", func() error {
			if err := host.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
				return err
			}
			if pod.UID == oldUID {
				return errors.New("old pod still there")
			}
			got, err := beta.KubectlErr(ctx, "-n", "app", "get", "configmap", "settings", "-o", "jsonpath={.data.owner}")
			if err != nil {
				return err
			}
			if got != "beta" {
				return fmt.Errorf("owner = %q", got)
			}
			return nil
		})
		// The restarted etcd may still be settling: read until it answers.
		testutil.Eventually(t, time.Minute, "deployment kept after the restart", func() error {
			got, err := beta.KubectlErr(ctx, "-n", "app", "get", "deployment", "web", "-o", "jsonpath={.spec.replicas}")
			if err == nil && got != "2" {
				return fmt.Errorf("deployment replicas after restart = %q", got)
			}
			return err
		})
	})

	t.Run("an operator restart during creation still converges to Ready", func(t *testing.T) {
		gamma := &framework.Tenant{Name: "gamma", Dir: dir}
		if out, err := nest("create", "gamma"); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		var pods corev1.PodList
		if err := host.List(ctx, &pods, client.InNamespace("nest-system"), client.MatchingLabels{"app.kubernetes.io/name": "nest-manager"}); err != nil {
			t.Fatal(err)
		}
		for i := range pods.Items {
			if err := host.Delete(ctx, &pods.Items[i], client.GracePeriodSeconds(0)); err != nil {
				t.Fatal(err)
			}
		}
		gamma.Namespace = "vc-gamma"
		framework.WaitReady(t, ctx, host, gamma)
	})

	t.Run("deleting one virtual cluster removes its host objects and leaves the other working", func(t *testing.T) {
		if out, err := nest("delete", "beta", "--wait", "--timeout", "3m"); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		n := controlplane.Names{VirtualCluster: "beta", Namespace: beta.Namespace}
		for _, obj := range []client.Object{
			&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: n.StatefulSet(), Namespace: n.Namespace}},
			&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: n.Service(), Namespace: n.Namespace}},
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: n.PKISecret(), Namespace: n.Namespace}},
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: n.KubeconfigSecret(), Namespace: n.Namespace}},
			&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: n.EtcdClaim(), Namespace: n.Namespace}},
		} {
			if err := host.Get(ctx, client.ObjectKeyFromObject(obj), obj); !apierrors.IsNotFound(err) {
				t.Errorf("%T %s remains (err %v)", obj, obj.GetName(), err)
			}
		}
		testutil.Eventually(t, time.Minute, "beta's etcd volume released", func() error {
			var pvs corev1.PersistentVolumeList
			if err := host.List(ctx, &pvs); err != nil {
				return err
			}
			for _, pv := range pvs.Items {
				if ref := pv.Spec.ClaimRef; ref != nil && ref.Namespace == beta.Namespace {
					return fmt.Errorf("volume %s of %s/%s remains", pv.Name, ref.Namespace, ref.Name)
				}
			}
			return nil
		})
		if got := alpha.Kubectl(t, ctx, "-n", "app", "get", "configmap", "settings", "-o", "jsonpath={.data.owner}"); got != "alpha" {
			t.Errorf("alpha after beta's deletion: owner %q", got)
		}
	})

	t.Run("invalid specs are rejected by the host API server", func(t *testing.T) {
		for _, tc := range []struct{ yaml, want string }{
			{"spec: {kubernetesVersion: v1.20.0}", "spec.kubernetesVersion"},
			{"spec: {controlPlane: {service: {type: Ingress}}}", "spec.controlPlane.service.type"},
			{"spec: {externalIPs: [not-an-ip]}", "each externalIPs entry must be an IPv4 or IPv6 address"},
		} {
			manifest := "apiVersion: nest.dev/v1alpha1\nkind: VirtualCluster\nmetadata: {name: bad, namespace: default}\n" + tc.yaml + "\n"
			path := filepath.Join(t.TempDir(), "bad.yaml")
			if err := os.WriteFile(path, []byte(manifest), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := framework.Kubectl(ctx, hostKubeconfig, "apply", "-f", path)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: error %v, want one naming %q", tc.yaml, err, tc.want)
			}
		}
	})
}

func waitRecreated(t *testing.T, ctx context.Context, c client.Client, obj client.Object) {
	t.Helper()
	old := obj.GetUID()
	testutil.Eventually(t, time.Minute, fmt.Sprintf("%T %s recreated", obj, obj.GetName()), func() error {
		fresh := obj.DeepCopyObject().(client.Object)
		if err := c.Get(ctx, client.ObjectKeyFromObject(obj), fresh); err != nil {
			return err
		}
		if fresh.GetUID() == old {
			return errors.New("not yet")
		}
		return nil
	})
}

// checkInventory: every host node without the control-plane role has a free
// GlobalNode with its InternalIP and labels, in phase Host; the control-plane
// node has none; `nest nodes` lists them.
func checkInventory(t *testing.T, ctx context.Context, host client.Client, nest func(...string) (string, error)) {
	var nodes corev1.NodeList
	if err := host.List(ctx, &nodes); err != nil {
		t.Fatal(err)
	}
	var workers, controlPlanes int
	for _, n := range nodes.Items {
		_, isControlPlane := n.Labels[globalnode.LabelControlPlane]
		if isControlPlane {
			controlPlanes++
		} else {
			workers++
		}
		testutil.Eventually(t, time.Minute, "GlobalNode of "+n.Name, func() error {
			var gn nestv1.GlobalNode
			err := host.Get(ctx, client.ObjectKey{Name: n.Name}, &gn)
			if isControlPlane {
				if !apierrors.IsNotFound(err) {
					t.Fatalf("control-plane node %s has a GlobalNode (get: %v)", n.Name, err)
				}
				return nil
			}
			if err != nil {
				return err
			}
			if gn.Spec.NodeIP != globalnode.NodeIP(&n) || gn.Spec.State != nestv1.NodeStateFree || gn.Status.Phase != nestv1.NodePhaseHost ||
				gn.Spec.Labels[corev1.LabelHostname] != n.Labels[corev1.LabelHostname] {
				return fmt.Errorf("GlobalNode %s: nodeIP %s state %s phase %s labels %v", gn.Name, gn.Spec.NodeIP, gn.Spec.State, gn.Status.Phase, gn.Spec.Labels)
			}
			return nil
		})
	}
	if workers == 0 || controlPlanes == 0 {
		t.Fatalf("the local host cluster has %d worker and %d control-plane nodes, want both kinds", workers, controlPlanes)
	}
	out, err := nest("nodes")
	if err != nil {
		t.Fatalf("nest nodes: %v\n%s", err, out)
	}
	for _, n := range nodes.Items {
		_, isControlPlane := n.Labels[globalnode.LabelControlPlane]
		if listed := strings.Contains(out, n.Name+" "); listed == isControlPlane {
			t.Errorf("nest nodes lists %s: %v, want %v:\n%s", n.Name, listed, !isControlPlane, out)
		}
	}
}
