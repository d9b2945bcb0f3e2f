package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/nestdev/nest/internal/images"
	"github.com/nestdev/nest/internal/testutil"
	"github.com/nestdev/nest/test/e2e/framework"
)

// memberBenchPods is how many pods BenchmarkMemberPodStartup starts each way.
const memberBenchPods = 50

// BenchmarkMemberPodStartup measures, with a host cluster and a member
// cluster on this machine, how long a pod takes from create to Running
// when a tenant places it in the member (through the tenant API server,
// its scheduler, nest-syncer's gatekeeper and the member API server), against
// the same pod created directly in the member. Pods are started one after
// the other, memberBenchPods each way, and reported as median and p99.
// Run it with `make bench-member`.
func BenchmarkMemberPodStartup(b *testing.B) {
	framework.RequireRoot(b)
	ctx := context.Background()
	hostDir := startBenchClusterOf(b, ctx, "member", 2)
	startLocalCluster(b, ctx, memberStateDir(), memberClusterFlags(framework.LeaseCluster(b))...)
	e := startMemberEnv(b, ctx, hostDir, memberStateDir())
	tenant := e.tn.Clientset(b)
	e.tn.WaitDefaultServiceAccount(b, ctx)
	direct := directNamespace(b, ctx, e.member)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		viaTenant := startPods(b, ctx, tenant, "default", fmt.Sprintf("tenant-%d", i), func(p *corev1.Pod) {
			p.Spec.Tolerations, p.Spec.NodeSelector = memberPod("", 0).Spec.Tolerations, memberPod("", 0).Spec.NodeSelector
		})
		inMember := startPods(b, ctx, e.member, direct, fmt.Sprintf("direct-%d", i), nil)
		b.ReportMetric(median(viaTenant).Seconds(), "s-median-tenant")
		b.ReportMetric(percentile(viaTenant, 99).Seconds(), "s-p99-tenant")
		b.ReportMetric(median(inMember).Seconds(), "s-median-direct")
		b.ReportMetric(percentile(inMember, 99).Seconds(), "s-p99-direct")
	}
}

// startPods creates memberBenchPods pods one at a time in namespace and
// returns how long each took to be Running; each is deleted before the
// next starts.
func startPods(b *testing.B, ctx context.Context, cs kubernetes.Interface, namespace, prefix string, edit func(*corev1.Pod)) []time.Duration {
	b.Helper()
	var out []time.Duration
	for i := range memberBenchPods {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", prefix, i), Namespace: namespace},
			Spec: corev1.PodSpec{
				TerminationGracePeriodSeconds: new(int64),
				Containers:                    []corev1.Container{{Name: "app", Image: images.TestApp, ImagePullPolicy: corev1.PullNever}},
			},
		}
		if edit != nil {
			edit(pod)
		}
		start := time.Now()
		if _, err := cs.CoreV1().Pods(namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		running := waitRunning(b, ctx, cs, namespace, pod.Name)
		out = append(out, running.Sub(start))
		if err := cs.CoreV1().Pods(namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	return out
}

// waitRunning polls a pod every 50 ms until it is Running and returns when
// it was first seen so.
func waitRunning(b *testing.B, ctx context.Context, cs kubernetes.Interface, namespace, name string) time.Time {
	b.Helper()
	var running time.Time
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil || p.Status.Phase != corev1.PodRunning {
			return false, nil
		}
		running = time.Now()
		return true, nil
	})
	if err != nil {
		b.Fatalf("pod %s/%s not Running within 3 minutes: %v", namespace, name, err)
	}
	return running
}

// directNamespace makes the member namespace the direct pods run in, and
// waits for its default service account.
func directNamespace(b *testing.B, ctx context.Context, member kubernetes.Interface) string {
	b.Helper()
	const name = "bench-direct"
	if _, err := member.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	testutil.Eventually(b, time.Minute, "default service account in "+name, func() error {
		_, err := member.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
		return err
	})
	return name
}
