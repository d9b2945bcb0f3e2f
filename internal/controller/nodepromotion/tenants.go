package nodepromotion

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/agent"
	"github.com/nestdev/nest/internal/controlplane"
	"github.com/nestdev/nest/internal/pki"
	"github.com/nestdev/nest/internal/syncer/contract"
)

// Tenants reaches the tenant cluster of a VirtualCluster.
type Tenants interface {
	// For returns the tenant of the VirtualCluster key names, or
	// ErrTenantGone when the VirtualCluster is gone or being deleted.
	For(ctx context.Context, key types.NamespacedName) (*Tenant, error)
}

// ErrTenantGone: the VirtualCluster is gone or being deleted, so its tenant
// cluster is going too and a node leaving it skips the tenant's side.
var ErrTenantGone = errors.New("the VirtualCluster is gone or being deleted")

// Tenant is one tenant cluster as node promotion uses it.
type Tenant struct {
	// Client is nest-manager's client of the tenant
	// (controlplane.ManagerKubeconfig); Objects is the same as a
	// controller-runtime client, for add-ons.
	Client  kubernetes.Interface
	Objects client.Client
	// Join is what a node needs to join the tenant, without the bootstrap
	// token, which is made for each join.
	Join agent.JoinRequest
	// Unreachable says why no node can join the tenant (its API server has
	// no address nodes reach), or is nil. A node that is in the tenant can
	// still be drained and taken out.
	Unreachable error
}

// APITenants builds Tenants from the VirtualCluster's host objects: its
// status.endpoint (the address nodes reach), its PKI Secret and
// nest-manager's kubeconfig for it (controlplane.ManagerKubeconfig).
type APITenants struct {
	Client client.Client
}

// For implements Tenants.
func (a APITenants) For(ctx context.Context, key types.NamespacedName) (*Tenant, error) {
	vc := &nestv1.VirtualCluster{}
	if err := a.Client.Get(ctx, key, vc); err != nil {
		if client.IgnoreNotFound(err) == nil {
			return nil, ErrTenantGone
		}
		return nil, err
	}
	if !vc.DeletionTimestamp.IsZero() {
		return nil, ErrTenantGone
	}
	n := controlplane.NamesOf(vc)
	pkiSecret, err := a.secret(ctx, vc.Namespace, n.PKISecret())
	if err != nil {
		return nil, err
	}
	kubeconfig, err := controlplane.ManagerKubeconfig(ctx, a.Client, vc)
	if err != nil {
		return nil, err
	}
	cs, objects, err := tenantClients(kubeconfig)
	if err != nil {
		return nil, err
	}
	// The Service's own type: an unset spec type is nest-manager's
	// --default-service-type.
	svc := &corev1.Service{}
	if err := a.Client.Get(ctx, types.NamespacedName{Namespace: vc.Namespace, Name: n.Service()}, svc); client.IgnoreNotFound(err) != nil {
		return nil, err
	}
	t := &Tenant{Client: cs, Objects: objects, Unreachable: nodesReachable(vc, svc.Spec.Type), Join: agent.JoinRequest{
		Server:             vc.Status.Endpoint,
		CACertPEM:          pkiSecret.Data[controlplane.CACert],
		KubeletClientCAPEM: pkiSecret.Data[controlplane.KubeletClientCACert],
		ClusterDomain:      controlplane.ClusterDomain(vc),
		ServerTLSBootstrap: true,
	}}
	if t.Unreachable == nil {
		t.Unreachable = clusterCARollingOut(vc, t.Join.CACertPEM)
	}
	if t.Unreachable == nil {
		t.Join.ClusterDNS, t.Unreachable = clusterDNS(ctx, cs)
	}
	return t, nil
}

// clusterDNS is the ClusterIP of the tenant's kube-system/kube-dns Service,
// which a dedicated node's kubelet gives its pods: the node runs the
// tenant's kube-proxy, which serves tenant Services only, so the host
// ClusterIP virtual-node pods use may not route there. nest-syncer keeps the
// Service (syncer.ClusterDNSService); until it has, no node can join.
func clusterDNS(ctx context.Context, cs kubernetes.Interface) ([]string, error) {
	svc, err := cs.CoreV1().Services(contract.ClusterDNSNamespace).Get(ctx, contract.ClusterDNSName, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("the tenant's cluster DNS Service %s/%s, whose address nodes give their pods: %w", contract.ClusterDNSNamespace, contract.ClusterDNSName, err)
	}
	if ip := svc.Spec.ClusterIP; ip != "" && ip != corev1.ClusterIPNone {
		return []string{ip}, nil
	}
	return nil, fmt.Errorf("the tenant's cluster DNS Service %s/%s has no ClusterIP, which nodes give their pods as their DNS server", contract.ClusterDNSNamespace, contract.ClusterDNSName)
}

// nodesReachable checks that nodes can reach vc's API server, whose
// Service is of type svcType ("" while it is not made yet): they are
// outside the host's Services, so only a NodePort or LoadBalancer address
// (status.endpoint) will do.
func nodesReachable(vc *nestv1.VirtualCluster, svcType corev1.ServiceType) error {
	switch svcType {
	case corev1.ServiceTypeNodePort, corev1.ServiceTypeLoadBalancer:
	case "":
		return errors.New("the tenant API server has no Service yet, where nodes reach it")
	default:
		return fmt.Errorf("spec.controlPlane.service.type: dedicated nodes need NodePort or LoadBalancer, where a node outside the host reaches the tenant API server; it is %s (unset: nest-manager's --default-service-type)", svcType)
	}
	if vc.Status.Endpoint == "" {
		return errors.New("the VirtualCluster has no status.endpoint yet, where nodes reach its API server")
	}
	return nil
}

func (a APITenants) secret(ctx context.Context, namespace, name string) (*corev1.Secret, error) {
	s := &corev1.Secret{}
	if err := a.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, s); err != nil {
		return nil, fmt.Errorf("get Secret %s/%s: %w", namespace, name, err)
	}
	return s, nil
}

// tenantClients are clients of the tenant for kubeconfig, whose calls time out.
func tenantClients(kubeconfig []byte) (*kubernetes.Clientset, client.Client, error) {
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		return nil, nil, fmt.Errorf("parse the tenant's kubeconfig: %w", err)
	}
	cfg.Timeout = 15 * time.Second
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, err
	}
	objects, err := client.New(cfg, client.Options{})
	return cs, objects, err
}

// clusterCARollingOut is nil unless vc's cluster CA rotates and bundle,
// the PKI Secret's ca.crt as read, is not the bundle every control-plane
// replica runs with in the rotation's phase (caRotation.rolledOutCAHash):
// a kubelet that bootstrapped now could get a client certificate from the
// signer the phase replaces, and a cache read late could hand it the
// bundle of another phase.
func clusterCARollingOut(vc *nestv1.VirtualCluster, bundle []byte) error {
	st := vc.Status.Certificates
	if st == nil || st.CARotation == nil || !slices.Contains(st.CARotation.Authorities, nestv1.CACluster) {
		return nil
	}
	if rot := st.CARotation; rot.RolledOutCAHash != pki.BundleHash(bundle) {
		return fmt.Errorf("the tenant's cluster CA rotation %s is rolling out phase %s: nodes join once every control-plane replica runs with it", rot.Request, rot.Phase)
	}
	return nil
}
