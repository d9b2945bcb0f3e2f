package virtualcluster

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nestdev/nest/internal/controlplane"
)

// APITenants talks to tenant API servers with their in-cluster admin kubeconfig.
type APITenants struct{}

var _ TenantChecker = APITenants{}

func tenantClient(kubeconfig []byte) (*kubernetes.Clientset, error) {
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("parse tenant kubeconfig: %w", err)
	}
	cfg.Timeout = 5 * time.Second
	return kubernetes.NewForConfig(rest.CopyConfig(cfg))
}

// Ready returns nil when the tenant API server's /readyz answers "ok".
func (APITenants) Ready(ctx context.Context, kubeconfig []byte) error {
	cs, err := tenantClient(kubeconfig)
	if err != nil {
		return err
	}
	body, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
	if err != nil {
		return err
	}
	if string(body) != "ok" {
		return fmt.Errorf("/readyz answered %q", body)
	}
	return nil
}

// VirtualNodeReady returns nil when the tenant's virtual node has condition
// Ready=True, else an error saying what is missing.
func (APITenants) VirtualNodeReady(ctx context.Context, kubeconfig []byte) error {
	cs, err := tenantClient(kubeconfig)
	if err != nil {
		return err
	}
	node, err := cs.CoreV1().Nodes().Get(ctx, controlplane.VirtualNodeName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("virtual node %s: %w", controlplane.VirtualNodeName, err)
	}
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
			return nil
		}
	}
	return fmt.Errorf("virtual node %s is not Ready yet", controlplane.VirtualNodeName)
}
