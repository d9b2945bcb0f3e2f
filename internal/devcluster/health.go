package devcluster

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	remote "k8s.io/cri-client/pkg"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nestdev/nest/internal/kube"
)

func adminConfig(l Layout) (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", l.AdminKubeconfig())
	if err != nil {
		return nil, fmt.Errorf("load admin kubeconfig: %w", err)
	}
	cfg.Timeout = 10 * time.Second
	return cfg, nil
}

// adminClient is a controller-runtime client with cluster-admin credentials.
func adminClient(l Layout) (client.Client, error) {
	cfg, err := adminConfig(l)
	if err != nil {
		return nil, err
	}
	return client.New(cfg, client.Options{Scheme: kube.NewScheme()})
}

func apiServerReady(ctx context.Context, l Layout) bool {
	cfg, err := adminConfig(l)
	if err != nil {
		return false
	}
	cfg.Timeout = 2 * time.Second
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return false
	}
	body, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
	return err == nil && string(body) == "ok"
}

// containerdReady reports whether n's containerd answers on its CRI socket
// the way a kubelet starting checks it (cri-client's connection
// validation, a CRI Version call). containerd answers its own API before
// its CRI plugin has loaded its state, and a kubelet started in between
// exits with "server is not initialized yet": after a restart with
// running containers that gap is seconds long.
func containerdReady(ctx context.Context, n Node) bool {
	if _, err := os.Stat(n.ContainerdSocket()); err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	svc, err := remote.NewRemoteRuntimeService(ctx, "unix://"+n.ContainerdSocket(), 2*time.Second, nil, false)
	if err != nil {
		return false
	}
	_ = svc.Close(ctx)
	return true
}

func nodesReady(ctx context.Context, c client.Client, nodes []Node) bool {
	for _, n := range nodes {
		var node corev1.Node
		if err := c.Get(ctx, types.NamespacedName{Name: n.Name}, &node); err != nil || !kube.NodeReady(&node) {
			return false
		}
	}
	return true
}

func coreDNSReady(ctx context.Context, c client.Client) bool {
	var d appsv1.Deployment
	if err := c.Get(ctx, types.NamespacedName{Namespace: metav1.NamespaceSystem, Name: "coredns"}, &d); err != nil {
		return false
	}
	return d.Status.ReadyReplicas > 0
}

// labelControlPlane marks the first node as the control-plane node. The kubelet
// may not set node-role labels on itself (NodeRestriction), so the admin does.
func labelControlPlane(ctx context.Context, c client.Client, cp Node) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]string{controlPlaneNodeLabel: ""}}})
	if err != nil {
		return err
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: cp.Name}}
	return c.Patch(ctx, node, client.RawPatch(types.MergePatchType, patch))
}

// healthy reports whether a recorded cluster runs: every process alive and the
// API server ready.
func healthy(ctx context.Context, l Layout) bool {
	procs, err := RecordedProcesses(l)
	if err != nil || len(procs) == 0 {
		return false
	}
	for _, p := range procs {
		if !p.Alive() {
			return false
		}
	}
	return apiServerReady(ctx, l)
}

func readProcess(l Layout, name string) (Process, error) {
	data, err := os.ReadFile(pidFile(l, name))
	if err != nil {
		return Process{}, err
	}
	var p Process
	return p, json.Unmarshal(data, &p)
}
