package syncer

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	discoveryv1ac "k8s.io/client-go/applyconfigurations/discovery/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/nestdev/nest/internal/atomicfile"
	"github.com/nestdev/nest/internal/syncer/contract"
	"github.com/nestdev/nest/internal/syncer/kinds"
	"github.com/nestdev/nest/internal/syncer/kinds/service"
)

// The path from a member's pods back to their tenant, when the placement
// has a member network (contract.MemberPlacement.HasMemberNetwork): through
// host node ports at the MemberCluster's nodePortAddress, or through the
// address of a host LoadBalancer. Member pods cannot route to the tenant's
// ClusterIPs, which are host addresses, so each member syncer keeps:
//
//   - on the host, a NodePort or LoadBalancer Service
//     (contract.MemberHostService) fronting the control-plane pod: the
//     tenant CoreDNS' view for this member, the member's network injector
//     (injector.go), and each TCP node port of the tenant's NodePort and
//     LoadBalancer Services, which nest-syncer already serves there
//     (kinds/service's node-port proxy);
//   - in the member namespace, Services without selectors whose
//     EndpointSlices point at that host Service (its node ports at
//     nodePortAddress, or its ports at its LoadBalancer address):
//     nest-dns (the member pods' nameserver), nest-injector (the webhook),
//     kubernetes (the tenant API server, when apiServerAddress is an IP)
//     and one per exposed tenant Service, named as its host copy would be
//     (HostName), so service variables name it;
//   - the view's hosts file (contract.MemberHostsFileName): the tenant names of
//     those Services with their ClusterIPs in the member. Every other name
//     under the cluster domain is NXDOMAIN there: member pods reach only
//     what the tenant exposes to nodes.

// maxMemberExposedPorts bounds the tenant node ports exposed to one member:
// each takes a host node port, which the tenant must not exhaust. Ports
// past it, in namespace/name order, are left out and logged.
const maxMemberExposedPorts = 16

// Member-side names and labels.
const (
	memberDNSService = "nest-dns"
	memberAPIService = "kubernetes"
)

// memberNetworkResync is how often the path is checked even when no
// tenant Service changed: a host node port reallocated, a member object
// deleted by hand.
const memberNetworkResync = 30 * time.Second

// loadBalancerPoll is how soon the path is looked at again while the host
// Service waits for its LoadBalancer address.
const loadBalancerPoll = 2 * time.Second

// nodePortName is the host Service port that carries tenant node port n.
func nodePortName(n int32) string { return "np-" + strconv.Itoa(int(n)) }

// MemberExposedServices are the tenant Services member pods may reach: the
// NodePort and LoadBalancer Services, with only their TCP ports that have a
// node port (what kinds/service's node-port proxy serves), in namespace/name order, at most
// maxMemberExposedPorts ports in all. dropped counts the ports left out.
func MemberExposedServices(services []*corev1.Service) (exposed []*corev1.Service, dropped int) {
	sorted := slices.Clone(services)
	slices.SortFunc(sorted, func(a, b *corev1.Service) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	left := maxMemberExposedPorts
	for _, svc := range sorted {
		if svc.Spec.Type != corev1.ServiceTypeNodePort && svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
			continue
		}
		var ports []corev1.ServicePort
		for _, p := range svc.Spec.Ports {
			if p.NodePort == 0 || (p.Protocol != "" && p.Protocol != corev1.ProtocolTCP) {
				continue
			}
			if left == 0 {
				dropped++
				continue
			}
			left--
			ports = append(ports, p)
		}
		if len(ports) > 0 {
			c := svc.DeepCopy()
			c.Spec.Ports = ports
			exposed = append(exposed, c)
		}
	}
	return exposed, dropped
}

// memberHostPorts are the ports of the member's host Service: the CoreDNS
// view of slot over UDP and TCP, and each exposed node port, to the same
// port of the control-plane pod.
func memberHostPorts(slot int, exposed []*corev1.Service) []corev1.ServicePort {
	ports := append(service.DNSPorts(intstr.FromInt32(int32(contract.FirstMemberDNSPort+slot))),
		corev1.ServicePort{Name: "injector", Protocol: corev1.ProtocolTCP, Port: 443, TargetPort: intstr.FromInt32(int32(contract.FirstMemberInjectorPort + slot))})
	for _, svc := range exposed {
		for _, p := range svc.Spec.Ports {
			ports = append(ports, corev1.ServicePort{Name: nodePortName(p.NodePort), Protocol: corev1.ProtocolTCP, Port: p.NodePort, TargetPort: intstr.FromInt32(p.NodePort)})
		}
	}
	return ports
}

// memberSideService is one Service memberNetwork keeps in the member, with
// where its EndpointSlice points.
type memberSideService struct {
	name string
	// tenant is the tenant DNS name that resolves to it in the view.
	tenant string
	ports  []corev1.ServicePort
	// address and targets are its one endpoint: the IP, and per port name
	// the port there.
	address string
	targets map[string]int32
}

// hostPath is where member pods reach the member's host Service: one
// address, and per port name of the Service the port there (its node port
// at nodePortAddress, or its own port at its LoadBalancer address).
type hostPath struct {
	address string
	ports   map[string]int32
}

// memberSideServices are the Services of the member namespace for the
// exposed tenant Services, the tenant API server (when apiHost is an IP)
// and DNS, all reached through host. An exposed port the host Service has
// no port for yet is left out until it has.
func (t Translator) memberSideServices(host hostPath, apiHost string, apiPort int32, exposed []*corev1.Service) []memberSideService {
	out := []memberSideService{{
		name: memberDNSService, tenant: "", ports: service.DNSPorts(intstr.IntOrString{}),
		address: host.address, targets: map[string]int32{"dns": host.ports["dns"], "dns-tcp": host.ports["dns-tcp"]},
	}}
	if np := host.ports["injector"]; np != 0 {
		out = append(out, memberSideService{
			name:    contract.MemberInjectorService,
			ports:   []corev1.ServicePort{{Name: "https", Protocol: corev1.ProtocolTCP, Port: 443}},
			address: host.address, targets: map[string]int32{"https": np},
		})
	}
	if _, err := netip.ParseAddr(apiHost); err == nil {
		out = append(out, memberSideService{
			name: memberAPIService, tenant: service.Translator{Translation: t.Translation}.APIServerRecord().Name,
			ports:   []corev1.ServicePort{{Name: "https", Protocol: corev1.ProtocolTCP, Port: 443}},
			address: apiHost, targets: map[string]int32{"https": apiPort},
		})
	}
	for _, svc := range exposed {
		s := memberSideService{name: contract.HostName(t.VirtualCluster, svc.Namespace, svc.Name), tenant: fmt.Sprintf("%s.%s.svc.%s", svc.Name, svc.Namespace, t.ClusterDomain),
			address: host.address, targets: map[string]int32{}}
		for _, p := range svc.Spec.Ports {
			np := host.ports[nodePortName(p.NodePort)]
			if np == 0 {
				continue
			}
			s.ports = append(s.ports, corev1.ServicePort{Name: p.Name, Protocol: corev1.ProtocolTCP, Port: p.Port})
			s.targets[p.Name] = np
		}
		if len(s.ports) > 0 {
			out = append(out, s)
		}
	}
	return out
}

// memberNetwork keeps the path from one member's pods back to their tenant
// (see the comment at the top of this file). It runs in the member syncer.
type memberNetwork struct {
	tr     Translator
	member string
	slot   int
	// nodePortAddress is where the member reaches the host's node ports;
	// empty with loadBalancer, when the host Service is a LoadBalancer and
	// member pods reach it at its address.
	nodePortAddress string
	loadBalancer    bool
	apiHost         string
	apiPort         int32
	// podIP is the control-plane pod's IP, where CoreDNS and the node-port
	// proxy listen; hostNamespace the tenant's namespace on the host.
	podIP, hostNamespace string
	host, memberClient   kubernetes.Interface
	tenantServices       corelisters.ServiceLister
	dnsDir               string
	last                 []byte
}

// memberNetworkKey is the one key of the member network syncer.
const memberNetworkKey = "network"

// fieldManager is nest-syncer's server-side apply identity.
const fieldManager = "nest-syncer"

// sync brings the host Service, the member Services and the view's hosts
// file in line with the tenant's exposed Services.
func (n *memberNetwork) sync(ctx context.Context, _ string) (time.Duration, error) {
	services, err := n.tenantServices.List(labels.Everything())
	if err != nil {
		return 0, err
	}
	exposed, dropped := MemberExposedServices(services)
	if dropped > 0 {
		klog.FromContext(ctx).Info("Tenant node ports not exposed to the member: too many", "member", n.member, "dropped", dropped, "max", maxMemberExposedPorts)
	}
	host, err := n.applyHostService(ctx, exposed)
	if err != nil {
		return 0, err
	}
	if host.address == "" {
		klog.FromContext(ctx).V(2).Info("Member host Service has no LoadBalancer address yet", "member", n.member)
		return loadBalancerPoll, nil
	}
	want := n.tr.memberSideServices(host, n.apiHost, n.apiPort, exposed)
	var records []service.DNSRecord
	var errs []error
	for _, s := range want {
		ip, err := n.applyMemberService(ctx, s)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if s.tenant != "" && ip != "" && ip != corev1.ClusterIPNone {
			records = append(records, service.DNSRecord{Name: s.tenant, IP: ip})
		}
	}
	errs = append(errs, n.deleteStaleMemberServices(ctx, want), n.writeView(records))
	return memberNetworkResync, errors.Join(errs...)
}

// memberNetworkLabels mark the objects memberNetwork keeps for member.
func memberNetworkLabels(vc, member string) map[string]string {
	return map[string]string{contract.LabelTenantOf: vc, contract.LabelManagedBy: contract.ManagedByValue, contract.LabelMemberNetwork: member}
}

func (n *memberNetwork) labels() map[string]string {
	return memberNetworkLabels(n.tr.VirtualCluster, n.member)
}

// applyHostService applies the member's host Service and its EndpointSlice
// (the control-plane pod) and returns where member pods reach it: a
// LoadBalancer's address and ports (no address while the host's load
// balancer has given none), or nodePortAddress and the node ports.
func (n *memberNetwork) applyHostService(ctx context.Context, exposed []*corev1.Service) (hostPath, error) {
	name := contract.MemberHostService(n.tr.VirtualCluster, n.member)
	ports := memberHostPorts(n.slot, exposed)
	typ := corev1.ServiceTypeNodePort
	if n.loadBalancer {
		typ = corev1.ServiceTypeLoadBalancer
	}
	svc, err := n.host.CoreV1().Services(n.hostNamespace).Apply(ctx,
		corev1ac.Service(name, n.hostNamespace).WithLabels(n.labels()).
			WithSpec(corev1ac.ServiceSpec().WithType(typ).WithPorts(servicePortConfigs(ports)...)),
		metav1.ApplyOptions{FieldManager: fieldManager, Force: true})
	if err != nil {
		return hostPath{}, fmt.Errorf("host Service %s for member %s: %w", name, n.member, err)
	}
	targets := map[string]int32{}
	for _, p := range ports {
		targets[p.Name] = p.TargetPort.IntVal
	}
	if err := applySlice(ctx, n.host, n.hostNamespace, svc, n.labels(), n.podIP, ports, targets); err != nil {
		return hostPath{}, fmt.Errorf("host EndpointSlice of %s: %w", name, err)
	}
	return pathTo(svc, n.nodePortAddress, n.loadBalancer), nil
}

// pathTo is where member pods reach host Service svc: with loadBalancer,
// its first LoadBalancer IP at each Service port (no address while it has
// none); else nodePortAddress at each node port.
func pathTo(svc *corev1.Service, nodePortAddress string, loadBalancer bool) hostPath {
	path := hostPath{address: nodePortAddress, ports: map[string]int32{}}
	if loadBalancer {
		path.address = ""
		for _, ing := range svc.Status.LoadBalancer.Ingress {
			if ing.IP != "" {
				path.address = ing.IP
				break
			}
		}
	}
	for _, p := range svc.Spec.Ports {
		path.ports[p.Name] = p.NodePort
		if loadBalancer {
			path.ports[p.Name] = p.Port
		}
	}
	return path
}

// applyMemberService applies one member-side Service and its EndpointSlice
// and returns its ClusterIP.
func (n *memberNetwork) applyMemberService(ctx context.Context, s memberSideService) (string, error) {
	ns := n.tr.HostNamespace
	svc, err := n.memberClient.CoreV1().Services(ns).Apply(ctx,
		corev1ac.Service(s.name, ns).WithLabels(n.labels()).
			WithSpec(corev1ac.ServiceSpec().WithType(corev1.ServiceTypeClusterIP).WithPorts(servicePortConfigs(s.ports)...)),
		metav1.ApplyOptions{FieldManager: fieldManager, Force: true})
	if err != nil {
		return "", fmt.Errorf("member Service %s: %w", s.name, err)
	}
	if err := applySlice(ctx, n.memberClient, ns, svc, n.labels(), s.address, s.ports, s.targets); err != nil {
		return "", fmt.Errorf("member EndpointSlice of %s: %w", s.name, err)
	}
	return svc.Spec.ClusterIP, nil
}

// deleteStaleMemberServices deletes the member Services memberNetwork made
// that are no longer wanted (a Service no longer exposed); their
// EndpointSlices go with them (owner references).
func (n *memberNetwork) deleteStaleMemberServices(ctx context.Context, want []memberSideService) error {
	list, err := n.memberClient.CoreV1().Services(n.tr.HostNamespace).List(ctx, metav1.ListOptions{
		LabelSelector: labels.SelectorFromSet(labels.Set{contract.LabelMemberNetwork: n.member}).String(),
	})
	if err != nil {
		return err
	}
	var errs []error
	for _, svc := range list.Items {
		if slices.ContainsFunc(want, func(s memberSideService) bool { return s.name == svc.Name }) {
			continue
		}
		if err := n.memberClient.CoreV1().Services(svc.Namespace).Delete(ctx, svc.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// writeView writes the view's hosts file when its records changed.
func (n *memberNetwork) writeView(records []service.DNSRecord) error {
	data := service.HostsFile(records)
	if bytes.Equal(data, n.last) {
		return nil
	}
	if err := atomicfile.Write(filepath.Join(n.dnsDir, contract.MemberHostsFileName(n.slot)), data, 0o644); err != nil {
		return err
	}
	n.last = data
	return nil
}

// servicePortConfigs are ports as apply configurations.
func servicePortConfigs(ports []corev1.ServicePort) []*corev1ac.ServicePortApplyConfiguration {
	out := make([]*corev1ac.ServicePortApplyConfiguration, 0, len(ports))
	for _, p := range ports {
		c := corev1ac.ServicePort().WithName(p.Name).WithProtocol(p.Protocol).WithPort(p.Port)
		if p.TargetPort.IntVal != 0 {
			c.WithTargetPort(p.TargetPort)
		}
		out = append(out, c)
	}
	return out
}

// applySlice applies the one EndpointSlice of the selector-less Service
// svc: address, with targets[name] for each of its ports, owned by svc.
func applySlice(ctx context.Context, c kubernetes.Interface, namespace string, svc *corev1.Service, lbls map[string]string, address string, ports []corev1.ServicePort, targets map[string]int32) error {
	typ := discoveryv1.AddressTypeIPv4
	if a, err := netip.ParseAddr(address); err == nil && a.Is6() {
		typ = discoveryv1.AddressTypeIPv6
	}
	sliceLabels := map[string]string{discoveryv1.LabelServiceName: svc.Name, discoveryv1.LabelManagedBy: contract.EndpointSliceManager}
	for k, v := range lbls {
		sliceLabels[k] = v
	}
	epPorts := make([]*discoveryv1ac.EndpointPortApplyConfiguration, 0, len(ports))
	for _, p := range ports {
		epPorts = append(epPorts, discoveryv1ac.EndpointPort().WithName(p.Name).WithProtocol(p.Protocol).WithPort(targets[p.Name]))
	}
	_, err := c.DiscoveryV1().EndpointSlices(namespace).Apply(ctx,
		discoveryv1ac.EndpointSlice(svc.Name, namespace).WithLabels(sliceLabels).
			WithOwnerReferences(metav1ac.OwnerReference().WithAPIVersion("v1").WithKind("Service").WithName(svc.Name).WithUID(svc.UID)).
			WithAddressType(typ).
			WithEndpoints(discoveryv1ac.Endpoint().WithAddresses(address).WithConditions(discoveryv1ac.EndpointConditions().WithReady(true))).
			WithPorts(epPorts...),
		metav1.ApplyOptions{FieldManager: fieldManager, Force: true})
	return err
}

// ensureMemberDNSService makes the member namespace's nest-dns Service,
// before any pod is placed, and returns its ClusterIP: member pods' only
// nameserver. Its EndpointSlice follows once memberNetwork has the host
// Service's node ports or LoadBalancer address.
func ensureMemberDNSService(ctx context.Context, member kubernetes.Interface, namespace string, lbls map[string]string) (string, error) {
	svc, err := member.CoreV1().Services(namespace).Apply(ctx,
		corev1ac.Service(memberDNSService, namespace).WithLabels(lbls).
			WithSpec(corev1ac.ServiceSpec().WithType(corev1.ServiceTypeClusterIP).WithPorts(servicePortConfigs(service.DNSPorts(intstr.IntOrString{}))...)),
		metav1.ApplyOptions{FieldManager: fieldManager, Force: true})
	if err != nil {
		return "", fmt.Errorf("member Service %s/%s: %w", namespace, memberDNSService, err)
	}
	if _, err := netip.ParseAddr(svc.Spec.ClusterIP); err != nil {
		return "", fmt.Errorf("member Service %s/%s has no ClusterIP (%q)", namespace, memberDNSService, svc.Spec.ClusterIP)
	}
	return svc.Spec.ClusterIP, nil
}

// wireMemberNetwork gives member syncer s its network syncer, which every
// tenant Service change wakes.
func (s *syncer) wireMemberNetwork(n *memberNetwork) error {
	n.tenantServices = s.serviceSync.TenantServices()
	// Named per member, as the member's other queues are.
	s.network = (&kinds.Context{Member: s.o.Member}).NewQueue("membernetwork", 1, n.sync, func() []string { return []string{memberNetworkKey} })
	s.registration.Queues = append(s.registration.Queues, s.network)
	_, err := s.tenantF.Core().V1().Services().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { s.network.Add(memberNetworkKey) },
		UpdateFunc: func(any, any) { s.network.Add(memberNetworkKey) },
		DeleteFunc: func(any) { s.network.Add(memberNetworkKey) },
	})
	return err
}

// removeMemberNetwork deletes a revoked member's host Service and empties
// its view: the member namespace, with its Services, is nest-manager's to
// delete.
func removeMemberNetwork(ctx context.Context, host kubernetes.Interface, hostNamespace, vc, member, dnsDir string, slot int) error {
	err := host.CoreV1().Services(hostNamespace).Delete(ctx, contract.MemberHostService(vc, member), metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete host Service %s: %w", contract.MemberHostService(vc, member), err)
	}
	return atomicfile.Write(filepath.Join(dnsDir, contract.MemberHostsFileName(slot)), service.HostsFile(nil), 0o644)
}
