package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nestdev/nest/internal/devcluster"
	"github.com/nestdev/nest/internal/images"
	"github.com/nestdev/nest/test/e2e/framework"
)

// BenchmarkNetworkPolicyEnforcer measures what the per-node NetworkPolicy
// enforcer (kube-network-policies) costs tenant pods, in one run on one
// local host cluster: 50 tenant server pods started one after another with
// the enforcer, then 50 with it stopped and its rules removed. For each pod
// it records create → Running and create → the first TCP connection another
// tenant pod opens to it (an enforcer lets it through only once it knows the
// new pod's IP), and reports the medians and what the enforcer adds. It also
// reports the enforcer's RSS on each node after the first 50 pods.
//
// Run it with `make bench`.
func BenchmarkNetworkPolicyEnforcer(b *testing.B) {
	framework.RequireRoot(b)
	ctx := context.Background()
	stateDir := startBenchCluster(b, ctx, "netpol")
	host := framework.HostClient(b, devcluster.Layout{Root: stateDir}.AdminKubeconfig())
	cs := kubernetes.NewForConfigOrDie(benchTenant(b, ctx, host))
	kubeconfig := tenantKubeconfigFile(b, ctx, host)
	waitServiceAccount(b, ctx, cs, "default")
	startServer(b, ctx, cs, "prober", "prober")
	for i := 0; i < b.N; i++ {
		withRunning, withReachable := reachableStarts(b, ctx, cs, kubeconfig, fmt.Sprintf("with-%d", i), 50)
		for name, mb := range componentRSS(b, stateDir) {
			if strings.HasPrefix(name, devcluster.NetworkPolicyTable+"@") {
				b.ReportMetric(mb, "MB-rss-"+name)
			}
		}
		if err := devcluster.StopNetworkPolicy(ctx, stateDir); err != nil {
			b.Fatal(err)
		}
		withoutRunning, withoutReachable := reachableStarts(b, ctx, cs, kubeconfig, fmt.Sprintf("without-%d", i), 50)
		b.ReportMetric(ms(median(withRunning)), "running-median-ms-with")
		b.ReportMetric(ms(median(withoutRunning)), "running-median-ms-without")
		b.ReportMetric(ms(median(withRunning)-median(withoutRunning)), "running-added-median-ms")
		b.ReportMetric(ms(median(withReachable)), "reachable-median-ms-with")
		b.ReportMetric(ms(median(withoutReachable)), "reachable-median-ms-without")
		b.ReportMetric(ms(median(withReachable)-median(withoutReachable)), "reachable-added-median-ms")
	}
}

// tenantKubeconfigFile writes the bench tenant's admin kubeconfig to a file
// for kubectl.
func tenantKubeconfigFile(b *testing.B, ctx context.Context, host client.Client) string {
	var s corev1.Secret
	if err := host.Get(ctx, client.ObjectKey{Namespace: "vc-bench", Name: "bench-kubeconfig"}, &s); err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(b.TempDir(), "bench.kubeconfig")
	if err := os.WriteFile(path, s.Data["kubeconfig"], 0o600); err != nil {
		b.Fatal(err)
	}
	return path
}

// startServer creates a testapp server pod labelled role=role and returns
// when it was created, how long it took to be Running, and the pod.
func startServer(b *testing.B, ctx context.Context, cs kubernetes.Interface, name, role string) (time.Time, time.Duration, *corev1.Pod) {
	pods := cs.CoreV1().Pods("default")
	w, err := pods.Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()})
	if err != nil {
		b.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"bench": "netpol", "role": role}},
		Spec: corev1.PodSpec{
			Containers:                    []corev1.Container{{Name: "app", Image: images.TestApp, ImagePullPolicy: corev1.PullNever}},
			TerminationGracePeriodSeconds: new(int64),
		},
	}
	start := time.Now()
	if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	took := passedBy(w, 1, start, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" })
	if took == 0 {
		b.Fatalf("pod %s not Running within 10 minutes", name)
	}
	got, err := pods.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		b.Fatal(err)
	}
	return start, took, got
}

// reachableStarts starts n server pods one after another; for each it
// returns create → Running and create → the prober's first connection.
func reachableStarts(b *testing.B, ctx context.Context, cs kubernetes.Interface, kubeconfig, prefix string, n int) (running, reachable []time.Duration) {
	for i := range n {
		start, took, pod := startServer(b, ctx, cs, fmt.Sprintf("%s-%d", prefix, i), "server")
		out, err := framework.Kubectl(ctx, kubeconfig, "exec", "prober", "--", "/testapp", "wait-dial", pod.Status.PodIP+":8080")
		if err != nil {
			b.Fatalf("prober never reached %s: %v", pod.Name, err)
		}
		// The pod and the test share the machine's clock.
		at, err := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
		if err != nil {
			b.Fatalf("wait-dial output %q: %v", out, err)
		}
		running = append(running, took)
		reachable = append(reachable, time.Unix(0, at).Sub(start))
	}
	if err := cs.CoreV1().Pods("default").DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "bench=netpol,role=server"}); err != nil {
		b.Fatal(err)
	}
	return running, reachable
}
