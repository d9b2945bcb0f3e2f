package isolation

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nestdev/nest/internal/images"
	"github.com/nestdev/nest/internal/syncer/contract"
	"github.com/nestdev/nest/internal/syncer/kinds/persistentvolumeclaim"
	"github.com/nestdev/nest/internal/testutil"
)

// Storage: tenant claims get host storage through the virtual node, and a
// claim cannot reach a volume that is not its own.
func (e *env) storage() []testCase {
	return []testCase{
		{"statefulset-volumes-keep-their-data-across-pod-restarts", e.statefulSetVolumes},
		{"claim-naming-a-volume-gets-no-host-claim", e.claimNamingAVolume},
		{"claim-with-a-selector-is-refused", e.claimWithSelector},
		{"claim-resize-grows-the-host-volume", e.claimResize},
		{"claim-resize-past-the-storage-quota-is-refused", e.claimResizePastQuota},
	}
}

// hostClaims lists alpha's host claims of tenant namespace ns.
func (e *env) hostClaims(t *testing.T, ns string) []corev1.PersistentVolumeClaim {
	t.Helper()
	var list corev1.PersistentVolumeClaimList
	if err := e.host.List(e.ctx, &list, client.InNamespace(e.alpha.Namespace), client.MatchingLabels(contract.HostLabels("alpha", ns))); err != nil {
		t.Fatal(err)
	}
	return list.Items
}

func claimSpec(size string) corev1.PersistentVolumeClaimSpec {
	return corev1.PersistentVolumeClaimSpec{
		AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}},
	}
}

// statefulSetVolumes: a StatefulSet of 3 with volumeClaimTemplates; each
// pod's first incarnation writes its UID on its volume; every pod is
// deleted; the new pods read what their predecessors wrote. The claims are
// Bound in the tenant, each backed by a host claim, which go when the
// tenant's claims are deleted.
func (e *env) statefulSetVolumes(t *testing.T) {
	const ns = "storage"
	e.namespaceWithPods(t, e.alpha, ns)
	cs := e.alpha.Clientset(t)
	labels := map[string]string{"app": "db"}
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr.To[int32](3), ServiceName: "db", PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: new(int64),
					InitContainers: []corev1.Container{{
						Name: "first-writer", Image: images.TestApp, ImagePullPolicy: corev1.PullNever,
						Args:         []string{"write-once", "/data/writer", "$(POD_UID)"},
						Env:          []corev1.EnvVar{{Name: "POD_UID", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.uid"}}}},
						VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
					}},
					Containers: []corev1.Container{{
						Name: "app", Image: images.TestApp, ImagePullPolicy: corev1.PullNever,
						VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
					}},
				},
			},
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{ObjectMeta: metav1.ObjectMeta{Name: "data"}, Spec: claimSpec("16Mi")}},
		},
	}
	start := time.Now()
	if _, err := cs.AppsV1().StatefulSets(ns).Create(e.ctx, sts, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// running waits for the StatefulSet's pod name to run, as another pod
	// than the one with UID before.
	running := func(name, before string) string {
		var uid string
		testutil.Eventually(t, 3*time.Minute, name+" running", func() error {
			pod, err := cs.CoreV1().Pods(ns).Get(e.ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if uid = string(pod.UID); uid == before || pod.Status.Phase != corev1.PodRunning {
				return fmt.Errorf("uid %s phase %s %s", pod.UID, pod.Status.Phase, pod.Status.Message)
			}
			return nil
		})
		return uid
	}
	pods := []string{"db-0", "db-1", "db-2"}
	firstUIDs := map[string]string{}
	for _, p := range pods {
		firstUIDs[p] = running(p, "")
	}
	t.Logf("StatefulSet of 3 with volume claims Running %v after it was created", time.Since(start).Round(time.Millisecond))
	for _, p := range pods {
		c, err := cs.CoreV1().PersistentVolumeClaims(ns).Get(e.ctx, "data-"+p, metav1.GetOptions{})
		if err != nil || c.Status.Phase != corev1.ClaimBound {
			t.Fatalf("claim data-%s: %v, phase %v", p, err, c.Status.Phase)
		}
	}
	if got := len(e.hostClaims(t, ns)); got != 3 {
		t.Fatalf("%d host claims, want 3", got)
	}
	if err := cs.CoreV1().Pods(ns).DeleteCollection(e.ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "app=db"}); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		running(p, firstUIDs[p])
		out, err := e.alpha.KubectlErr(e.ctx, "exec", "-n", ns, p, "--", "/testapp", "cat", "/data/writer")
		if err != nil || strings.TrimSpace(out) != firstUIDs[p] {
			t.Errorf("%s reads %q (%v) on its volume, want %s, which its first pod wrote", p, out, err, firstUIDs[p])
		}
	}

	if err := cs.AppsV1().StatefulSets(ns).Delete(e.ctx, "db", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cs.CoreV1().PersistentVolumeClaims(ns).DeleteCollection(e.ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 3*time.Minute, "the host claims gone with the tenant's", func() error {
		if n := len(e.hostClaims(t, ns)); n > 0 {
			return fmt.Errorf("%d host claims left", n)
		}
		return nil
	})
}

// claimNamingAVolume: a claim naming a volume (a host PV's name, say)
// binds nothing: no host claim is made and the claim stays Pending.
func (e *env) claimNamingAVolume(t *testing.T) {
	const ns = "storage-volume-name"
	e.namespaceWithPods(t, e.alpha, ns)
	c := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "borrowed", Namespace: ns}, Spec: claimSpec("16Mi")}
	c.Spec.VolumeName = "pvc-of-another-tenant"
	e.claimGetsNoHostClaim(t, ns, c, "")
}

// claimWithSelector: a claim with a selector, which could pick another
// tenant's volume, gets none: the tenant's scheduler provisions no claim
// with a selector, and the virtual node's provisioner refuses one naming
// spec.selector (unit-tested: a pod bound by nodeName never asks for it).
func (e *env) claimWithSelector(t *testing.T) {
	const ns = "storage-selector"
	e.namespaceWithPods(t, e.alpha, ns)
	c := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "picky", Namespace: ns}, Spec: claimSpec("16Mi")}
	c.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"tenant": "beta"}}
	e.claimGetsNoHostClaim(t, ns, c, "")
}

// claimGetsNoHostClaim creates c and a pod mounting it (with the
// scheduler bypassed, as a hostile tenant would); the pod is refused, no
// host claim appears, and, when wantEvent is set, the claim has an event
// naming it.
func (e *env) claimGetsNoHostClaim(t *testing.T, ns string, c *corev1.PersistentVolumeClaim, wantEvent string) {
	t.Helper()
	cs := e.alpha.Clientset(t)
	if _, err := cs.CoreV1().PersistentVolumeClaims(ns).Create(e.ctx, c, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.CoreV1().PersistentVolumeClaims(ns).Delete(context.Background(), c.Name, metav1.DeleteOptions{})
	})
	pod := testPod("mounts-"+c.Name, func(p *corev1.Pod) {
		p.Namespace = ns
		p.Spec.Volumes = []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: c.Name}}}}
	})
	e.create(t, e.alpha, pod)
	testutil.Eventually(t, time.Minute, "the pod refused", func() error {
		got := e.tenantPod(t, e.alpha, ns, pod.Name)
		if got.Status.Reason != "ProviderFailed" || !strings.Contains(got.Status.Message, "persistentVolumeClaim "+c.Name) {
			return fmt.Errorf("status %q %q", got.Status.Reason, got.Status.Message)
		}
		return nil
	})
	if wantEvent != "" {
		testutil.Eventually(t, time.Minute, "an event naming "+wantEvent, func() error {
			if ev := e.tenantEvents(t, e.alpha, ns, c.Name); !strings.Contains(ev, wantEvent) {
				return errors.New("events: " + ev)
			}
			return nil
		})
	}
	got, err := cs.CoreV1().PersistentVolumeClaims(ns).Get(e.ctx, c.Name, metav1.GetOptions{})
	if err != nil || got.Status.Phase == corev1.ClaimBound {
		t.Errorf("claim %v, phase %v: want it Pending", err, got.Status.Phase)
	}
	if n := len(e.hostClaims(t, ns)); n != 0 {
		t.Errorf("%d host claims for a claim the virtual node must not provision", n)
	}
}

// boundClaimInUse creates claim name of size in ns and a pod that mounts it
// (the class binds on first use), and waits until the tenant claim and its
// host claim are Bound. It returns the host claim.
func (e *env) boundClaimInUse(t *testing.T, ns, name, size string) corev1.PersistentVolumeClaim {
	t.Helper()
	cs := e.alpha.Clientset(t)
	c := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: claimSpec(size)}
	start := time.Now()
	if _, err := cs.CoreV1().PersistentVolumeClaims(ns).Create(e.ctx, c, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := testPod("uses-"+name, func(p *corev1.Pod) {
		p.Namespace, p.Spec.NodeName = ns, ""
		// No token, so no host copy of the namespace's kube-root-ca.crt:
		// alpha's ConfigMap budget is small, and other groups' namespaces
		// hold their copies.
		p.Spec.AutomountServiceAccountToken = ptr.To(false)
		p.Spec.Volumes = []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: name}}}}
	})
	e.create(t, e.alpha, pod)
	var host corev1.PersistentVolumeClaim
	testutil.Eventually(t, 2*time.Minute, "claim "+name+" and its host claim Bound", func() error {
		got, err := cs.CoreV1().PersistentVolumeClaims(ns).Get(e.ctx, name, metav1.GetOptions{})
		if err != nil || got.Status.Phase != corev1.ClaimBound {
			return fmt.Errorf("tenant claim %v: %v", got.Status.Phase, err)
		}
		hosts := e.hostClaims(t, ns)
		if len(hosts) != 1 || hosts[0].Status.Phase != corev1.ClaimBound {
			p := e.tenantPod(t, e.alpha, ns, pod.Name)
			_, hostPod := e.findHostPod(t, e.alpha, ns, pod.Name)
			return fmt.Errorf("host claims %d, want 1 Bound; pod %s on %q: %s %s %s, host pod made %v",
				len(hosts), pod.Name, p.Spec.NodeName, p.Status.Phase, p.Status.Reason, p.Status.Message, hostPod)
		}
		host = hosts[0]
		return nil
	})
	t.Logf("claim %s and a pod using it created → tenant and host claims Bound in %v", name, time.Since(start).Round(time.Millisecond))
	testutil.Eventually(t, 2*time.Minute, "the pod using "+name+" Running", func() error {
		if got := e.tenantPod(t, e.alpha, ns, pod.Name); got.Status.Phase != corev1.PodRunning {
			return fmt.Errorf("phase %s %s", got.Status.Phase, got.Status.Message)
		}
		return nil
	})
	t.Logf("claim %s and a pod using it created → pod Running in %v", name, time.Since(start).Round(time.Millisecond))
	return host
}

// resizeClaim sets the request of the tenant claim ns/name to size.
func (e *env) resizeClaim(t *testing.T, ns, name, size string) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"resources":{"requests":{"storage":%q}}}}`, size)
	if _, err := e.alpha.Clientset(t).CoreV1().PersistentVolumeClaims(ns).Patch(e.ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatalf("resize claim %s to %s: %v", name, size, err)
	}
}

// claimResize: a larger request on a bound tenant claim grows the host
// claim; the host volume's new capacity shows on the tenant claim and on
// its volume, as a resizer would set them on a real node.
func (e *env) claimResize(t *testing.T) {
	const ns = "storage-resize"
	e.namespaceWithPods(t, e.alpha, ns)
	cs := e.alpha.Clientset(t)
	e.boundClaimInUse(t, ns, "grows", "16Mi")
	start := time.Now()
	e.resizeClaim(t, ns, "grows", "32Mi")
	want := resource.MustParse("32Mi")
	testutil.Eventually(t, 2*time.Minute, "the claim, its volume and its host claim at 32Mi", func() error {
		c, err := cs.CoreV1().PersistentVolumeClaims(ns).Get(e.ctx, "grows", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if q := c.Status.Capacity[corev1.ResourceStorage]; q.Cmp(want) != 0 {
			return fmt.Errorf("tenant claim capacity %s", q.String())
		}
		pv, err := cs.CoreV1().PersistentVolumes().Get(e.ctx, c.Spec.VolumeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if q := pv.Spec.Capacity[corev1.ResourceStorage]; q.Cmp(want) != 0 {
			return fmt.Errorf("tenant volume capacity %s", q.String())
		}
		host := e.hostClaims(t, ns)[0]
		if q := host.Status.Capacity[corev1.ResourceStorage]; q.Cmp(want) != 0 {
			return fmt.Errorf("host claim capacity %s", q.String())
		}
		return nil
	})
	t.Logf("claim resized 16Mi → 32Mi, shown in the tenant %v after the request", time.Since(start).Round(time.Millisecond))
}

// claimResizePastQuota: growing a claim past the VirtualCluster's storage
// requests is accepted by the tenant's own API server, refused by the
// host's quota, and the tenant claim gets a Warning event saying so; the
// host claim keeps its size.
func (e *env) claimResizePastQuota(t *testing.T) {
	const ns = "storage-resize-quota"
	e.namespaceWithPods(t, e.alpha, ns)
	e.boundClaimInUse(t, ns, "greedy", "16Mi")
	e.resizeClaim(t, ns, "greedy", "100Ti")
	testutil.Eventually(t, time.Minute, "a VolumeResizeFailed event naming the quota", func() error {
		if ev := e.tenantEvents(t, e.alpha, ns, "greedy"); !strings.Contains(ev, persistentvolumeclaim.ReasonResizeFailed) || !strings.Contains(ev, "quota") {
			return errors.New("events: " + ev)
		}
		return nil
	})
	host := e.hostClaims(t, ns)[0]
	if q := host.Spec.Resources.Requests[corev1.ResourceStorage]; q.Cmp(resource.MustParse("16Mi")) != 0 {
		t.Errorf("host claim request %s, want it kept at 16Mi", q.String())
	}
}
