package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/controlplane"
	"github.com/nestdev/nest/internal/images"
	"github.com/nestdev/nest/internal/syncer/contract"
	"github.com/nestdev/nest/internal/testutil"
	"github.com/nestdev/nest/test/e2e/framework"
)

const testImage = "nest.local/testapp:dev"

// TestVirtualNode checks shared mode (issue 4) end to end: tenant pods run on
// host capacity through the virtual node, with Services, DNS, ConfigMaps,
// Secrets, tokens, status, the kubelet API, Pod Security, the host quota, a
// syncer restart and isolation between two tenants.
func TestVirtualNode(t *testing.T) {
	framework.RequireRoot(t)
	t.Parallel()
	cluster := framework.LeaseCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	host, _, nest := framework.StartNest(t, ctx, cluster)
	dir := t.TempDir()
	alpha := &framework.Tenant{Name: "alpha", Dir: dir}
	beta := &framework.Tenant{Name: "beta", Dir: dir}
	// alpha: a small share with a GPU to pass through, and tokens refreshed
	// every 15 seconds; beta: the restricted Pod Security level.
	if out, err := nest("create", "beta", "--cpu", "1", "--memory", "2Gi", "--pods", "10", "--pod-security", "restricted"); err != nil {
		t.Fatalf("create beta: %v\n%s", err, out)
	}
	createAlpha(t, ctx, host)
	framework.WaitReady(t, ctx, host, &framework.Tenant{Name: "alpha", Namespace: "vc-alpha"})
	framework.WaitReady(t, ctx, host, &framework.Tenant{Name: "beta", Namespace: "vc-beta"})
	for _, tn := range []*framework.Tenant{alpha, beta} {
		tn.Load(t, nest)
		tn.WaitDefaultServiceAccount(t, ctx)
	}
	hostPods := func(tn *framework.Tenant) []corev1.Pod { return tn.HostPods(t, ctx, host) }

	t.Run("the virtual node shows the tenant's share and the host quota enforces it", func(t *testing.T) {
		node := tenantNode(t, ctx, alpha)
		for name, want := range map[corev1.ResourceName]string{"cpu": "2", "memory": "4Gi", "pods": "20", "nvidia.com/gpu": "2"} {
			if got := node.Status.Allocatable[name]; got.String() != want {
				t.Errorf("allocatable %s = %s, want %s", name, got.String(), want)
			}
		}
		renewed := func() string {
			return alpha.Kubectl(t, ctx, "-n", "kube-node-lease", "get", "lease", controlplane.VirtualNodeName, "-o", "jsonpath={.spec.renewTime}")
		}
		first := renewed()
		testutil.Eventually(t, time.Minute, "the virtual node's lease is renewed", func() error {
			if renewed() == first {
				return errors.New("renewTime unchanged")
			}
			return nil
		})
		quota := &corev1.ResourceQuota{}
		if err := host.Get(ctx, client.ObjectKey{Namespace: "vc-alpha", Name: "alpha-tenant-share"}, quota); err != nil {
			t.Fatal(err)
		}
		if got := quota.Spec.Hard["requests.nvidia.com/gpu"]; got.String() != "2" {
			t.Errorf("host quota %v lacks the GPU share", quota.Spec.Hard)
		}
		// A pod in the tenant priority class beyond the share is refused by the
		// host itself, whatever the tenant does.
		// Two containers each within the LimitRange's per-container maximum,
		// together over the share.
		big := testPod("too-big", "vc-alpha")
		big.Spec.PriorityClassName = controlplane.TenantPriorityClass
		half := corev1.ResourceList{"cpu": resource.MustParse("1500m"), "memory": resource.MustParse("1Mi")}
		big.Spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: half, Limits: half}
		second := *big.Spec.Containers[0].DeepCopy()
		second.Name = "second"
		big.Spec.Containers = append(big.Spec.Containers, second)
		if err := host.Create(ctx, big); err == nil || !strings.Contains(err.Error(), "exceeded quota") {
			t.Errorf("host accepted a tenant-class pod beyond the share: %v", err)
		}
	})

	t.Run("a deployment runs on host capacity and its Service resolves by DNS name", func(t *testing.T) {
		alpha.Kubectl(t, ctx, "create", "deployment", "web", "--image="+testImage, "--replicas=3")
		alpha.Kubectl(t, ctx, "expose", "deployment", "web", "--port=80", "--target-port=8080")
		alpha.Kubectl(t, ctx, "run", "client", "--image="+testImage)
		waitTenantPods(t, ctx, alpha, "app=web", 3)
		waitTenantPods(t, ctx, alpha, "run=client", 1)
		web := tenantPodNames(t, ctx, alpha, "app=web")
		for _, p := range hostPods(alpha) {
			if len(p.Name) > 63 || p.Labels[contract.LabelTenantNamespace] != "default" || p.Annotations[contract.AnnotationTenantName] == "" {
				t.Errorf("host pod %s: name length %d, labels %v", p.Name, len(p.Name), p.Labels)
			}
			if ptr.Deref(p.Spec.AutomountServiceAccountToken, true) || p.Spec.PriorityClassName != controlplane.TenantPriorityClass {
				t.Errorf("host pod %s mounts a host token or lacks the tenant priority class", p.Name)
			}
		}
		// The tenant's endpoints list the host pod IPs that flowed up.
		testutil.Eventually(t, time.Minute, "tenant endpoints of web", func() error {
			var ips []string
			for _, name := range web {
				ips = append(ips, tenantPod(t, ctx, alpha, name).Status.PodIP)
			}
			slices.Sort(ips)
			out, err := alpha.KubectlErr(ctx, "get", "endpointslices", "-l", "kubernetes.io/service-name=web", "-o", "jsonpath={.items[*].endpoints[*].addresses[0]}")
			got := strings.Fields(out)
			slices.Sort(got)
			if err != nil || !slices.Equal(got, ips) {
				return fmt.Errorf("endpoints %v (%v), pod IPs %v", got, err, ips)
			}
			return nil
		})
		for _, name := range []string{"web.default.svc.cluster.local", "web"} {
			clientReaches(t, ctx, alpha, "http://"+name+"/hostname", web)
		}
	})

	t.Run("a headless Service resolves to its pods, and a StatefulSet pod by its own name", func(t *testing.T) {
		alpha.Kubectl(t, ctx, "apply", "-f", writeManifest(t, dir, "db.yaml", headlessStatefulSet))
		waitTenantPods(t, ctx, alpha, "app=db", 2)
		for name, want := range map[string][]string{
			"db-0.db.default.svc.cluster.local": {"db-0"},
			"db-1.db":                           {"db-1"},
			"db.default.svc.cluster.local":      {"db-0", "db-1"},
		} {
			clientReaches(t, ctx, alpha, "http://"+name+":8080/hostname", want)
		}
		// Scaled down, the gone pod's name stops resolving: NXDOMAIN ("no
		// such host"), not SERVFAIL, which would end a resolver's search walk.
		alpha.Kubectl(t, ctx, "scale", "statefulset", "db", "--replicas=1")
		testutil.Eventually(t, time.Minute, "db-1 no longer resolves", func() error {
			out, err := alpha.KubectlErr(ctx, "exec", "client", "--", "/testapp", "get", "http://db-1.db.default.svc.cluster.local.:8080/hostname")
			if err == nil || !strings.Contains(err.Error(), "lookup db-1.db.default.svc.cluster.local.") || !strings.Contains(err.Error(), "no such host") {
				return fmt.Errorf("db-1: answer %q, error %v", out, err)
			}
			return nil
		})
		alpha.Kubectl(t, ctx, "delete", "-f", filepath.Join(dir, "db.yaml"), "--wait=false")
	})

	t.Run("status and events flow up to the tenant pod", func(t *testing.T) {
		pod := tenantPod(t, ctx, alpha, "client")
		if pod.Status.PodIP == "" || pod.Status.HostIP == "" || len(pod.Status.ContainerStatuses) != 1 || !pod.Status.ContainerStatuses[0].Ready {
			t.Errorf("status %+v", pod.Status)
		}
		testutil.Eventually(t, time.Minute, "host kubelet events on the tenant pod", func() error {
			out, err := alpha.KubectlErr(ctx, "get", "events", "--field-selector", "involvedObject.name=client", "-o", "jsonpath={.items[*].reason}")
			if err != nil || !strings.Contains(out, "Started") {
				return fmt.Errorf("events %q: %v", out, err)
			}
			return nil
		})
	})

	t.Run("kubectl logs -f, exec and port-forward reach tenant pods", func(t *testing.T) {
		follow := startKubectl(t, ctx, alpha, "logs", "-f", "client")
		alpha.Kubectl(t, ctx, "exec", "client", "--", "/testapp", "get", "http://localhost:8080/echo?msg=followed")
		follow.waitFor(t, "path=/echo")
		if out := alpha.Kubectl(t, ctx, "exec", "client", "--", "/testapp", "get", "http://localhost:8080/hostname"); out != "client" {
			t.Errorf("exec hostname = %q", out)
		}
		pf := startKubectl(t, ctx, alpha, "port-forward", "pod/client", ":8080")
		port := pf.waitFor(t, `Forwarding from 127\.0\.0\.1:(\d+)`)
		body, err := httpGet(ctx, "http://127.0.0.1:"+port+"/echo?msg=forwarded")
		if err != nil || body != "forwarded" {
			t.Errorf("port-forward answered %q, %v", body, err)
		}
	})

	t.Run("ConfigMaps and Secrets reach pods and follow updates", func(t *testing.T) {
		alpha.Kubectl(t, ctx, "create", "configmap", "settings", "--from-literal=color=blue")
		alpha.Kubectl(t, ctx, "create", "secret", "generic", "creds", "--from-literal=password=one")
		alpha.Kubectl(t, ctx, "apply", "-f", writeManifest(t, dir, "configured.yaml", configuredPod))
		waitTenantPods(t, ctx, alpha, "app=configured", 1)
		if out := alpha.Kubectl(t, ctx, "exec", "configured", "--", "/testapp", "cat", "/etc/settings/color"); out != "blue" {
			t.Errorf("mounted ConfigMap = %q", out)
		}
		if out := alpha.Kubectl(t, ctx, "exec", "configured", "--", "/testapp", "cat", "/etc/creds/password"); out != "one" {
			t.Errorf("mounted Secret = %q", out)
		}
		alpha.Kubectl(t, ctx, "patch", "configmap", "settings", "-p", `{"data":{"color":"green"}}`)
		alpha.Kubectl(t, ctx, "patch", "secret", "creds", "-p", `{"stringData":{"password":"two"}}`)
		for file, want := range map[string]string{"/etc/settings/color": "green", "/etc/creds/password": "two"} {
			testutil.Eventually(t, 2*time.Minute, file+" updated in the running pod", func() error {
				out, err := alpha.KubectlErr(ctx, "exec", "configured", "--", "/testapp", "cat", file)
				if err != nil || out != want {
					return fmt.Errorf("%s = %q (%v), want %q", file, out, err, want)
				}
				return nil
			})
		}
		if pod := tenantPod(t, ctx, alpha, "configured"); pod.Status.ContainerStatuses[0].RestartCount != 0 {
			t.Errorf("the pod restarted %d times", pod.Status.ContainerStatuses[0].RestartCount)
		}
	})

	t.Run("service-account tokens come from the tenant and are refreshed in place", func(t *testing.T) {
		// The pod's service account may read pods, as a tenant would allow it.
		alpha.Kubectl(t, ctx, "create", "rolebinding", "default-view", "--clusterrole=view", "--serviceaccount=default:default")
		kubeAPI := func() error {
			out, err := alpha.KubectlErr(ctx, "exec", "client", "--", "/testapp", "kube", "/api/v1/namespaces/default/pods")
			if err != nil || !strings.Contains(out, `"kind":"PodList"`) {
				return fmt.Errorf("in-cluster call to the tenant API: %q, %v", out, err)
			}
			return nil
		}
		testutil.Eventually(t, 30*time.Second, "in-cluster client reads pods", kubeAPI)
		first := alpha.Kubectl(t, ctx, "exec", "client", "--", "/testapp", "cat", "/var/run/secrets/kubernetes.io/serviceaccount/token")
		testutil.Eventually(t, 2*time.Minute, "a refreshed token in the running pod", func() error {
			now, err := alpha.KubectlErr(ctx, "exec", "client", "--", "/testapp", "cat", "/var/run/secrets/kubernetes.io/serviceaccount/token")
			if err != nil || now == first {
				return fmt.Errorf("token unchanged (%v)", err)
			}
			return nil
		})
		if err := kubeAPI(); err != nil {
			t.Errorf("after the refresh: %v", err)
		}
		if pod := tenantPod(t, ctx, alpha, "client"); pod.Status.ContainerStatuses[0].RestartCount != 0 {
			t.Errorf("the refresh restarted the pod %d times", pod.Status.ContainerStatuses[0].RestartCount)
		}
	})

	t.Run("Pod Security refuses every forbidden field before it reaches the host", func(t *testing.T) {
		// hostNetwork and host ports are not among them: they are given
		// their meaning without host access (test/e2e/isolation).
		forbidden := map[string]string{
			"privileged":   `"containers":[{"name":"c","image":"` + testImage + `","securityContext":{"privileged":true}}]`,
			"host-pid":     `"hostPID":true,"containers":[{"name":"c","image":"` + testImage + `"}]`,
			"host-ipc":     `"hostIPC":true,"containers":[{"name":"c","image":"` + testImage + `"}]`,
			"capabilities": `"containers":[{"name":"c","image":"` + testImage + `","securityContext":{"capabilities":{"add":["SYS_ADMIN"]}}}]`,
		}
		for name, spec := range forbidden {
			alpha.Kubectl(t, ctx, "run", "bad-"+name, "--image="+testImage, "--restart=Never", "--overrides", `{"spec":{`+spec+`}}`)
		}
		for name := range forbidden {
			waitRefused(t, ctx, alpha, "bad-"+name)
		}
		for _, p := range hostPods(alpha) {
			if strings.HasPrefix(p.Annotations[contract.AnnotationTenantName], "bad-") {
				t.Errorf("refused pod reached the host as %s", p.Name)
			}
		}
		// beta is restricted: a pod that may run as root is refused there,
		// and so is a hostPath volume, even on the virtual node's disk.
		beta.Kubectl(t, ctx, "run", "root-ok-elsewhere", "--image="+testImage, "--restart=Never")
		beta.Kubectl(t, ctx, "run", "bad-host-path", "--image="+testImage, "--restart=Never", "--overrides",
			`{"spec":{"volumes":[{"name":"root","hostPath":{"path":"/"}}],"containers":[{"name":"c","image":"`+testImage+`","volumeMounts":[{"name":"root","mountPath":"/host"}]}]}}`)
		waitRefused(t, ctx, beta, "root-ok-elsewhere")
		waitRefused(t, ctx, beta, "bad-host-path")
	})

	t.Run("hostPath volumes are the virtual node's disk: shared by its pods and kept after them, never the host's", func(t *testing.T) {
		// alpha's virtual node has a disk (spec.virtualNode.nodeDisk).
		volumes := `"volumes":[{"name":"state","hostPath":{"path":"/var/lib/e2e","type":"DirectoryOrCreate"}},` +
			`{"name":"hosts","hostPath":{"path":"/etc/hosts","type":"FileOrCreate"}}]`
		busyboxImage := images.Busybox
		run := func(name, script string) {
			alpha.Kubectl(t, ctx, "run", name, "--image="+busyboxImage, "--restart=Never", "--overrides",
				`{"spec":{`+volumes+`,"containers":[{"name":"c","image":"`+busyboxImage+`","command":["sh","-c",`+strconv.Quote(script)+`],`+
					`"volumeMounts":[{"name":"state","mountPath":"/data"},{"name":"hosts","mountPath":"/node-hosts"}]}]}}`)
			waitPodSucceeded(t, ctx, alpha, name)
		}
		run("disk-writer", "echo written-by-disk-writer > /data/marker")
		run("disk-reader", "cat /data/marker /node-hosts")
		logs := alpha.Kubectl(t, ctx, "logs", "disk-reader")
		if !strings.Contains(logs, "written-by-disk-writer\n") || !strings.Contains(logs, "127.0.1.1\t"+controlplane.VirtualNodeName+"\n") {
			t.Errorf("disk-reader printed %q: want the writer's marker and the virtual node's /etc/hosts", logs)
		}
		claim := contract.NodeDiskClaim("alpha", controlplane.VirtualNodeName)
		pvc := &corev1.PersistentVolumeClaim{}
		if err := host.Get(ctx, client.ObjectKey{Namespace: "vc-alpha", Name: claim}, pvc); err != nil {
			t.Fatalf("the virtual node's disk: %v", err)
		}
		if pvc.Labels[contract.LabelTenantOf] != "alpha" || pvc.Status.Phase != corev1.ClaimBound {
			t.Errorf("claim %s labels %v phase %s", claim, pvc.Labels, pvc.Status.Phase)
		}
		for _, name := range []string{"disk-writer", "disk-reader"} {
			hp := hostPodOf(t, hostPods(alpha), name)
			for _, v := range hp.Spec.Volumes {
				if v.HostPath != nil {
					t.Errorf("host pod of %s has hostPath volume %s", name, v.Name)
				}
			}
			if !slices.ContainsFunc(hp.Spec.Volumes, func(v corev1.Volume) bool {
				return v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == claim
			}) {
				t.Errorf("host pod of %s does not mount the disk %s", name, claim)
			}
		}
	})

	t.Run("a hostPath path of the wrong type on the disk is a FailedMount event of a tenant pod that stays Pending, and the helper stays unseen", func(t *testing.T) {
		// restartPolicy Never: the pod waits for its volume all the same,
		// as it does while the kubelet retries a mount.
		alpha.Kubectl(t, ctx, "run", "disk-wrong-type", "--restart=Never", "--image="+testImage, "--overrides",
			`{"spec":{"volumes":[{"name":"conf","hostPath":{"path":"/missing/app.conf","type":"File"}}],`+
				`"containers":[{"name":"c","image":"`+testImage+`","volumeMounts":[{"name":"conf","mountPath":"/conf"}]}]}}`)
		// Waits until the pod, and so its host pod, is gone: later subtests
		// count the host pods.
		t.Cleanup(func() {
			if out, err := alpha.KubectlErr(ctx, "delete", "pod", "disk-wrong-type", "--timeout=2m"); err != nil {
				t.Errorf("delete disk-wrong-type: %v: %s", err, out)
			}
		})
		want := `MountVolume.SetUp failed on the virtual node: hostPath type check failed: /missing/app.conf is not a file`
		testutil.Eventually(t, 2*time.Minute, "a FailedMount event on disk-wrong-type", func() error {
			out, err := alpha.KubectlErr(ctx, "get", "events", "--field-selector", "involvedObject.name=disk-wrong-type,reason=FailedMount", "-o", "jsonpath={.items[*].message}")
			if err != nil || !strings.Contains(out, want) {
				return fmt.Errorf("FailedMount events %q: %v", out, err)
			}
			return nil
		})
		testutil.Eventually(t, 2*time.Minute, "the helper of disk-wrong-type run again", func() error {
			p, ok := framework.HostPodOf(hostPods(alpha), "default", "disk-wrong-type")
			if !ok {
				return fmt.Errorf("no host pod")
			}
			for _, s := range p.Status.InitContainerStatuses {
				if s.Name == "nest-node-disk" && s.RestartCount > 0 {
					return nil
				}
			}
			return fmt.Errorf("host pod %s, init containers %v", p.Status.Phase, p.Status.InitContainerStatuses)
		})
		out := alpha.Kubectl(t, ctx, "get", "events", "--field-selector", "involvedObject.name=disk-wrong-type", "-o", "jsonpath={.items[*].message}")
		if strings.Contains(out, "nest-node-disk") {
			t.Errorf("an event of the tenant pod names the helper: %q", out)
		}
		pod := tenantPod(t, ctx, alpha, "disk-wrong-type")
		if pod.Status.Phase != corev1.PodPending || len(pod.Status.InitContainerStatuses) != 0 {
			t.Errorf("phase %s, init containers %v: want Pending with none of the helper's", pod.Status.Phase, pod.Status.InitContainerStatuses)
		}
		for _, c := range pod.Status.Conditions {
			if strings.Contains(c.Message, "nest-node-disk") {
				t.Errorf("condition %s names the helper: %q", c.Type, c.Message)
			}
		}
	})

	t.Run("pods beyond the virtual node's capacity stay Pending and never reach the host", func(t *testing.T) {
		alpha.Kubectl(t, ctx, "run", "greedy", "--image="+testImage, "--overrides", `{"spec":{"containers":[{"name":"greedy","image":"`+testImage+`","resources":{"requests":{"cpu":"3"}}}]}}`)
		testutil.Eventually(t, time.Minute, "greedy unschedulable", func() error {
			pod := tenantPod(t, ctx, alpha, "greedy")
			for _, c := range pod.Status.Conditions {
				if c.Type == corev1.PodScheduled && c.Reason == corev1.PodReasonUnschedulable {
					return nil
				}
			}
			return fmt.Errorf("phase %s, conditions %v", pod.Status.Phase, pod.Status.Conditions)
		})
		for _, p := range hostPods(alpha) {
			if p.Annotations[contract.AnnotationTenantName] == "greedy" {
				t.Error("an unschedulable tenant pod reached the host")
			}
		}
	})

	t.Run("a host pod deleted from outside is replaced by the tenant's ReplicaSet", func(t *testing.T) {
		before := tenantPodNames(t, ctx, alpha, "app=web")
		victim := hostPodOf(t, hostPods(alpha), before[0])
		if err := host.Delete(ctx, &victim); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, 2*time.Minute, "a replacement web pod", func() error {
			now := tenantPodNames(t, ctx, alpha, "app=web")
			if slices.Contains(now, before[0]) || len(now) != 3 {
				return fmt.Errorf("web pods %v", now)
			}
			return nil
		})
		waitTenantPods(t, ctx, alpha, "app=web", 3)
	})

	t.Run("deleting a tenant pod deletes its host pod, gracefully or at once", func(t *testing.T) {
		alpha.Kubectl(t, ctx, "delete", "pod", "configured", "--wait=true", "--timeout=60s")
		for _, p := range hostPods(alpha) {
			if p.Annotations[contract.AnnotationTenantName] == "configured" {
				t.Errorf("host pod %s outlived its tenant pod", p.Name)
			}
		}
		// A forced deletion removes the tenant pod from the API at once; the
		// syncer must still find and delete the host pod.
		alpha.Kubectl(t, ctx, "run", "doomed", "--image="+testImage)
		waitTenantPods(t, ctx, alpha, "run=doomed", 1)
		alpha.Kubectl(t, ctx, "delete", "pod", "doomed", "--force", "--grace-period=0")
		testutil.Eventually(t, time.Minute, "host pod of a force-deleted pod gone", func() error {
			for _, p := range hostPods(alpha) {
				if p.Annotations[contract.AnnotationTenantName] == "doomed" {
					return fmt.Errorf("host pod %s still there", p.Name)
				}
			}
			return nil
		})
	})

	t.Run("a control-plane restart adopts running host pods without recreating them", func(t *testing.T) {
		// Running ones: a host pod already being deleted may go meanwhile.
		before := map[string]string{}
		for _, p := range hostPods(alpha) {
			if p.DeletionTimestamp == nil {
				before[p.Name] = string(p.UID)
			}
		}
		cp := &corev1.Pod{}
		if err := host.Get(ctx, client.ObjectKey{Namespace: "vc-alpha", Name: "alpha-0"}, cp); err != nil {
			t.Fatal(err)
		}
		if err := host.Delete(ctx, cp); err != nil {
			t.Fatal(err)
		}
		waitRecreated(t, ctx, host, cp)
		// The old pod object is gone only once its containers stopped: from
		// now on, a heartbeat comes from the new syncer.
		restarted := time.Now()
		testutil.Eventually(t, 3*time.Minute, "the new syncer marked the virtual node Ready", func() error {
			fresh := &corev1.Pod{}
			if err := host.Get(ctx, client.ObjectKeyFromObject(cp), fresh); err != nil || fresh.UID == cp.UID {
				return fmt.Errorf("new control-plane pod not there yet (%v)", err)
			}
			node, err := alpha.Clientset(t).CoreV1().Nodes().Get(ctx, controlplane.VirtualNodeName, metav1.GetOptions{})
			if err != nil {
				return err
			}
			for _, c := range node.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue && c.LastHeartbeatTime.After(restarted) {
					return nil
				}
			}
			return errors.New("no Ready heartbeat from the new syncer yet")
		})
		// A pod created now is handled after the existing ones were adopted.
		alpha.Kubectl(t, ctx, "run", "after-restart", "--image="+testImage)
		waitTenantPods(t, ctx, alpha, "run=after-restart", 1)
		waitTenantPods(t, ctx, alpha, "app=web", 3)
		for _, p := range hostPods(alpha) {
			if p.Annotations[contract.AnnotationTenantName] == "after-restart" {
				continue
			}
			if uid, ok := before[p.Name]; (ok && uid != string(p.UID)) || p.CreationTimestamp.After(restarted) {
				t.Errorf("host pod %s was recreated", p.Name)
			}
			delete(before, p.Name)
		}
		if len(before) != 0 {
			t.Errorf("host pods gone after the restart: %v", before)
		}
	})

	t.Run("tenants cannot see or touch each other, nor the host through their pods", func(t *testing.T) {
		beta.Kubectl(t, ctx, "create", "secret", "generic", "beta-only", "--from-literal=k=v")
		if out := beta.Kubectl(t, ctx, "get", "pods,services,secrets", "-A", "-o", "name"); strings.Contains(out, "web") || strings.Contains(out, "creds") {
			t.Errorf("beta sees alpha's objects:\n%s", out)
		}
		if out := alpha.Kubectl(t, ctx, "get", "secrets", "-A", "-o", "name"); strings.Contains(out, "beta-only") {
			t.Errorf("alpha sees beta's Secret:\n%s", out)
		}
		// alpha's pod token against the host API and against beta's API
		// server: the host NetworkPolicies keep the pod from connecting at
		// all; where a connection were made, the token must get a 401.
		betaAPI := &corev1.Service{}
		if err := host.Get(ctx, client.ObjectKey{Namespace: "vc-beta", Name: "beta"}, betaAPI); err != nil {
			t.Fatal(err)
		}
		hostAPI := &corev1.Service{}
		if err := host.Get(ctx, client.ObjectKey{Namespace: "default", Name: "kubernetes"}, hostAPI); err != nil {
			t.Fatal(err)
		}
		for _, target := range []struct{ name, server, path string }{
			{"host", fmt.Sprintf("https://%s:443", hostAPI.Spec.ClusterIP), "/api/v1/namespaces/vc-beta/pods"},
			{"beta", fmt.Sprintf("https://%s:%d", betaAPI.Spec.ClusterIP, controlplane.Port), "/api/v1/namespaces/default/secrets"},
		} {
			out, err := alpha.KubectlErr(ctx, "exec", "client", "--", "/testapp", "kube", target.path, target.server)
			if err == nil || !strings.Contains(err.Error(), "401 Unauthorized") && !strings.Contains(err.Error(), "Client.Timeout exceeded") {
				t.Errorf("alpha's pod token against the %s API server: %q, %v; want no connection or 401", target.name, out, err)
			}
		}
		// The syncer's own host identity reaches only its namespace.
		for _, c := range []struct {
			ns, verb, group, resource string
			allowed                   bool
		}{
			{"vc-alpha", "create", "", "pods", true}, {"vc-alpha", "create", "", "pods/exec", true},
			{"vc-beta", "get", "", "pods", false}, {"vc-beta", "get", "", "secrets", false},
			{"", "list", "", "pods", false}, {"", "list", "", "nodes", false},
			{"vc-alpha", "create", "rbac.authorization.k8s.io", "rolebindings", false},
		} {
			if got := syncerCan(t, ctx, host, c.ns, c.verb, c.group, c.resource); got != c.allowed {
				t.Errorf("alpha's syncer may %s %s in %q: %v, want %v", c.verb, c.resource, c.ns, got, c.allowed)
			}
		}
		if out, err := alpha.KubectlErr(ctx, "exec", "client", "--", "/testapp", "cat", "/var/run/secrets/kubernetes.io/serviceaccount/namespace"); err != nil || out != "default" {
			t.Errorf("pod namespace file = %q, %v; want the tenant namespace", out, err)
		}
	})
}

// syncerCan asks the host API server whether alpha's syncer service account
// may do verb on resource of group (with an optional subresource after "/")
// in ns.
func syncerCan(t *testing.T, ctx context.Context, host client.Client, ns, verb, group, resource string) bool {
	t.Helper()
	res, sub, _ := strings.Cut(resource, "/")
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:   "system:serviceaccount:vc-alpha:alpha-syncer",
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:vc-alpha", "system:authenticated"},
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: ns, Verb: verb, Group: group, Resource: res, Subresource: sub,
		},
	}}
	if err := host.Create(ctx, sar); err != nil {
		t.Fatal(err)
	}
	return sar.Status.Allowed
}

func createAlpha(t *testing.T, ctx context.Context, host client.Client) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "vc-alpha"}}
	if err := host.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	vc := &nestv1.VirtualCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: "vc-alpha", Name: "alpha"},
		Spec: nestv1.VirtualClusterSpec{
			PromoteResources: nestv1.PromoteResources{Resources: corev1.ResourceList{
				"cpu": resource.MustParse("2"), "memory": resource.MustParse("4Gi"), "pods": resource.MustParse("20"), "nvidia.com/gpu": resource.MustParse("2"),
			}},
			VirtualNode: nestv1.VirtualNodeSpec{TokenMaxAge: &metav1.Duration{Duration: 15 * time.Second},
				NodeDisk: &nestv1.NodeDiskSpec{Size: resource.MustParse("64Mi")}},
		},
	}
	if err := host.Create(ctx, vc); err != nil {
		t.Fatal(err)
	}
}

// headlessStatefulSet is a StatefulSet of two test servers behind a headless
// Service: DNS gives each pod a name of its own.
const headlessStatefulSet = `apiVersion: v1
kind: Service
metadata:
  name: db
spec:
  clusterIP: None
  selector: {app: db}
  ports: [{port: 8080}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: db
spec:
  serviceName: db
  replicas: 2
  podManagementPolicy: Parallel
  selector: {matchLabels: {app: db}}
  template:
    metadata:
      labels: {app: db}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: db
        image: ` + testImage + `
        imagePullPolicy: Never
`

const configuredPod = `apiVersion: v1
kind: Pod
metadata:
  name: configured
  labels: {app: configured}
spec:
  containers:
  - name: app
    image: nest.local/testapp:dev
    env:
    - name: COLOR
      valueFrom: {configMapKeyRef: {name: settings, key: color}}
    - name: POD_NAMESPACE
      valueFrom: {fieldRef: {fieldPath: metadata.namespace}}
    volumeMounts:
    - {name: settings, mountPath: /etc/settings}
    - {name: creds, mountPath: /etc/creds}
  volumes:
  - name: settings
    configMap: {name: settings}
  - name: creds
    secret: {secretName: creds}
`

// clientReaches waits until the tenant's "client" pod gets, from url, the
// host name of one of the pods in want.
func clientReaches(t *testing.T, ctx context.Context, tn *framework.Tenant, url string, want []string) {
	t.Helper()
	testutil.Eventually(t, time.Minute, "client reaches "+url, func() error {
		out, err := tn.KubectlErr(ctx, "exec", "client", "--", "/testapp", "get", url)
		if err != nil {
			return err
		}
		if !slices.Contains(want, strings.TrimSpace(out)) {
			return fmt.Errorf("answer %q, want one of %v", out, want)
		}
		return nil
	})
}

func writeManifest(t *testing.T, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func testPod(name, ns string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: testImage}}},
	}
}

func tenantNode(t *testing.T, ctx context.Context, tn *framework.Tenant) *corev1.Node {
	t.Helper()
	n, err := tn.Clientset(t).CoreV1().Nodes().Get(ctx, controlplane.VirtualNodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func tenantPod(t *testing.T, ctx context.Context, tn *framework.Tenant, name string) *corev1.Pod {
	t.Helper()
	p, err := tn.Clientset(t).CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func tenantPodNames(t *testing.T, ctx context.Context, tn *framework.Tenant, selector string) []string {
	t.Helper()
	list, err := tn.Clientset(t).CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			names = append(names, p.Name)
		}
	}
	slices.Sort(names)
	return names
}

// waitTenantPods waits until n pods match selector, all Running and Ready.
func waitTenantPods(t *testing.T, ctx context.Context, tn *framework.Tenant, selector string, n int) {
	t.Helper()
	cs := tn.Clientset(t)
	testutil.Eventually(t, 3*time.Minute, fmt.Sprintf("%d ready pods %s in %s", n, selector, tn.Name), func() error {
		list, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return err
		}
		ready := 0
		for _, p := range list.Items {
			if p.DeletionTimestamp == nil && podReady(&p) {
				ready++
			}
		}
		if ready != n || len(list.Items) != n {
			return fmt.Errorf("%d of %d ready", ready, len(list.Items))
		}
		return nil
	})
}

// waitPodSucceeded waits for tenant pod name in default to succeed, and
// fails at once when it fails.
func waitPodSucceeded(t *testing.T, ctx context.Context, tn *framework.Tenant, name string) {
	t.Helper()
	testutil.Eventually(t, 3*time.Minute, name+" succeeded", func() error {
		switch p := tenantPod(t, ctx, tn, name); p.Status.Phase {
		case corev1.PodSucceeded:
			return nil
		case corev1.PodFailed:
			t.Fatalf("%s failed: %s %s", name, p.Status.Reason, p.Status.Message)
		default:
			return fmt.Errorf("phase %s", p.Status.Phase)
		}
		return nil
	})
}

// waitRefused waits for the syncer's refusal to show in the pod's status and
// events, naming Pod Security.
func waitRefused(t *testing.T, ctx context.Context, tn *framework.Tenant, name string) {
	t.Helper()
	testutil.Eventually(t, time.Minute, name+" refused with a reason", func() error {
		pod := tenantPod(t, ctx, tn, name)
		if pod.Status.Reason != "ProviderFailed" || !strings.Contains(pod.Status.Message, "violates PodSecurity") {
			return fmt.Errorf("status reason %q message %q", pod.Status.Reason, pod.Status.Message)
		}
		out, err := tn.KubectlErr(ctx, "get", "events", "--field-selector", "involvedObject.name="+name, "-o", "jsonpath={.items[*].message}")
		if err != nil || !strings.Contains(out, "violates PodSecurity") {
			return fmt.Errorf("events %q: %v", out, err)
		}
		return nil
	})
}

func hostPodOf(t *testing.T, pods []corev1.Pod, tenantName string) corev1.Pod {
	t.Helper()
	p, ok := framework.HostPodOf(pods, "default", tenantName)
	if !ok {
		t.Fatalf("no host pod for %s", tenantName)
	}
	return p
}

// streamingKubectl is a kubectl process whose output a test watches.
type streamingKubectl struct {
	lines chan string
}

// startKubectl starts a long-running kubectl against the tenant and stops it,
// by its PID, when the test ends.
func startKubectl(t *testing.T, ctx context.Context, tn *framework.Tenant, args ...string) *streamingKubectl {
	t.Helper()
	cmd := exec.CommandContext(ctx, filepath.Join(framework.BinDir(), "kube"), append([]string{"kubectl", "--kubeconfig", tn.Kubeconfig}, args...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	s := &streamingKubectl{lines: make(chan string, 256)}
	go func() {
		defer close(s.lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			s.lines <- sc.Text()
		}
	}()
	return s
}

// waitFor waits for a line matching pattern and returns its first submatch.
func (s *streamingKubectl) waitFor(t *testing.T, pattern string) string {
	t.Helper()
	re := regexp.MustCompile(pattern)
	deadline := time.After(time.Minute)
	var seen []string
	for {
		select {
		case line, ok := <-s.lines:
			if !ok {
				t.Fatalf("kubectl ended before printing %q:\n%s", pattern, strings.Join(seen, "\n"))
			}
			seen = append(seen, line)
			if m := re.FindStringSubmatch(line); m != nil {
				if len(m) > 1 {
					return m[1]
				}
				return m[0]
			}
		case <-deadline:
			t.Fatalf("no line matching %q within a minute:\n%s", pattern, strings.Join(seen, "\n"))
		}
	}
}
