package virtualcluster

import (
	"context"
	"fmt"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/addons"
	"github.com/nestdev/nest/internal/controlplane"
)

// APITenants talks to tenant API servers with their in-cluster admin kubeconfig.
type APITenants struct {
	// CoreDNSImage is the CoreDNS image installed in tenant clusters.
	CoreDNSImage string
}

var _ TenantChecker = APITenants{}

func restConfig(kubeconfig []byte) (*rest.Config, error) {
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("parse tenant kubeconfig: %w", err)
	}
	cfg.Timeout = 5 * time.Second
	return cfg, nil
}

// Ready returns nil when the tenant API server's /readyz answers "ok".
func (APITenants) Ready(ctx context.Context, kubeconfig []byte) error {
	cfg, err := restConfig(kubeconfig)
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
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

// InstallAddons creates CoreDNS in the tenant cluster, with its Service at the
// tenth address of the tenant's Service CIDR, as kubeadm places it.
func (t APITenants) InstallAddons(ctx context.Context, kubeconfig []byte, vc *nestv1.VirtualCluster) error {
	cfg, err := restConfig(kubeconfig)
	if err != nil {
		return err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme.Scheme})
	if err != nil {
		return err
	}
	cidr := vc.Spec.ServiceCIDR
	if cidr == "" {
		cidr = "10.96.0.0/16"
	}
	dnsIP, err := controlplane.NthServiceIP(cidr, 10)
	if err != nil {
		return err
	}
	domain := vc.Spec.ClusterDomain
	if domain == "" {
		domain = "cluster.local"
	}
	return addons.Apply(ctx, c, addons.CoreDNS(addons.DNSOptions{Image: t.CoreDNSImage, ClusterDomain: domain, ServiceIP: dnsIP, Replicas: 1}))
}
