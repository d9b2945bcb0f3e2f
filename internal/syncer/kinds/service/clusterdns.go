package service

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/utils/ptr"

	"github.com/nestdev/nest/internal/syncer/contract"
	"github.com/nestdev/nest/internal/syncer/kinds/endpointslice"
)

// The tenant's cluster DNS Service. Pods on virtual nodes reach the tenant
// CoreDNS at a host ClusterIP (DNSServer) that the host's kube-proxy serves.
// A dedicated node (a host node promoted into the tenant) runs the tenant's
// own kube-proxy instead, which serves only tenant Services: so the syncer
// keeps kube-system/kube-dns in the tenant, as kubeadm clusters have it,
// without a selector and with one endpoint, the control-plane pod. It asks
// for DNSServer as its ClusterIP, so both kinds of node use one address;
// node promotion gives a dedicated node's kubelet whatever ClusterIP the
// Service got.
const (
	// clusterDNSSlice is the name of its one EndpointSlice.
	clusterDNSSlice = "kube-dns-nest"
)

// clusterDNSPorts are the Service's ports: DNS, and HTTPS for the tenant API
// server, because DNSServer also answers for kubernetes.default.svc (see
// APIServerRecord), as the host's in-cluster Service does.
func clusterDNSPorts() []corev1.ServicePort {
	return append(DNSPorts(intstr.FromInt32(contract.DefaultDNSPort)), corev1.ServicePort{Name: "https", Port: 443, Protocol: corev1.ProtocolTCP})
}

// DNSPorts are a DNS Service's ports: "dns" over UDP and "dns-tcp" over
// TCP, both 53, to target (none when it is the zero value).
func DNSPorts(target intstr.IntOrString) []corev1.ServicePort {
	return []corev1.ServicePort{
		{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: target},
		{Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP, TargetPort: target},
	}
}

// ClusterDNSService returns the tenant Service kube-system/kube-dns the
// syncer keeps, asking for the ClusterIP DNSServer.
func (t Translator) ClusterDNSService() *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: contract.ClusterDNSName, Namespace: contract.ClusterDNSNamespace, Labels: clusterDNSLabels()},
		Spec: corev1.ServiceSpec{
			Type:      corev1.ServiceTypeClusterIP,
			ClusterIP: t.DNSServer,
			Ports:     clusterDNSPorts(),
		},
	}
}

// ClusterDNSEndpointSlice returns the Service's EndpointSlice: the
// control-plane pod at podIP, with CoreDNS' port and, when apiPort is not
// 0, the API server's port there.
func ClusterDNSEndpointSlice(podIP string, apiPort int32) *discoveryv1.EndpointSlice {
	labels := clusterDNSLabels()
	labels[discoveryv1.LabelServiceName] = contract.ClusterDNSName
	labels[discoveryv1.LabelManagedBy] = contract.EndpointSliceManager
	var ports []discoveryv1.EndpointPort
	for _, p := range clusterDNSPorts() {
		port := p.TargetPort.IntVal
		if p.Name == "https" {
			if apiPort == 0 {
				continue
			}
			port = apiPort
		}
		ports = append(ports, discoveryv1.EndpointPort{Name: ptr.To(p.Name), Protocol: ptr.To(p.Protocol), Port: ptr.To(port)})
	}
	return &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: clusterDNSSlice, Namespace: contract.ClusterDNSNamespace, Labels: labels},
		AddressType: addressType(podIP),
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{podIP}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:       ports,
	}
}

func clusterDNSLabels() map[string]string {
	return map[string]string{"k8s-app": "kube-dns", "kubernetes.io/name": "CoreDNS", contract.LabelManagedBy: contract.ManagedByValue}
}

// IsClusterDNSService reports whether svc is the tenant cluster DNS Service
// the syncer keeps, which has no host copy: its endpoint is the control-plane
// pod, which host pods reach at DNSServer already.
func IsClusterDNSService(svc *corev1.Service) bool {
	return svc.Namespace == contract.ClusterDNSNamespace && svc.Name == contract.ClusterDNSName && svc.Labels[contract.LabelManagedBy] == contract.ManagedByValue
}

func addressType(ip string) discoveryv1.AddressType {
	if addr, err := netip.ParseAddr(ip); err == nil && addr.Is6() && !addr.Is4In6() {
		return discoveryv1.AddressTypeIPv6
	}
	return discoveryv1.AddressTypeIPv4
}

// clusterDNSSyncer keeps the tenant's kube-system/kube-dns Service and its
// EndpointSlice. It has one key.
type clusterDNSSyncer struct {
	tr       Translator
	podIP    string
	tenant   kubernetes.Interface
	services corelisters.ServiceLister
	slices   discoverylisters.EndpointSliceLister
}

// clusterDNSKey is the one key of the cluster DNS syncer.
const clusterDNSKey = contract.ClusterDNSNamespace + "/" + contract.ClusterDNSName

// sync creates the Service when it is missing, and keeps its EndpointSlice
// pointing at this control-plane pod. A kube-dns Service of the tenant's
// own (without the syncer's label) is left alone, with no slice: one the
// syncer wrote before is deleted.
func (c *clusterDNSSyncer) sync(ctx context.Context, _ string) (time.Duration, error) {
	svc, err := c.services.Services(contract.ClusterDNSNamespace).Get(contract.ClusterDNSName)
	switch {
	case apierrors.IsNotFound(err):
		if svc, err = c.createService(ctx); err != nil {
			return 0, err
		}
	case err != nil:
		return 0, err
	}
	if !IsClusterDNSService(svc) {
		// A slice of ours left from before would add the control-plane pod
		// to the endpoints of the tenant's own Service.
		return 0, c.deleteSlice(ctx)
	}
	return 0, c.applySlice(ctx)
}

// deleteSlice deletes the syncer's EndpointSlice, if there is one.
func (c *clusterDNSSyncer) deleteSlice(ctx context.Context) error {
	have, err := c.slices.EndpointSlices(contract.ClusterDNSNamespace).Get(clusterDNSSlice)
	if apierrors.IsNotFound(err) || (err == nil && have.Labels[contract.LabelManagedBy] != contract.ManagedByValue) {
		return nil
	}
	if err == nil {
		err = c.tenant.DiscoveryV1().EndpointSlices(contract.ClusterDNSNamespace).Delete(ctx, clusterDNSSlice,
			metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &have.UID}})
	}
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("delete EndpointSlice %s/%s, left from the syncer's cluster DNS Service: %w", contract.ClusterDNSNamespace, clusterDNSSlice, err)
	}
	return nil
}

// createService creates the Service with DNSServer as its ClusterIP, or,
// when the tenant cannot give that address (outside its Service range, or
// taken), with one the tenant allocates.
func (c *clusterDNSSyncer) createService(ctx context.Context) (*corev1.Service, error) {
	want := c.tr.ClusterDNSService()
	client := c.tenant.CoreV1().Services(contract.ClusterDNSNamespace)
	created, err := client.Create(ctx, want, metav1.CreateOptions{})
	if apierrors.IsInvalid(err) && want.Spec.ClusterIP != "" {
		want.Spec.ClusterIP = ""
		created, err = client.Create(ctx, want, metav1.CreateOptions{})
	}
	if err != nil {
		return nil, fmt.Errorf("create the tenant's cluster DNS Service %s: %w", clusterDNSKey, err)
	}
	return created, nil
}

// applySlice writes the EndpointSlice when it is missing or differs.
func (c *clusterDNSSyncer) applySlice(ctx context.Context) error {
	want := ClusterDNSEndpointSlice(c.podIP, c.apiServerPort())
	client := c.tenant.DiscoveryV1().EndpointSlices(contract.ClusterDNSNamespace)
	have, err := c.slices.EndpointSlices(contract.ClusterDNSNamespace).Get(clusterDNSSlice)
	switch {
	case apierrors.IsNotFound(err):
		_, err = client.Create(ctx, want, metav1.CreateOptions{})
	case err != nil:
	case have.AddressType != want.AddressType:
		// Immutable: the next pass creates it anew.
		err = client.Delete(ctx, have.Name, metav1.DeleteOptions{})
	case endpointslice.Differs(have, want):
		upd := have.DeepCopy()
		// The slice is the syncer's alone: what it does not write goes.
		upd.Labels, upd.Annotations, upd.OwnerReferences = want.Labels, want.Annotations, want.OwnerReferences
		upd.Endpoints, upd.Ports = want.Endpoints, want.Ports
		_, err = client.Update(ctx, upd, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("EndpointSlice %s/%s of the tenant's cluster DNS: %w", contract.ClusterDNSNamespace, clusterDNSSlice, err)
	}
	return nil
}

// apiServerPort is the tenant API server's port in the control-plane pod,
// as the API server publishes it in the "kubernetes" Service's slice; 0
// until it has.
func (c *clusterDNSSyncer) apiServerPort() int32 {
	s, err := c.slices.EndpointSlices(metav1.NamespaceDefault).Get("kubernetes")
	if err != nil {
		return 0
	}
	for _, p := range s.Ports {
		if p.Name != nil && *p.Name == "https" && p.Port != nil {
			return *p.Port
		}
	}
	return 0
}
