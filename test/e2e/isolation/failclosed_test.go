package isolation

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nestdev/nest/internal/testutil"
)

// Fail closed: a tenant pod reaches nothing of the host at any moment of
// its life, its first instruction included.
func (e *env) failClosed() []testCase {
	return []testCase{
		{"burst-of-pods-dialling-the-host-at-their-first-instruction-connects-nowhere", e.burstDialsHost},
	}
}

// burstPods is how many pods start at once: a network plugin learns of
// pods in batches, and the probe that found the gap saw 2 of 8 get through.
const burstPods = 20

// burstDialsHost: burstPods alpha pods, created at once, dial the host API
// server and a host kubelet as their first instruction, and their own API
// server as the control that the dial itself works.
func (e *env) burstDialsHost(t *testing.T) {
	own := hostPort(e.own.controlPlanePod, apiServerPort)
	targets := []string{e.hostAPIServer, hostPort(e.nodeIPs[0], 10250), hostPort(e.nodeIPs[1], 10250)}
	cs := e.alpha.Clientset(t)
	var wg sync.WaitGroup
	errs := make(chan error, burstPods)
	for i := range burstPods {
		pod := testPod(fmt.Sprintf("first-dial-%d", i), func(p *corev1.Pod) {
			p.Spec.RestartPolicy = corev1.RestartPolicyNever
			small := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")}
			p.Spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: small, Limits: small}
			p.Spec.Containers[0].Args = append([]string{"first-dial"}, append(targets, own)...)
		})
		t.Cleanup(func() {
			_ = cs.CoreV1().Pods(pod.Namespace).Delete(e.ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
		})
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := cs.CoreV1().Pods(pod.Namespace).Create(e.ctx, pod, metav1.CreateOptions{}); err != nil {
				errs <- fmt.Errorf("create pod %s: %w", pod.Name, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for i := range burstPods {
		name := fmt.Sprintf("first-dial-%d", i)
		var logs string
		testutil.Eventually(t, 3*time.Minute, name+" ran", func() error {
			p, err := cs.CoreV1().Pods("default").Get(e.ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if p.Status.Phase != corev1.PodSucceeded {
				return fmt.Errorf("phase %s", p.Status.Phase)
			}
			body, err := cs.CoreV1().Pods("default").GetLogs(name, &corev1.PodLogOptions{}).DoRaw(e.ctx)
			logs = string(body)
			return err
		})
		if !strings.Contains(logs, "connected "+own) {
			t.Errorf("%s did not reach its own API server %s, so its dials prove nothing:\n%s", name, own, logs)
		}
		for _, target := range targets {
			if strings.Contains(logs, "connected "+target) {
				t.Errorf("%s reached host address %s at its first instruction:\n%s", name, target, logs)
			}
		}
	}
}
