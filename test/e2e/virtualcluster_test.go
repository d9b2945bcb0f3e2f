package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"filippo.io/age"
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
	"github.com/nestdev/nest/internal/devcluster"
	"github.com/nestdev/nest/internal/snapshot"
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

	// Each waits on the cluster most of its time (the schedule on whole
	// minutes): together, in parallel.
	t.Run("snapshots", func(t *testing.T) {
		t.Run("a tenant deleted and restored from its sealed snapshot has its objects, CAs and pods back", func(t *testing.T) {
			t.Parallel()
			checkSnapshotRestore(t, ctx, host, nest, &framework.Tenant{Name: "delta", Dir: dir})
		})
		t.Run("a schedule of every minute with keep 2 pushes to the registry and leaves exactly the newest 2", func(t *testing.T) {
			t.Parallel()
			checkSnapshotSchedule(t, ctx, host, nest, alpha)
		})
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

// checkSnapshotRestore makes tn with ConfigMaps, a Secret, a CRD and its
// objects and a Deployment; snapshots it to a file sealed to a fresh age
// identity and checks the file (0600, an etcd revision at or past the last
// write, nothing in the clear, verified only with its identity); deletes
// tn and restores it; and checks that every object is back, the
// Deployment's pods are the same tenant pods, running, and a kubeconfig
// made before the deletion is accepted by the restored API server.
func checkSnapshotRestore(t *testing.T, ctx context.Context, host client.Client, nest framework.Nest, tn *framework.Tenant) {
	t.Helper()
	if out, err := nest("create", tn.Name, "--wait", "--timeout", "4m"); err != nil {
		t.Fatalf("create %s: %v\n%s", tn.Name, err, out)
	}
	tn.Load(t, nest)
	const value, configMaps = "snapshot-marker-6f1c2b", 200
	var objects strings.Builder
	objects.WriteString("apiVersion: v1\nkind: Namespace\nmetadata: {name: app}\n")
	for i := range configMaps {
		fmt.Fprintf(&objects, "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm-%d, namespace: app}\ndata: {i: \"%d\"}\n", i, i)
	}
	objects.WriteString(`---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: gadgets.example.dev}
spec:
  group: example.dev
  names: {kind: Gadget, plural: gadgets, singular: gadget}
  scope: Namespaced
  versions: [{name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}}]
`)
	tn.Kubectl(t, ctx, "apply", "-f", writeFile(t, tn, "objects.yaml", objects.String()))
	tn.Kubectl(t, ctx, "wait", "--for=condition=Established", "crd/gadgets.example.dev", "--timeout=1m")
	tn.Kubectl(t, ctx, "apply", "-f", writeFile(t, tn, "gadget.yaml", "apiVersion: example.dev/v1\nkind: Gadget\nmetadata: {name: g1, namespace: app}\nsize: 3\n"))
	tn.Kubectl(t, ctx, "-n", "app", "create", "secret", "generic", "marker", "--from-literal=value="+value)
	tn.Kubectl(t, ctx, "-n", "app", "create", "deployment", "web", "--image=nest.local/testapp:dev", "--replicas=2")
	tn.Kubectl(t, ctx, "apply", "-f", writeFile(t, tn, "db.yaml", statefulSetWithData(testVolumeBytes)))
	tn.Kubectl(t, ctx, "-n", "app", "rollout", "status", "deployment/web", "--timeout=3m")
	tn.Kubectl(t, ctx, "-n", "app", "rollout", "status", "statefulset/db", "--timeout=3m")
	volumeBefore := volumeListing(t, ctx, tn, testVolumeBytes)
	podsBefore := tn.Kubectl(t, ctx, "-n", "app", "get", "pods", "-l", "app=web", "-o", "jsonpath={.items[*].metadata.name}")
	rv := tn.Kubectl(t, ctx, "-n", "app", "get", "secret", "marker", "-o", "jsonpath={.metadata.resourceVersion}")
	oldKubeconfig, err := os.ReadFile(tn.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	id, other := newAgeIdentity(t, dir, "id"), newAgeIdentity(t, dir, "other")
	path := filepath.Join(dir, tn.Name+".snapshot")
	if out, err := nest("snapshot", "create", tn.Name, "--to", "file://"+path); err == nil || !strings.Contains(out, "--insecure-plaintext-keys") {
		t.Errorf("a snapshot with no recipient: %v, want refused naming --insecure-plaintext-keys\n%s", err, out)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("a refused snapshot left %s (%v)", path, err)
	}
	out, err := nest("snapshot", "create", tn.Name, "--to", "file://"+path, "--recipient", id.Recipient().String(), "--include-volumes")
	if err != nil {
		t.Fatalf("snapshot create: %v\n%s", err, out)
	}
	if !strings.Contains(out, "claim app/data-db-0") || !strings.Contains(out, "volumes/0.tar.age") {
		t.Errorf("snapshot create --include-volumes does not list claim app/data-db-0 with its data:\n%s", out)
	}
	checkNoCopyPodLeft(t, ctx, host, "vc-"+tn.Name)
	t.Logf("%s", out)
	checkSnapshotFile(t, path, tn.Name, rv, value)
	reg, err := devcluster.RegistryAddressIn(ctx, host)
	if err != nil {
		t.Fatal(err)
	}
	artifact := "oci://" + reg + "/e2e/" + tn.Name + ":before-the-deletion"
	if out, err := nest("snapshot", "create", tn.Name, "--to", artifact, "--plain-http", "--recipient", id.Recipient().String(), "--include-volumes"); err != nil {
		t.Fatalf("snapshot create to the registry: %v\n%s", err, out)
	}
	if out, err := nest("snapshot", "verify", "--from", "file://"+path, "--identity", filepath.Join(dir, "id")); err != nil || !strings.Contains(out, "keys: decrypted") {
		t.Errorf("verify with the identity: %v\n%s", err, out)
	}
	if out, err := nest("snapshot", "verify", "--from", "file://"+path, "--identity", filepath.Join(dir, "other")); err == nil || !strings.Contains(out, "do not decrypt") {
		t.Errorf("verify with another identity (%s): %v\n%s", other.Recipient(), err, out)
	}

	if out, err := nest("delete", tn.Name, "--wait", "--timeout", "3m"); err != nil {
		t.Fatalf("delete %s: %v\n%s", tn.Name, err, out)
	}
	checkBadSnapshotsRefused(t, ctx, host, nest, tn.Name, path, dir)
	start := time.Now()
	out, err = nest("restore", tn.Name, "--from", "file://"+path, "--identity", filepath.Join(dir, "id"))
	if err != nil {
		t.Fatalf("restore: %v\n%s", err, out)
	}
	t.Logf("restored in %s:\n%s", time.Since(start).Round(100*time.Millisecond), out)
	tn.Load(t, nest)

	if got := tn.Kubectl(t, ctx, "-n", "app", "get", "configmaps", "-o", "name"); strings.Count(got, "configmap/cm-") != configMaps {
		t.Errorf("after the restore: %d ConfigMaps cm-*, want %d", strings.Count(got, "configmap/cm-"), configMaps)
	}
	if got := tn.Kubectl(t, ctx, "-n", "app", "get", "secret", "marker", "-o", "jsonpath={.data.value}"); got != base64.StdEncoding.EncodeToString([]byte(value)) {
		t.Errorf("after the restore: the Secret holds %q", got)
	}
	if got := tn.Kubectl(t, ctx, "-n", "app", "get", "gadget", "g1", "-o", "jsonpath={.size}"); got != "3" {
		t.Errorf("after the restore: gadget g1 size %q, want 3", got)
	}
	tn.Kubectl(t, ctx, "-n", "app", "rollout", "status", "deployment/web", "--timeout=3m")
	testutil.Eventually(t, 2*time.Minute, "the same tenant pods, running again", func() error {
		got, err := tn.KubectlErr(ctx, "-n", "app", "get", "pods", "-l", "app=web", "--field-selector=status.phase=Running", "-o", "jsonpath={.items[*].metadata.name}")
		if err != nil {
			return err
		}
		if got != podsBefore {
			return fmt.Errorf("running pods %q, want the ones before the deletion, %q", got, podsBefore)
		}
		return nil
	})
	// Back under its own name, at its own address: the old kubeconfig as
	// it was.
	if !strings.Contains(out, "back at its address") {
		t.Errorf("the restore does not say the tenant is back at its address:\n%s", out)
	}
	checkOldCredentials(t, ctx, oldKubeconfig, tn, true)
	// The pod's script writes its data only into an empty volume: the same
	// listing and sums mean the volume was filled before the pod started.
	tn.Kubectl(t, ctx, "-n", "app", "rollout", "status", "statefulset/db", "--timeout=3m")
	if after := volumeListing(t, ctx, tn, testVolumeBytes); after != volumeBefore {
		t.Errorf("the StatefulSet's volume after the restore differs:\nbefore:\n%s\nafter:\n%s", volumeBefore, after)
	}
	checkNoCopyPodLeft(t, ctx, host, "vc-"+tn.Name)

	clone := &framework.Tenant{Name: tn.Name + "-clone", Dir: tn.Dir}
	out, err = nest("restore", tn.Name, "--from", artifact, "--plain-http", "--identity", filepath.Join(dir, "id"), "--as", clone.Name)
	if err != nil {
		t.Fatalf("restore a clone from the registry: %v\n%s", err, out)
	}
	t.Logf("clone restored from %s:\n%s", artifact, out)
	if !strings.Contains(out, "claim app/data-db-0 back with its data") {
		t.Errorf("the clone's restore does not say its claim is back with its data:\n%s", out)
	}
	clone.Load(t, nest)
	defer func() {
		if out, err := nest("delete", clone.Name, "--wait", "--timeout", "3m"); err != nil {
			t.Errorf("delete the clone: %v\n%s", err, out)
		}
	}()
	checkClone(t, ctx, tn, clone, configMaps, value)
	clone.Kubectl(t, ctx, "-n", "app", "rollout", "status", "statefulset/db", "--timeout=3m")
	if got := volumeListing(t, ctx, clone, testVolumeBytes); got != volumeBefore {
		t.Errorf("the clone's volume differs from the original's:\noriginal:\n%s\nclone:\n%s", volumeBefore, got)
	}
	checkOldCredentials(t, ctx, oldKubeconfig, clone, false)
}

// testVolumeBytes is the size of the random file of the volume
// TestVirtualClusters snapshots and restores: 8 MiB.
const testVolumeBytes = 8 << 20

// statefulSetWithData is a StatefulSet whose pod fills its empty volume
// once: blobBytes random bytes, a nested file with its own owner and a
// setuid mode, a sticky directory, a symbolic
// link, a hostile one aimed at the copy pod's own files (which the copy
// keeps as a link, never following it), and a marker that stops it
// writing again.
func statefulSetWithData(blobBytes int) string {
	return strings.ReplaceAll(`apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db, namespace: app}
spec:
  serviceName: db
  replicas: 1
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: db
        image: nest.local/busybox:1.35
        command: [sh, -c, 'if [ ! -e /data/done ]; then head -c BLOB_BYTES /dev/urandom > /data/blob && mkdir -p /data/sub /data/shared && echo nested > /data/sub/note && chown 1000:1000 /data/sub/note && chmod 4750 /data/sub/note && chmod 1777 /data/shared && ln -s blob /data/link && ln -s /proc/1/root/etc/passwd /data/escape && touch /data/done; fi; exec sleep 3600']
        readinessProbe: {exec: {command: [test, -e, /data/done]}, periodSeconds: 1}
        volumeMounts: [{name: data, mountPath: /data}]
  volumeClaimTemplates:
  - metadata: {name: data}
    spec:
      accessModes: [ReadWriteOnce]
      resources: {requests: {storage: 1Gi}}
`, "BLOB_BYTES", strconv.Itoa(blobBytes))
}

// volumeListing is every entry of pod db-0's volume, with its size, mode,
// owner and modification time (a link with its target), and the SHA-256 of
// every file; the random file must be blobBytes long.
func volumeListing(t testing.TB, ctx context.Context, tn *framework.Tenant, blobBytes int) string {
	t.Helper()
	script := `cd /data && find . | sort | while read f; do if [ -L "$f" ]; then echo "$f -> $(readlink "$f")"; else stat -c '%n %s %a %u:%g %Y' "$f"; fi; done && find . -type f | sort | xargs sha256sum`
	var out string
	// A restored tenant's pod object says Running before its new host
	// pod's container runs: exec until it answers.
	testutil.Eventually(t, 2*time.Minute, "pod db-0's volume listed", func() error {
		var err error
		out, err = tn.KubectlErr(ctx, "-n", "app", "exec", "db-0", "--", "sh", "-c", script)
		if err != nil {
			return err
		}
		if !strings.Contains(out, fmt.Sprintf("./blob %d ", blobBytes)) || !strings.Contains(out, " 4750 1000:1000 ") || !strings.Contains(out, "./shared 4096 1777 ") || !strings.Contains(out, "./link -> blob") || !strings.Contains(out, "./escape -> /proc/1/root/etc/passwd") {
			return fmt.Errorf("pod db-0's volume does not hold its data:\n%s", out)
		}
		return nil
	})
	return out
}

// checkNoCopyPodLeft: no volume copy pod is left in the namespace.
func checkNoCopyPodLeft(t *testing.T, ctx context.Context, host client.Client, namespace string) {
	t.Helper()
	testutil.Eventually(t, time.Minute, "the volume copy pods gone", func() error {
		var pods corev1.PodList
		if err := host.List(ctx, &pods, client.InNamespace(namespace), client.MatchingLabels{controlplane.LabelComponent: snapshot.CopyPodComponent}); err != nil {
			return err
		}
		if len(pods.Items) > 0 {
			return fmt.Errorf("%d copy pods left, first %s", len(pods.Items), pods.Items[0].Name)
		}
		return nil
	})
}

// checkClone: clone holds tn's objects, both answer, each at its own
// address with its own serving certificate, both from the same CA.
func checkClone(t *testing.T, ctx context.Context, tn, clone *framework.Tenant, configMaps int, value string) {
	t.Helper()
	if got := clone.Kubectl(t, ctx, "-n", "app", "get", "configmaps", "-o", "name"); strings.Count(got, "configmap/cm-") != configMaps {
		t.Errorf("the clone has %d ConfigMaps cm-*, want %d", strings.Count(got, "configmap/cm-"), configMaps)
	}
	if got := clone.Kubectl(t, ctx, "-n", "app", "get", "secret", "marker", "-o", "jsonpath={.data.value}"); got != base64.StdEncoding.EncodeToString([]byte(value)) {
		t.Errorf("the clone's Secret holds %q", got)
	}
	tn.Kubectl(t, ctx, "-n", "app", "get", "gadget", "g1")
	clone.Kubectl(t, ctx, "-n", "app", "get", "gadget", "g1")
	a, b := servingCert(t, tn), servingCert(t, clone)
	if a.server == b.server {
		t.Errorf("the clone answers at the original's address %s", a.server)
	}
	if bytes.Equal(a.cert.Raw, b.cert.Raw) || !bytes.Equal(a.ca, b.ca) {
		t.Errorf("serving certificates the same: %v; CAs the same: %v: want a certificate of its own from the same CA", bytes.Equal(a.cert.Raw, b.cert.Raw), bytes.Equal(a.ca, b.ca))
	}
}

type served struct {
	server string
	ca     []byte
	cert   *x509.Certificate
}

// servingCert is the tenant's address, the CA its kubeconfig trusts, and
// the certificate its API server serves there, verified against that CA.
func servingCert(t *testing.T, tn *framework.Tenant) served {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(tn.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cfg.Clusters {
		u, err := url.Parse(c.Server)
		if err != nil {
			t.Fatal(err)
		}
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM(c.CertificateAuthorityData)
		conn, err := tls.Dial("tcp", u.Host, &tls.Config{RootCAs: roots, ServerName: u.Hostname(), MinVersion: tls.VersionTLS12})
		if err != nil {
			t.Fatalf("%s at %s: %v", tn.Name, c.Server, err)
		}
		defer conn.Close()
		return served{server: c.Server, ca: c.CertificateAuthorityData, cert: conn.ConnectionState().PeerCertificates[0]}
	}
	t.Fatalf("%s's kubeconfig names no cluster", tn.Name)
	return served{}
}

// checkBadSnapshotsRefused: restores of name from a cut, a changed, a
// newer and (with another identity) an undecryptable copy of the snapshot
// at path are each refused with their reason, and leave the host's
// VirtualClusters, namespaces and the tenant namespace's Secrets as they
// were.
func checkBadSnapshotsRefused(t *testing.T, ctx context.Context, host client.Client, nest framework.Nest, name, path, dir string) {
	t.Helper()
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cut := good[:len(good)/2]
	changed := bytes.Clone(good)
	changed[len(changed)/2] ^= 0x40
	newer := withManifest(t, good, func(m *snapshot.Manifest) { m.Format = snapshot.Format + 1 })
	before := hostState(t, ctx, host, "vc-"+name)
	for _, tc := range []struct {
		what     string
		data     []byte
		identity string
		want     string
	}{
		{"cut short", cut, "id", "cut short"},
		{"changed", changed, "id", "changed"},
		{"of a newer format", newer, "id", "use a Nest at least as new"},
		{"opened with another identity", good, "other", "do not decrypt"},
	} {
		bad := filepath.Join(dir, "bad.snapshot")
		if err := os.WriteFile(bad, tc.data, 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := nest("restore", name, "--from", "file://"+bad, "--identity", filepath.Join(dir, tc.identity))
		if err == nil || !strings.Contains(out, tc.want) {
			t.Errorf("restore from a snapshot %s: %v, want refused naming %q\n%s", tc.what, err, tc.want, out)
		}
		if after := hostState(t, ctx, host, "vc-"+name); after != before {
			t.Errorf("a restore from a snapshot %s changed the host:\nbefore %s\nafter  %s", tc.what, before, after)
		}
	}
}

// withManifest is the snapshot archive with its manifest (the first entry)
// changed by change and its other entries as they are.
func withManifest(t *testing.T, archive []byte, change func(*snapshot.Manifest)) []byte {
	t.Helper()
	tr := tar.NewReader(bytes.NewReader(archive))
	var out bytes.Buffer
	tw := tar.NewWriter(&out)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if h.Name == snapshot.ManifestEntry {
			var m snapshot.Manifest
			if err := json.Unmarshal(body, &m); err != nil {
				t.Fatal(err)
			}
			change(&m)
			if body, err = json.Marshal(m); err != nil {
				t.Fatal(err)
			}
			h.Size = int64(len(body))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// hostState names the host's VirtualClusters and namespaces, and the
// Secrets of namespace: what a refused restore must not change.
func hostState(t *testing.T, ctx context.Context, host client.Client, namespace string) string {
	t.Helper()
	var vcs nestv1.VirtualClusterList
	var namespaces corev1.NamespaceList
	var secrets corev1.SecretList
	if err := host.List(ctx, &vcs); err != nil {
		t.Fatal(err)
	}
	if err := host.List(ctx, &namespaces); err != nil {
		t.Fatal(err)
	}
	if err := host.List(ctx, &secrets, client.InNamespace(namespace)); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, v := range vcs.Items {
		names = append(names, "vc:"+v.Namespace+"/"+v.Name)
	}
	for _, n := range namespaces.Items {
		// A namespace still terminating from the deletion may go meanwhile.
		if n.Status.Phase != corev1.NamespaceTerminating {
			names = append(names, "ns:"+n.Name)
		}
	}
	for _, s := range secrets.Items {
		if s.DeletionTimestamp == nil {
			names = append(names, "secret:"+s.Name)
		}
	}
	slices.Sort(names)
	return strings.Join(names, " ")
}

// checkOldCredentials: the client certificate and CA of a kubeconfig made
// before the deletion are accepted by the restored tenant: the kubeconfig
// as it was when sameAddress, else pointed at the tenant's address now.
func checkOldCredentials(t *testing.T, ctx context.Context, oldKubeconfig []byte, tn *framework.Tenant, sameAddress bool) {
	t.Helper()
	old, err := clientcmd.Load(oldKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	now, err := clientcmd.LoadFromFile(tn.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for name, cluster := range old.Clusters {
		for _, c := range now.Clusters {
			switch {
			case sameAddress && cluster.Server != c.Server:
				t.Errorf("the tenant's address moved from %s to %s: want it back at its own", cluster.Server, c.Server)
			case !sameAddress:
				old.Clusters[name].Server = c.Server
			}
		}
	}
	cfg, err := clientcmd.NewDefaultClientConfig(*old, nil).ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Namespaces().Get(ctx, "app", metav1.GetOptions{}); err != nil {
		t.Errorf("the kubeconfig made before the deletion: %v", err)
	}
}

// checkSnapshotFile: the snapshot at path is 0600, of the VirtualCluster
// name, sealed, at an etcd revision at or past rv, with neither secret (a
// tenant Secret's value) nor a private key in the clear.
func checkSnapshotFile(t *testing.T, path, name, rv, secret string) {
	t.Helper()
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o600 {
		t.Errorf("the snapshot file is %v, want 0600", info.Mode().Perm())
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s, err := snapshot.Read(f, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := strconv.ParseInt(rv, 10, 64); s.Manifest.EtcdRevision < want {
		t.Errorf("the snapshot's etcd revision %d is before the Secret's %d", s.Manifest.EtcdRevision, want)
	}
	if s.Manifest.VirtualCluster != name || s.Manifest.KubernetesVersion == "" || !s.Encrypted {
		t.Errorf("manifest %+v, encrypted %t", s.Manifest, s.Encrypted)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(raw, []byte(secret)) || bytes.Contains(raw, []byte("PRIVATE KEY")) {
		t.Error("the snapshot holds the tenant's Secret or a private key in the clear")
	}
}

// newAgeIdentity makes an age identity and writes it to dir/name.
func newAgeIdentity(t testing.TB, dir, name string) *age.X25519Identity {
	t.Helper()
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), []byte(id.String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return id
}
