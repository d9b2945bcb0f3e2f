package membergrant

import (
	"context"
	"fmt"
	"net"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/controlplane"
)

// ReasonNoPathToTenant: the MemberCluster's spec.network and the tenant's
// host Service leave the tenant's pods in the member no way to reach its
// API server or its DNS.
const ReasonNoPathToTenant = "NoPathToTenant"

// tenantPath is how a tenant's pods in a member reach it.
type tenantPath struct {
	// apiServerAddress is host:port of the tenant API server for them.
	apiServerAddress string
	// network is how they reach its DNS, injector and Services.
	network nestv1.MemberNetworkPath
}

// pathToTenant decides tenantPath for the tenant whose host Service in front
// of its API server is svc (nil when there is none yet) from mc's
// spec.network: what the platform names there is used, and the host's load
// balancer stands in for what it does not name (see
// nestv1.MemberNetwork). A tenant left without an API server address or a
// DNS is a failure that names the fields to set.
func pathToTenant(mc *nestv1.MemberCluster, svc *corev1.Service) (tenantPath, *grantFailure) {
	n := mc.Spec.Network
	loadBalancer := svc != nil && svc.Spec.Type == corev1.ServiceTypeLoadBalancer
	p := tenantPath{apiServerAddress: n.APIServerAddress}
	if p.apiServerAddress == "" {
		ip, port := loadBalancerIP(svc), apiPort(svc)
		if ip == "" || port == 0 {
			return tenantPath{}, noAPIServerAddress(mc, svc, loadBalancer)
		}
		p.apiServerAddress = net.JoinHostPort(ip, strconv.Itoa(int(port)))
	}
	switch {
	case n.NodePortAddress != "":
		p.network = nestv1.MemberNetworkNodePort
	case loadBalancer:
		p.network = nestv1.MemberNetworkLoadBalancer
	case n.DNSAddress != "":
		p.network = nestv1.MemberNetworkDNSAddress
	default:
		return tenantPath{}, &grantFailure{ReasonNoPathToTenant, fmt.Sprintf(
			"member pods would have no DNS: MemberCluster %s names neither spec.network.nodePortAddress nor spec.network.dnsAddress, and this tenant's host Service is not a LoadBalancer: the platform team must set one of them, or the VirtualCluster's spec.controlPlane.service.type must be LoadBalancer", mc.Name)}
	}
	return p, nil
}

// noAPIServerAddress is the failure of a grant whose member names no
// network.apiServerAddress while the tenant has no LoadBalancer IP to
// stand in for it.
func noAPIServerAddress(mc *nestv1.MemberCluster, svc *corev1.Service, loadBalancer bool) *grantFailure {
	if loadBalancer {
		return &grantFailure{ReasonNoPathToTenant, fmt.Sprintf(
			"MemberCluster %s names no spec.network.apiServerAddress, and the tenant's LoadBalancer Service %s has no IP address yet (member pods need an IP, not a host name): wait for the host's load balancer, or the platform team sets spec.network.apiServerAddress", mc.Name, svc.Name)}
	}
	return &grantFailure{ReasonNoPathToTenant, fmt.Sprintf(
		"MemberCluster %s names no spec.network.apiServerAddress, and this tenant's host Service is not a LoadBalancer: the platform team must set spec.network.apiServerAddress, or the VirtualCluster's spec.controlPlane.service.type must be LoadBalancer", mc.Name)}
}

// loadBalancerIP is the first IP among svc's LoadBalancer ingress points,
// or "" when it has none (or svc is nil or not a LoadBalancer).
func loadBalancerIP(svc *corev1.Service) string {
	if svc == nil || svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
		return ""
	}
	for _, ing := range svc.Status.LoadBalancer.Ingress {
		if ing.IP != "" {
			return ing.IP
		}
	}
	return ""
}

// apiPort is the port of the API server's Service (controlplane.ServiceFor
// gives it one), or 0 when svc is nil or has none.
func apiPort(svc *corev1.Service) int32 {
	if svc == nil || len(svc.Spec.Ports) == 0 {
		return 0
	}
	return svc.Spec.Ports[0].Port
}

// tenantService reads the host Service in front of vc's API server, from
// the manager's cache; nil when it does not exist yet.
func (r *Reconciler) tenantService(ctx context.Context, vc *nestv1.VirtualCluster) (*corev1.Service, error) {
	svc := &corev1.Service{}
	err := r.Get(ctx, client.ObjectKey{Namespace: vc.Namespace, Name: controlplane.NamesOf(vc).Service()}, svc)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get the API server Service of %s/%s: %w", vc.Namespace, vc.Name, err)
	}
	return svc, nil
}
