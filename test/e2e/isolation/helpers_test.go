package isolation

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nestdev/nest/internal/controlplane"
	"github.com/nestdev/nest/internal/images"
	"github.com/nestdev/nest/internal/syncer/contract"
	"github.com/nestdev/nest/internal/testutil"
	"github.com/nestdev/nest/test/e2e/framework"
)

// refusedPrefix starts the message the virtual node puts on a tenant pod it
// will not run.
const refusedPrefix = "refused by the virtual node: "

// testPod is a testapp server pod in namespace default, bound to the virtual
// node so the tenant scheduler is skipped, as a hostile tenant would.
func testPod(name string, mutate ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{
			NodeName:                      controlplane.VirtualNodeName,
			TerminationGracePeriodSeconds: new(int64),
			Containers: []corev1.Container{{
				Name: "app", Image: images.TestApp, ImagePullPolicy: corev1.PullNever,
			}},
		},
	}
	for _, m := range mutate {
		m(p)
	}
	return p
}

// create creates pod in the tenant and deletes it when the test ends.
func (e *env) create(t *testing.T, tn *framework.Tenant, pod *corev1.Pod) {
	t.Helper()
	cs := tn.Clientset(t)
	if _, err := cs.CoreV1().Pods(pod.Namespace).Create(e.ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("tenant %s: create pod %s: %v", tn.Name, pod.Name, err)
	}
	t.Cleanup(func() {
		_ = cs.CoreV1().Pods(pod.Namespace).Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	})
}

// refused creates pod in alpha and waits until the virtual node refuses it
// with a message containing want; no host pod may exist for it.
func (e *env) refused(t *testing.T, pod *corev1.Pod, want string) {
	t.Helper()
	e.create(t, e.alpha, pod)
	testutil.Eventually(t, time.Minute, pod.Name+" refused by the virtual node", func() error {
		got := e.tenantPod(t, e.alpha, pod.Namespace, pod.Name)
		if got.Status.Reason != "ProviderFailed" || !strings.HasPrefix(got.Status.Message, refusedPrefix) {
			return fmt.Errorf("status reason %q message %q", got.Status.Reason, got.Status.Message)
		}
		if !strings.Contains(got.Status.Message, want) {
			t.Fatalf("refused for the wrong reason: %q, want it to name %q", got.Status.Message, want)
		}
		return nil
	})
	if p, ok := e.findHostPod(t, e.alpha, pod.Namespace, pod.Name); ok {
		t.Fatalf("host pod %s exists for a refused tenant pod", p.Name)
	}
}

// rejected creates pod in alpha and waits until the virtual node rejects it
// as a kubelet does: phase Failed with reason and a "Pod was rejected"
// message containing want; no host pod may exist for it.
func (e *env) rejected(t *testing.T, pod *corev1.Pod, reason, want string) {
	t.Helper()
	e.create(t, e.alpha, pod)
	testutil.Eventually(t, time.Minute, pod.Name+" rejected by the virtual node", func() error {
		got := e.tenantPod(t, e.alpha, pod.Namespace, pod.Name)
		if got.Status.Phase != corev1.PodFailed || got.Status.Reason != reason {
			return fmt.Errorf("phase %s reason %q message %q", got.Status.Phase, got.Status.Reason, got.Status.Message)
		}
		if !strings.HasPrefix(got.Status.Message, "Pod was rejected: ") || !strings.Contains(got.Status.Message, want) {
			t.Fatalf("rejected with message %q, want it to name %q", got.Status.Message, want)
		}
		return nil
	})
	if p, ok := e.findHostPod(t, e.alpha, pod.Namespace, pod.Name); ok {
		t.Fatalf("host pod %s exists for a rejected tenant pod", p.Name)
	}
}

// runServer starts a testapp server pod named name in the tenant's default
// namespace and waits until it runs.
func (e *env) runServer(t *testing.T, tn *framework.Tenant, name string, mutate ...func(*corev1.Pod)) *corev1.Pod {
	t.Helper()
	e.create(t, tn, testPod(name, mutate...))
	return e.waitRunning(t, tn, "default", name)
}

func (e *env) waitRunning(t *testing.T, tn *framework.Tenant, ns, name string) *corev1.Pod {
	t.Helper()
	var p *corev1.Pod
	testutil.Eventually(t, 2*time.Minute, fmt.Sprintf("tenant %s pod %s/%s running", tn.Name, ns, name), func() error {
		p = e.tenantPod(t, tn, ns, name)
		if p.Status.Phase != corev1.PodRunning {
			return fmt.Errorf("phase %s reason %q message %q", p.Status.Phase, p.Status.Reason, p.Status.Message)
		}
		return nil
	})
	return p
}

func (e *env) tenantPod(t *testing.T, tn *framework.Tenant, ns, name string) *corev1.Pod {
	t.Helper()
	p, err := tn.Clientset(t).CoreV1().Pods(ns).Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// findHostPod returns the host pod that runs the tenant's pod ns/name.
func (e *env) findHostPod(t *testing.T, tn *framework.Tenant, ns, name string) (corev1.Pod, bool) {
	t.Helper()
	return framework.HostPodOf(tn.HostPods(t, e.ctx, e.host), ns, name)
}

// hostPod waits for the host pod of the tenant's pod ns/name and returns it.
func (e *env) hostPod(t *testing.T, tn *framework.Tenant, ns, name string) corev1.Pod {
	t.Helper()
	var p corev1.Pod
	testutil.Eventually(t, time.Minute, "host pod of "+ns+"/"+name, func() error {
		var ok bool
		if p, ok = e.findHostPod(t, tn, ns, name); !ok {
			return errors.New("none yet")
		}
		if p.Status.PodIP == "" {
			return errors.New("no pod IP yet")
		}
		return nil
	})
	return p
}

// hostServiceIP waits for the host copy of the tenant Service ns/name and
// returns its ClusterIP.
func (e *env) hostServiceIP(t *testing.T, tn *framework.Tenant, ns, name string) string {
	t.Helper()
	var ip string
	testutil.Eventually(t, time.Minute, "host Service of "+ns+"/"+name, func() error {
		var list corev1.ServiceList
		if err := e.host.List(e.ctx, &list, client.InNamespace(tn.Namespace), client.MatchingLabels{contract.LabelTenantOf: tn.Name}); err != nil {
			return err
		}
		for _, s := range list.Items {
			if s.Annotations[contract.AnnotationTenantName] == name && s.Annotations[contract.AnnotationTenantNamespace] == ns && s.Spec.ClusterIP != "" {
				ip = s.Spec.ClusterIP
				return nil
			}
		}
		return errors.New("none yet")
	})
	return ip
}

// exec runs testapp with args in the tenant pod and returns its output and error.
func exec(ctx context.Context, tn *framework.Tenant, pod string, args ...string) (string, error) {
	return tn.KubectlErr(ctx, append([]string{"exec", pod, "--", "/testapp"}, args...)...)
}

// mustExec is exec that fails the test on error.
func (e *env) mustExec(t *testing.T, tn *framework.Tenant, pod string, args ...string) string {
	t.Helper()
	out, err := exec(e.ctx, tn, pod, args...)
	if err != nil {
		t.Fatalf("exec %v in %s: %v\n%s", args, pod, err, out)
	}
	return strings.TrimSpace(out)
}

// blocked asserts that alpha's prober cannot open a TCP connection to addr.
// The reach controls show that the same prober does reach what it may.
func (e *env) blocked(t *testing.T, addr string) {
	t.Helper()
	e.blockedFrom(t, e.alpha, "default", "prober", addr)
}

// tenantEvents returns the messages of the tenant's events about one object.
func (e *env) tenantEvents(t *testing.T, tn *framework.Tenant, ns, name string) string {
	t.Helper()
	list, err := tn.Clientset(t).CoreV1().Events(ns).List(e.ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	var msgs []string
	for _, ev := range list.Items {
		msgs = append(msgs, ev.Reason+": "+ev.Message)
	}
	return strings.Join(msgs, "\n")
}

func errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }

// statusField parses a hexadecimal field, such as CapBnd, of /proc/PID/status.
func statusField(t *testing.T, status, name string) uint64 {
	t.Helper()
	for _, line := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			return n
		}
	}
	t.Fatalf("no %s in /proc/self/status:\n%s", name, status)
	return 0
}
