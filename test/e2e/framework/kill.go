package framework

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nestdev/nest/internal/devcluster"
	"github.com/nestdev/nest/internal/testutil"
)

// ManagerPod waits for the host cluster's one nest-manager pod that is
// not being deleted and whose manager container is ready (a drain or an
// eviction may be replacing it), and returns it.
func ManagerPod(t testing.TB, ctx context.Context, host client.Client) types.NamespacedName {
	t.Helper()
	var key types.NamespacedName
	testutil.Eventually(t, 2*time.Minute, "one ready nest-manager pod", func() error {
		var pods corev1.PodList
		if err := host.List(ctx, &pods, client.InNamespace("nest-system"), client.MatchingLabels{"app.kubernetes.io/name": "nest-manager"}); err != nil {
			return err
		}
		pods.Items = slices.DeleteFunc(pods.Items, func(p corev1.Pod) bool { return p.DeletionTimestamp != nil })
		if len(pods.Items) != 1 {
			return fmt.Errorf("%d nest-manager pods not being deleted, want 1", len(pods.Items))
		}
		if s, ok := ContainerStatus(&pods.Items[0], "manager"); !ok || !s.Ready {
			return fmt.Errorf("nest-manager pod %s is not ready", pods.Items[0].Name)
		}
		key = client.ObjectKeyFromObject(&pods.Items[0])
		return nil
	})
	return key
}

// KillContainer kills a container of the host pod key with SIGKILL,
// through the CRI of the node it runs on, and waits until the kubelet has
// restarted it and it is ready again.
func KillContainer(t testing.TB, ctx context.Context, host client.Client, stateDir string, key types.NamespacedName, container string) {
	t.Helper()
	pod := &corev1.Pod{}
	if err := host.Get(ctx, key, pod); err != nil {
		t.Fatal(err)
	}
	status, ok := ContainerStatus(pod, container)
	if !ok || status.ContainerID == "" {
		t.Fatalf("pod %s has no running container %s", key, container)
	}
	_, id, _ := strings.Cut(status.ContainerID, "://")
	if err := devcluster.KillContainer(ctx, devcluster.Layout{Root: stateDir}, pod.Spec.NodeName, id); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 3*time.Minute, container+" restarted and ready", func() error {
		if err := host.Get(ctx, key, pod); err != nil {
			return err
		}
		now, ok := ContainerStatus(pod, container)
		if !ok || now.RestartCount <= status.RestartCount || !now.Ready {
			return fmt.Errorf("%s: restarts %d, ready %t", container, now.RestartCount, now.Ready)
		}
		return nil
	})
}

// ContainerStatus finds a container's status; etcd and kube-apiserver run
// as sidecars (restartable init containers), so it looks there too.
func ContainerStatus(pod *corev1.Pod, name string) (corev1.ContainerStatus, bool) {
	for _, s := range slices.Concat(pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses) {
		if s.Name == name {
			return s, true
		}
	}
	return corev1.ContainerStatus{}, false
}

// KillRecorded SIGKILLs the local host cluster's processes of these names
// (such as "kube-apiserver" or "nest-worker.kubelet"), by the PIDs `nest
// dev up` recorded in stateDir, and waits until they are gone.
func KillRecorded(t testing.TB, stateDir string, names ...string) {
	t.Helper()
	procs, err := devcluster.RecordedProcesses(devcluster.Layout{Root: stateDir})
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]devcluster.Process{}
	for _, p := range procs {
		byName[p.Name] = p
	}
	for _, name := range names {
		p, ok := byName[name]
		if !ok || !p.Alive() {
			t.Fatalf("no running %s recorded in %s", name, stateDir)
		}
		if err := syscall.Kill(p.PID, syscall.SIGKILL); err != nil {
			t.Fatalf("kill %s (pid %d): %v", name, p.PID, err)
		}
		testutil.Eventually(t, 30*time.Second, name+" gone", func() error {
			if p.Alive() {
				return fmt.Errorf("pid %d still runs", p.PID)
			}
			return nil
		})
	}
}

// StartAgain runs `nest dev up --with-nest` on the local host cluster of
// nodes nodes in stateDir (with the cluster name and slot it was started
// with), which starts what is no longer running.
func StartAgain(t testing.TB, ctx context.Context, stateDir string, nodes int) {
	t.Helper()
	args := append([]string{"dev", "up", "--nodes", fmt.Sprint(nodes), "--state-dir", stateDir, "--with-nest"}, ClusterFlags(Addressing(t, stateDir))...)
	out, err := Run(ctx, t, "nest", args...)
	if err != nil {
		t.Fatalf("nest dev up: %v\n%s", err, out)
	}
	// Its phases' times: what a restart waited on.
	t.Logf("nest dev up again:\n%s", out)
}
