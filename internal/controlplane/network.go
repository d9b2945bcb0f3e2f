package controlplane

import (
	"fmt"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/components"
	"github.com/nestdev/nest/internal/ipblock"
	"github.com/nestdev/nest/internal/syncer/contract"
)

// HostNetwork is the host cluster's own address space. Tenant pods never
// reach it, except for their own virtual cluster's pods and control plane.
type HostNetwork struct {
	// PodCIDRs hold the host's pod IPs (the cluster CIDR).
	PodCIDRs []netip.Prefix
	// ServiceCIDRs hold the host's ClusterIPs. NetworkPolicies match after
	// kube-proxy's DNAT, so these matter only where a ClusterIP is not
	// rewritten, but they are never a destination tenants may reach.
	ServiceCIDRs []netip.Prefix
	// NodeCIDRs hold the host nodes' IPs: the host API server, kubelets and
	// NodePorts listen there.
	NodeCIDRs []netip.Prefix
}

// all returns every host range.
func (h HostNetwork) all() []netip.Prefix {
	return slices.Concat(h.PodCIDRs, h.ServiceCIDRs, h.NodeCIDRs)
}

// privateRanges are destinations tenant pods cannot reach unless
// spec.network.egressCIDRs names them: RFC 1918 and RFC 4193 private
// networks, link-local addresses (cloud metadata services at
// 169.254.169.254) and RFC 6598 shared address space (used by some CNIs and
// cloud NATs). Host clusters usually take their own ranges from these.
var privateRanges = []netip.Prefix{
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.168.0.0/16"),
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("fc00::/7"),
	netip.MustParsePrefix("fe80::/10"),
}

var (
	anyIPv4 = netip.MustParsePrefix("0.0.0.0/0")
	anyIPv6 = netip.MustParsePrefix("::/0")
)

// Ports of the control-plane pod that other pods and the kubelet reach.
const (
	// controllerManagerPort and schedulerPort serve /healthz for the
	// kubelet's probes, over authenticated HTTPS.
	controllerManagerPort = 10257
	schedulerPort         = 10259
)

// NodePortFirst and NodePortLast bound the tenant API server's
// --service-node-port-range (its default).
const (
	NodePortFirst int32 = 30000
	NodePortLast  int32 = 32767
)

// NetworkPoliciesFor returns the host NetworkPolicies of the virtual
// cluster's namespace, in the order of Names.NetworkPolicies:
//
//   - the tenant's pods (label nest.dev/tenant-of=<name>) take ingress only from
//     the virtual cluster's own pods and its control-plane pod (the tenant API
//     server calls webhooks and proxies to pods), and send egress only to the
//     virtual cluster's own pods, to the control-plane pod's API server port
//     and CoreDNS port, and outside the host cluster (see egressBlocks);
//   - the control-plane pod takes ingress from the tenant's pods (API server
//     and DNS), from nest-manager's namespace and the host nodes (API server,
//     and the controller-manager's and scheduler's probe ports), and, for a
//     NodePort or LoadBalancer Service, from anywhere but the host's pods on
//     the API server port; with member grants, from the same places to the
//     tenant CoreDNS' member views, the member injectors and the node
//     ports, which members reach through a host NodePort Service. Its
//     egress is open: nest-syncer
//     talks to the host API server;
//   - every other pod of the namespace takes no ingress.
//
// Rules name pod ports, not Service ports: policies match after kube-proxy's
// DNAT. The error names a spec.network.egressCIDRs entry that is no CIDR.
func NetworkPoliciesFor(vc *nestv1.VirtualCluster, o Options) ([]*networkingv1.NetworkPolicy, error) {
	return NetworkPoliciesWith(vc, o, nil)
}

// NetworkPoliciesWith is NetworkPoliciesFor for a virtual cluster that also
// has dedicated nodes whose pods have the addresses in dedicatedPodCIDRs:
// those count as the virtual cluster's own pods wherever its policies name
// them (its pods on virtual nodes and the control-plane pod take their
// traffic, and send to them).
func NetworkPoliciesWith(vc *nestv1.VirtualCluster, o Options, dedicatedPodCIDRs []netip.Prefix) ([]*networkingv1.NetworkPolicy, error) {
	n := NamesOf(vc)
	egress, err := egressBlocks(vc.Spec.Network.EgressCIDRs, o.HostNetwork)
	if err != nil {
		return nil, err
	}
	policy := func(name string, selector map[string]string, spec networkingv1.NetworkPolicySpec) *networkingv1.NetworkPolicy {
		spec.PodSelector = metav1.LabelSelector{MatchLabels: selector}
		return &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: n.Namespace, Labels: n.Labels()}, Spec: spec}
	}
	tenantPods := []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: n.TenantPodLabels()}}}
	tenantPods = append(tenantPods, ipblock.Peers(ipblock.Subtract(dedicatedPodCIDRs, nil))...)
	controlPlane := []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: n.Labels()}}}
	apiPort := ports(corev1.ProtocolTCP, Port)
	dnsPorts := append(ports(corev1.ProtocolUDP, contract.DefaultDNSPort), ports(corev1.ProtocolTCP, contract.DefaultDNSPort)...)
	// The virtual node's node ports, which nest-syncer serves on the pod IP.
	nodePorts := []networkingv1.NetworkPolicyPort{{Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromInt32(NodePortFirst)), EndPort: ptr.To[int32](NodePortLast)}}

	// What a tenant pod always has, as a node's traffic in most CNIs: its
	// control plane reaches it (the API server's proxy, webhooks, the
	// syncer's kubelet API), and it reaches its API server and DNS.
	tenant := policy(n.TenantNetworkPolicy(), n.TenantPodLabels(), networkingv1.NetworkPolicySpec{
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
		Ingress:     []networkingv1.NetworkPolicyIngressRule{{From: controlPlane}},
		Egress:      []networkingv1.NetworkPolicyEgressRule{{To: controlPlane, Ports: slices.Concat(apiPort, dnsPorts, nodePorts)}},
	})
	// What a tenant pod has while no tenant NetworkPolicy isolates it, per
	// direction: the tenant's other pods, and for egress the outside. The
	// host copies of the tenant's policies (kinds/networkpolicy) say what
	// an isolated pod may do, within the same bounds.
	openIngress := policy(n.TenantIngressNetworkPolicy(), nil, networkingv1.NetworkPolicySpec{
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
		Ingress:     []networkingv1.NetworkPolicyIngressRule{{From: tenantPods}},
	})
	openIngress.Spec.PodSelector = notIsolated(n, contract.LabelIngressIsolated)
	tenantEgress := []networkingv1.NetworkPolicyEgressRule{{To: tenantPods}}
	// A rule without peers would allow every destination: add the outside
	// world only when some of it is left.
	if len(egress) > 0 {
		tenantEgress = append(tenantEgress, networkingv1.NetworkPolicyEgressRule{To: ipblock.Peers(egress)})
	}
	openEgress := policy(n.TenantEgressNetworkPolicy(), nil, networkingv1.NetworkPolicySpec{
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
		Egress:      tenantEgress,
	})
	openEgress.Spec.PodSelector = notIsolated(n, contract.LabelEgressIsolated)

	cpIngress := []networkingv1.NetworkPolicyIngressRule{
		{From: tenantPods, Ports: slices.Concat(apiPort, dnsPorts, nodePorts)},
		// The other replicas: their etcd members as peers and their
		// etcd-member helpers as clients (with the etcd CA's certificates),
		// and their API servers to the kubelet APIs the leading syncer
		// serves on its pod IP (the virtual node's and the member nodes').
		{From: controlPlane, Ports: append(ports(corev1.ProtocolTCP, components.EtcdClientPort, components.EtcdPeerPort), kubeletPorts()...)},
		{From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{
			MatchLabels: map[string]string{corev1.LabelMetadataName: o.ManagerNamespace},
		}}}, Ports: apiPort},
	}
	// The kubelet probes from its node's IP, and kube-proxy SNATs NodePort
	// traffic that arrives on another node to that node's IP.
	if len(o.HostNetwork.NodeCIDRs) > 0 {
		cpIngress = append(cpIngress, networkingv1.NetworkPolicyIngressRule{
			From:  ipblock.Peers(ipblock.Subtract(o.HostNetwork.NodeCIDRs, nil)),
			Ports: slices.Concat(apiPort, ports(corev1.ProtocolTCP, controllerManagerPort, schedulerPort)),
		})
	}
	if typ := ServiceFor(vc, o.DefaultServiceType).Spec.Type; typ == corev1.ServiceTypeNodePort || typ == corev1.ServiceTypeLoadBalancer {
		// Tenants' clients come from anywhere outside the host cluster; a
		// LoadBalancer with externalTrafficPolicy Local keeps their address.
		cpIngress = append(cpIngress, networkingv1.NetworkPolicyIngressRule{
			From:  ipblock.Peers(ipblock.Subtract(everywhere(o.HostNetwork), o.HostNetwork.PodCIDRs)),
			Ports: apiPort,
		})
	}
	if len(vc.Spec.Members) > 0 {
		// Member pods reach the tenant's DNS views and node ports, and the
		// member's API server its injector, through a host NodePort
		// Service (contract.MemberHostService): they arrive from outside the
		// host, or from a host node after kube-proxy's SNAT.
		from := ipblock.Subtract(everywhere(o.HostNetwork), o.HostNetwork.PodCIDRs)
		cpIngress = append(cpIngress, networkingv1.NetworkPolicyIngressRule{From: ipblock.Peers(from), Ports: slices.Concat(memberPorts(), nodePorts)})
	}
	cp := policy(n.ControlPlaneNetworkPolicy(), n.Labels(), networkingv1.NetworkPolicySpec{
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
		Ingress:     cpIngress,
	})

	deny := policy(n.DenyIngressNetworkPolicy(), nil, networkingv1.NetworkPolicySpec{
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
	})
	return []*networkingv1.NetworkPolicy{tenant, openIngress, openEgress, cp, deny}, nil
}

// notIsolated selects the tenant's host pods without the isolation label.
func notIsolated(n Names, label string) metav1.LabelSelector {
	return metav1.LabelSelector{
		MatchLabels:      n.TenantPodLabels(),
		MatchExpressions: []metav1.LabelSelectorRequirement{{Key: label, Operator: metav1.LabelSelectorOpDoesNotExist}},
	}
}

// EgressBlocks are the addresses outside the host cluster that the
// VirtualCluster's pods may reach (see egressBlocks): tenant NetworkPolicy
// ipBlocks are cut to them.
func EgressBlocks(vc *nestv1.VirtualCluster, o Options) ([]networkingv1.IPBlock, error) {
	return egressBlocks(vc.Spec.Network.EgressCIDRs, o.HostNetwork)
}

// kubeletPorts are the ports of the kubelet APIs nest-syncer serves: the
// virtual node's, then one per member node.
func kubeletPorts() []networkingv1.NetworkPolicyPort {
	virtualNode, first, last := contract.KubeletPorts()
	return append(ports(corev1.ProtocolTCP, virtualNode), networkingv1.NetworkPolicyPort{
		Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromInt32(first)), EndPort: ptr.To(last),
	})
}

// memberPorts are the ports member traffic reaches on the control-plane
// pod: the tenant CoreDNS' member views, over UDP and TCP, and the member
// injectors nest-syncer serves.
func memberPorts() []networkingv1.NetworkPolicyPort {
	dns := intstr.FromInt32(contract.FirstMemberDNSPort)
	lastDNS := ptr.To(int32(contract.FirstMemberDNSPort + contract.MaxMembers - 1))
	injector := intstr.FromInt32(contract.FirstMemberInjectorPort)
	lastInjector := ptr.To(int32(contract.FirstMemberInjectorPort + contract.MaxMembers - 1))
	return []networkingv1.NetworkPolicyPort{
		{Protocol: ptr.To(corev1.ProtocolUDP), Port: &dns, EndPort: lastDNS},
		{Protocol: ptr.To(corev1.ProtocolTCP), Port: &dns, EndPort: lastDNS},
		{Protocol: ptr.To(corev1.ProtocolTCP), Port: &injector, EndPort: lastInjector},
	}
}

// egressBlocks returns the addresses outside the host cluster that tenant
// pods may reach. By default that is every IPv4 address (and every IPv6
// address when the host has IPv6 ranges) except the host's pod, Service and
// node ranges and the private ranges; with spec.network.egressCIDRs, those
// CIDRs except the host's ranges.
func egressBlocks(egressCIDRs []string, h HostNetwork) ([]networkingv1.IPBlock, error) {
	if len(egressCIDRs) == 0 {
		return ipblock.Subtract(everywhere(h), slices.Concat(h.all(), privateRanges)), nil
	}
	var allow []netip.Prefix
	for i, s := range egressCIDRs {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("spec.network.egressCIDRs[%d] %q is not a CIDR: use one such as 203.0.113.0/24", i, s)
		}
		allow = append(allow, p.Masked())
	}
	return ipblock.Subtract(allow, h.all()), nil
}

// everywhere is 0.0.0.0/0, and ::/0 when the host has an IPv6 range: a
// single-stack host's ranges say nothing about IPv6.
func everywhere(h HostNetwork) []netip.Prefix {
	out := []netip.Prefix{anyIPv4}
	if slices.ContainsFunc(h.all(), func(p netip.Prefix) bool { return p.Addr().Is6() }) {
		out = append(out, anyIPv6)
	}
	return out
}

func ports(protocol corev1.Protocol, numbers ...int32) []networkingv1.NetworkPolicyPort {
	out := make([]networkingv1.NetworkPolicyPort, 0, len(numbers))
	for _, p := range numbers {
		out = append(out, networkingv1.NetworkPolicyPort{Protocol: &protocol, Port: ptr.To(intstr.FromInt32(p))})
	}
	return out
}

// DedicatedNodesConfigMapFor returns the ConfigMap that tells nest-syncer
// about vc's dedicated nodes: their pod CIDRs, the same ranges
// NetworkPoliciesWith admits, where the syncer names pods behind the host
// copies of the tenant's Services and the tenant API server may dial any
// port; and their node IPs in the host network, where it may dial their
// kubelets (contract.DedicatedKubeletPort) through the egress proxy.
func DedicatedNodesConfigMapFor(vc *nestv1.VirtualCluster, dedicatedPodCIDRs []netip.Prefix, dedicatedNodeIPs []netip.Addr) *corev1.ConfigMap {
	n := NamesOf(vc)
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: n.DedicatedNodesConfigMap(), Namespace: n.Namespace, Labels: n.Labels()},
		Data: map[string]string{
			contract.DedicatedPodCIDRsKey: contract.FormatPodCIDRs(dedicatedPodCIDRs),
			contract.DedicatedNodeIPsKey:  contract.FormatNodeIPs(dedicatedNodeIPs),
		},
	}
}
