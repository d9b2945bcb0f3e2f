package peers

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

// PodTemplate is the pod every workload measure starts: one container of
// Image, never pulled (the image is on every node), that runs until
// deleted, asking for Resources (the same for every system, so no
// system's defaults decide how many fit).
type PodTemplate struct {
	Image     string
	Args      []string
	Resources corev1.ResourceRequirements
}

func (p PodTemplate) pod(name, run string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"peers.nest.dev/run": run}},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: new(int64),
			Containers: []corev1.Container{{Name: "app", Image: p.Image, Args: p.Args, ImagePullPolicy: corev1.PullNever,
				Resources: p.Resources}},
		},
	}
}

// PodStarts creates n pods one after another in namespace ns through cs,
// each once the one before runs, and returns each one's time from its
// create call to the watch event that shows it Running, as cs sees it.
// The pods are deleted before it returns.
func PodStarts(ctx context.Context, cs kubernetes.Interface, ns, run string, n int, tpl PodTemplate, o Options) ([]time.Duration, error) {
	defer deletePods(cs, ns, run)
	out := make([]time.Duration, 0, n)
	for i := range n {
		d, err := podStart(ctx, cs, ns, tpl.pod(fmt.Sprintf("%s-%d", run, i), run), o)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

// podStart creates pod and waits, on a watch opened before the create,
// until it is Running.
func podStart(ctx context.Context, cs kubernetes.Interface, ns string, pod *corev1.Pod, o Options) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, o.timeout())
	defer cancel()
	w, err := cs.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + pod.Name})
	if err != nil {
		return 0, fmt.Errorf("watch pod %s/%s: %w", ns, pod.Name, err)
	}
	defer w.Stop()
	start := time.Now()
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return 0, fmt.Errorf("create pod %s/%s: %w", ns, pod.Name, err)
	}
	if err := untilRunning(ctx, w, 1); err != nil {
		return 0, fmt.Errorf("pod %s/%s: %w", ns, pod.Name, err)
	}
	return time.Since(start), nil
}

// Burst creates n pods at once in namespace ns through cs (from 10
// goroutines) and returns the time from the first create call to the
// watch event that shows the last one Running. The pods are deleted
// before it returns.
func Burst(ctx context.Context, cs kubernetes.Interface, ns, run string, n int, tpl PodTemplate, o Options) (time.Duration, error) {
	defer deletePods(cs, ns, run)
	return runPods(ctx, cs, ns, run, n, tpl, o)
}

// runPods is Burst without the deletion: the pods stay.
func runPods(ctx context.Context, cs kubernetes.Interface, ns, run string, n int, tpl PodTemplate, o Options) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, o.timeout())
	defer cancel()
	w, err := cs.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{LabelSelector: "peers.nest.dev/run=" + run})
	if err != nil {
		return 0, fmt.Errorf("watch the pods of %s: %w", run, err)
	}
	defer w.Stop()
	start := time.Now()
	names := make(chan string)
	var wg sync.WaitGroup
	errs := make([]error, 10)
	for g := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for name := range names {
				if _, err := cs.CoreV1().Pods(ns).Create(ctx, tpl.pod(name, run), metav1.CreateOptions{}); err != nil && errs[g] == nil {
					errs[g] = fmt.Errorf("create pod %s/%s: %w", ns, name, err)
				}
			}
		}()
	}
	for i := range n {
		names <- fmt.Sprintf("%s-%d", run, i)
	}
	close(names)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	if err := untilRunning(ctx, w, n); err != nil {
		return 0, fmt.Errorf("%d pods of %s: %w", n, run, err)
	}
	return time.Since(start), nil
}

// untilRunning reads w until n distinct pods were seen Running; a pod
// that fails, or the watch ending first, is an error.
func untilRunning(ctx context.Context, w watch.Interface, n int) error {
	running := map[string]bool{}
	for len(running) < n {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d Running: %w", len(running), n, ctx.Err())
		case ev, ok := <-w.ResultChan():
			if !ok {
				return fmt.Errorf("the watch ended with %d of %d Running", len(running), n)
			}
			pod, isPod := ev.Object.(*corev1.Pod)
			if !isPod {
				if st, isStatus := ev.Object.(*metav1.Status); isStatus {
					return fmt.Errorf("watch: %s", st.Message)
				}
				continue
			}
			switch pod.Status.Phase {
			case corev1.PodRunning:
				running[pod.Name] = true
			case corev1.PodFailed:
				return fmt.Errorf("pod %s failed: %s", pod.Name, pod.Status.Message)
			}
		}
	}
	return nil
}

// deletePods removes the pods of run in ns, and waits until they are
// gone, so the next measure starts on an idle cluster.
func deletePods(cs kubernetes.Interface, ns, run string) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sel := metav1.ListOptions{LabelSelector: "peers.nest.dev/run=" + run}
	if err := cs.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, sel); err != nil && !apierrors.IsNotFound(err) {
		return
	}
	for ctx.Err() == nil {
		list, err := cs.CoreV1().Pods(ns).List(ctx, sel)
		if err == nil && len(list.Items) == 0 {
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// ListLatencies lists every pod through cs n times, one call after
// another, and returns each call's time.
func ListLatencies(ctx context.Context, cs kubernetes.Interface, n int) ([]time.Duration, error) {
	out := make([]time.Duration, 0, n)
	for range n {
		start := time.Now()
		if _, err := cs.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{}); err != nil {
			return nil, fmt.Errorf("list pods: %w", err)
		}
		out = append(out, time.Since(start))
	}
	return out, nil
}

// WorkingSet reads one host pod's memory working set in bytes (the pod
// cgroup's usage less its inactive file pages, as the kubelet counts it).
type WorkingSet func(pod *corev1.Pod) (float64, error)

// IdleWorkingSet is the working set, in MiB, of every running host pod of
// tenant name of s (its host namespace's), read by ws. A tenant with no
// running pod there is an error.
func IdleWorkingSet(ctx context.Context, host kubernetes.Interface, s System, name string, ws WorkingSet) (float64, error) {
	ns := s.HostNamespace(name)
	pods, err := host.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, fmt.Errorf("list the host pods of %s: %w", name, err)
	}
	total, counted := 0.0, 0
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Status.Phase != corev1.PodRunning {
			continue
		}
		b, err := ws(p)
		if err != nil {
			return 0, fmt.Errorf("working set of host pod %s/%s: %w", ns, p.Name, err)
		}
		total += b
		counted++
	}
	if counted == 0 {
		return 0, fmt.Errorf("tenant %s has no running host pod in %s", name, ns)
	}
	return total / (1 << 20), nil
}
