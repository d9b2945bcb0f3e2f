// Package service copies tenant Services to the host and makes the tenant's
// DNS from them: the hosts and zone files the tenant's CoreDNS serves, the
// cluster DNS Service kube-system/kube-dns, and the tenant's node ports on
// the virtual node's address. Services, their DNS and node ports are the
// host syncer's alone; member syncers read Address only.
package service

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nestdev/nest/internal/syncer/contract"
	"github.com/nestdev/nest/internal/syncer/kinds/hostcopy"
)

// Translator is what Service translation knows of the virtual cluster,
// from nest-syncer's flags.
type Translator struct {
	contract.Translation
}

// HostService returns the host Service for a tenant Service, and false for
// Services the syncer leaves alone: the tenant API server's own "kubernetes"
// Service, the cluster DNS Service the syncer keeps (IsClusterDNSService)
// and ExternalName Services. A Service without a selector gets a
// host copy without one, whose endpoints the syncer copies from the
// tenant's (kinds/endpointslice).
//
// The host Service is always a ClusterIP Service: exposure outside the host
// is the host's decision. Its selector adds the tenant labels every host pod
// of the namespace carries, so it never selects another tenant's pods.
func (t Translator) HostService(s *corev1.Service) (*corev1.Service, bool) {
	if (s.Namespace == metav1.NamespaceDefault && s.Name == "kubernetes") || IsClusterDNSService(s) ||
		s.Spec.Type == corev1.ServiceTypeExternalName {
		return nil, false
	}
	var selector map[string]string
	if len(s.Spec.Selector) > 0 {
		selector = maps.Clone(s.Spec.Selector)
		maps.Copy(selector, contract.HostLabels(t.VirtualCluster, s.Namespace))
	}
	ports := make([]corev1.ServicePort, 0, len(s.Spec.Ports))
	for _, p := range s.Spec.Ports {
		ports = append(ports, corev1.ServicePort{Name: p.Name, Protocol: p.Protocol, AppProtocol: p.AppProtocol, Port: p.Port, TargetPort: p.TargetPort})
	}
	spec := corev1.ServiceSpec{
		Type:                     corev1.ServiceTypeClusterIP,
		Selector:                 selector,
		Ports:                    ports,
		SessionAffinity:          s.Spec.SessionAffinity,
		SessionAffinityConfig:    s.Spec.SessionAffinityConfig,
		PublishNotReadyAddresses: s.Spec.PublishNotReadyAddresses,
	}
	switch {
	case s.Spec.ClusterIP == corev1.ClusterIPNone:
		spec.ClusterIP = corev1.ClusterIPNone
	case t.SameClusterIP(s.Spec.ClusterIP):
		spec.ClusterIP = s.Spec.ClusterIP
	}
	return &corev1.Service{ObjectMeta: hostcopy.Meta(t.VirtualCluster, t.HostNamespace, &s.ObjectMeta), Spec: spec}, true
}

// SameClusterIP reports whether a host copy asks for the tenant Service's own
// ClusterIP ip. With one address in both clusters, what tenant pods read
// from the API (spec.clusterIP, as conformance specs and many clients do)
// is what the host routes. It asks only for an address in a host Service
// range and above the range's static band, the low addresses upstream keeps
// for Services that name their ClusterIP (k8s.io/kubernetes
// pkg/registry/core/service/ipallocator): a tenant cannot take an address
// the host's admins may later assign. When the host has given the address
// away, the copy gets one of its own (see SyncService).
func (t Translator) SameClusterIP(ip string) bool {
	addr, err := netip.ParseAddr(ip)
	if err != nil {
		return false
	}
	for _, cidr := range t.HostServiceCIDRs {
		if cidr.Contains(addr) && offsetIn(cidr, addr) > staticBand(cidr) {
			return true
		}
	}
	return false
}

// staticBand is the number of addresses at the start of a Service range
// upstream's allocator reserves for static ClusterIPs: a sixteenth of the
// range, at least 16 and at most 256 (none for ranges under 16).
func staticBand(cidr netip.Prefix) uint64 {
	bits := cidr.Addr().BitLen() - cidr.Bits()
	if bits >= 63 {
		return 256
	}
	size := uint64(1) << bits
	if size < 16 {
		return 0
	}
	return min(max(size/16, 16), 256)
}

// offsetIn is addr's distance from the start of cidr (IPv4 and the low 64
// bits of IPv6).
func offsetIn(cidr netip.Prefix, addr netip.Addr) uint64 {
	a, b := addr.As16(), cidr.Masked().Addr().As16()
	var off uint64
	for i := 8; i < 16; i++ {
		off = off<<8 | uint64(a[i]-b[i])
	}
	return off
}

// ServiceNeedsUpdate reports whether the host Service have differs from want
// in what the syncer controls. The ClusterIP is the host's and never compared.
func ServiceNeedsUpdate(have, want *corev1.Service) bool {
	if !maps.Equal(have.Spec.Selector, want.Spec.Selector) || have.Spec.SessionAffinity != want.Spec.SessionAffinity ||
		clientIPTimeout(have) != clientIPTimeout(want) ||
		have.Spec.PublishNotReadyAddresses != want.Spec.PublishNotReadyAddresses || len(have.Spec.Ports) != len(want.Spec.Ports) {
		return true
	}
	for i, p := range want.Spec.Ports {
		h := have.Spec.Ports[i]
		if h.Name != p.Name || h.Port != p.Port || h.TargetPort != p.TargetPort || h.Protocol != p.Protocol ||
			ptr.Deref(h.AppProtocol, "") != ptr.Deref(p.AppProtocol, "") {
			return true
		}
	}
	return false
}

// clientIPTimeout is how long a ClientIP session affinity lasts, in seconds,
// with the API server's default for an unset one (3 hours); 0 without
// ClientIP affinity.
func clientIPTimeout(s *corev1.Service) int32 {
	if s.Spec.SessionAffinity != corev1.ServiceAffinityClientIP {
		return 0
	}
	if c := s.Spec.SessionAffinityConfig; c != nil && c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil {
		return *c.ClientIP.TimeoutSeconds
	}
	return corev1.DefaultClientIPServiceAffinitySeconds
}

// DNSRecord maps one tenant name to the host address that serves it.
type DNSRecord struct {
	Name string
	IP   string
}

// HostsFile renders records in /etc/hosts format for CoreDNS' hosts plugin,
// sorted so an unchanged set renders to identical bytes.
func HostsFile(records []DNSRecord) []byte {
	lines := make([]string, 0, len(records))
	for _, r := range records {
		lines = append(lines, r.IP+" "+r.Name)
	}
	slices.Sort(lines)
	var b strings.Builder
	b.WriteString("# Written by nest-syncer: tenant Service names and their host ClusterIPs or, headless, pod IPs.\n")
	for _, l := range lines {
		b.WriteString(l + "\n")
	}
	return []byte(b.String())
}

// ServiceRecord is the DNS record of a tenant Service whose host copy has
// the ClusterIP hostIP, and false for headless Services (see
// HeadlessRecords).
func (t Translator) ServiceRecord(namespace, name, hostIP string) (DNSRecord, bool) {
	if hostIP == "" || hostIP == corev1.ClusterIPNone {
		return DNSRecord{}, false
	}
	return DNSRecord{Name: fmt.Sprintf("%s.%s.svc.%s", name, namespace, t.ClusterDomain), IP: hostIP}, true
}

// HeadlessRecords are the DNS records of a tenant headless Service, as the
// Kubernetes DNS specification gives them: the Service name resolves to the
// address of every ready endpoint (every endpoint with
// publishNotReadyAddresses), and each endpoint also as <name>.<service>,
// where name is its hostname, such as a StatefulSet pod's, or its address
// with dashes. The addresses are tenant pod IPs, which are the host pod IPs
// the syncer reported.
func (t Translator) HeadlessRecords(svc *corev1.Service, endpointSlices []*discoveryv1.EndpointSlice) []DNSRecord {
	if svc.Spec.ClusterIP != corev1.ClusterIPNone {
		return nil
	}
	name := fmt.Sprintf("%s.%s.svc.%s", svc.Name, svc.Namespace, t.ClusterDomain)
	var records []DNSRecord
	for _, ep := range t.headlessEndpoints(svc, endpointSlices) {
		records = append(records, DNSRecord{Name: name, IP: ep.ip}, DNSRecord{Name: ep.name + "." + name, IP: ep.ip})
	}
	return records
}

// headlessEndpoint is one address of a headless Service with its DNS label
// and ports.
type headlessEndpoint struct {
	name, ip string
	ports    []discoveryv1.EndpointPort
}

// headlessEndpoints lists the addresses a headless Service's names resolve
// to: ready ones, or all with publishNotReadyAddresses.
func (t Translator) headlessEndpoints(svc *corev1.Service, endpointSlices []*discoveryv1.EndpointSlice) []headlessEndpoint {
	var out []headlessEndpoint
	for _, slice := range endpointSlices {
		if slice.AddressType != discoveryv1.AddressTypeIPv4 && slice.AddressType != discoveryv1.AddressTypeIPv6 {
			continue
		}
		for _, ep := range slice.Endpoints {
			if !svc.Spec.PublishNotReadyAddresses && !ptr.Deref(ep.Conditions.Ready, true) {
				continue
			}
			for _, ip := range ep.Addresses {
				label := strings.NewReplacer(".", "-", ":", "-").Replace(ip)
				if ep.Hostname != nil && *ep.Hostname != "" {
					label = *ep.Hostname
				}
				out = append(out, headlessEndpoint{name: label, ip: ip, ports: slice.Ports})
			}
		}
	}
	return out
}

// APIServerRecord names the tenant API server as pods expect to find it.
func (t Translator) APIServerRecord() DNSRecord {
	return DNSRecord{Name: "kubernetes.default.svc." + t.ClusterDomain, IP: t.APIServerHost}
}

// ZoneRecords are the records of a tenant Service the hosts file cannot
// hold, in zone file syntax, as the Kubernetes DNS specification gives them:
// an ExternalName Service's CNAME; for every named port of a Service with a
// ClusterIP, _<port>._<protocol>.<svc>.<ns>.svc.<domain> SRV pointing at the
// Service's name; for a headless Service, one such SRV per ready endpoint,
// pointing at the endpoint's name (see HeadlessRecords).
func (t Translator) ZoneRecords(svc *corev1.Service, endpointSlices []*discoveryv1.EndpointSlice) []string {
	name := fmt.Sprintf("%s.%s.svc.%s.", svc.Name, svc.Namespace, t.ClusterDomain)
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		if svc.Spec.ExternalName == "" {
			return nil
		}
		return []string{fmt.Sprintf("%s 5 IN CNAME %s.", name, strings.TrimSuffix(svc.Spec.ExternalName, "."))}
	}
	srv := func(port string, protocol corev1.Protocol, number int32, target string) string {
		if protocol == "" {
			protocol = corev1.ProtocolTCP
		}
		return fmt.Sprintf("_%s._%s.%s 5 IN SRV 0 100 %d %s", port, strings.ToLower(string(protocol)), name, number, target)
	}
	var records []string
	if svc.Spec.ClusterIP != corev1.ClusterIPNone {
		for _, p := range svc.Spec.Ports {
			if p.Name != "" {
				records = append(records, srv(p.Name, p.Protocol, p.Port, name))
			}
		}
		return records
	}
	for _, ep := range t.headlessEndpoints(svc, endpointSlices) {
		for _, p := range ep.ports {
			if p.Name != nil && *p.Name != "" && p.Port != nil {
				records = append(records, srv(*p.Name, ptr.Deref(p.Protocol, corev1.ProtocolTCP), *p.Port, ep.name+"."+name))
			}
		}
	}
	return records
}
