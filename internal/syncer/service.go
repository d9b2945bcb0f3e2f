package syncer

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// HostService returns the host Service for a tenant Service, and false for
// Services the syncer leaves alone: the tenant API server's own "kubernetes"
// Service, ExternalName Services and Services without a selector, whose
// endpoints the host cannot compute.
//
// The host Service is always a ClusterIP Service: exposure outside the host
// is the host's decision. Its selector adds the tenant labels every host pod
// of the namespace carries, so it never selects another tenant's pods.
func (t Translator) HostService(s *corev1.Service) (*corev1.Service, bool) {
	if (s.Namespace == metav1.NamespaceDefault && s.Name == "kubernetes") ||
		s.Spec.Type == corev1.ServiceTypeExternalName || len(s.Spec.Selector) == 0 {
		return nil, false
	}
	selector := maps.Clone(s.Spec.Selector)
	maps.Copy(selector, hostLabels(t.VirtualCluster, s.Namespace))
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
	if s.Spec.ClusterIP == corev1.ClusterIPNone {
		spec.ClusterIP = corev1.ClusterIPNone
	}
	return &corev1.Service{ObjectMeta: t.copyMeta(&s.ObjectMeta), Spec: spec}, true
}

// ServiceNeedsUpdate reports whether the host Service have differs from want
// in what the syncer controls. The ClusterIP is the host's and never compared.
func ServiceNeedsUpdate(have, want *corev1.Service) bool {
	if !maps.Equal(have.Spec.Selector, want.Spec.Selector) || have.Spec.SessionAffinity != want.Spec.SessionAffinity ||
		have.Spec.PublishNotReadyAddresses != want.Spec.PublishNotReadyAddresses || len(have.Spec.Ports) != len(want.Spec.Ports) {
		return true
	}
	for i, p := range want.Spec.Ports {
		h := have.Spec.Ports[i]
		if h.Name != p.Name || h.Port != p.Port || h.TargetPort != p.TargetPort || h.Protocol != p.Protocol {
			return true
		}
	}
	return false
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
// publishNotReadyAddresses), and an endpoint with a hostname, such as a
// StatefulSet pod, also as <hostname>.<service>. The addresses are tenant pod
// IPs, which are the host pod IPs the syncer reported.
func (t Translator) HeadlessRecords(svc *corev1.Service, endpointSlices []*discoveryv1.EndpointSlice) []DNSRecord {
	if svc.Spec.ClusterIP != corev1.ClusterIPNone {
		return nil
	}
	name := fmt.Sprintf("%s.%s.svc.%s", svc.Name, svc.Namespace, t.ClusterDomain)
	var records []DNSRecord
	for _, slice := range endpointSlices {
		if slice.AddressType != discoveryv1.AddressTypeIPv4 && slice.AddressType != discoveryv1.AddressTypeIPv6 {
			continue
		}
		for _, ep := range slice.Endpoints {
			if !svc.Spec.PublishNotReadyAddresses && !ptr.Deref(ep.Conditions.Ready, true) {
				continue
			}
			for _, ip := range ep.Addresses {
				records = append(records, DNSRecord{Name: name, IP: ip})
				if ep.Hostname != nil && *ep.Hostname != "" {
					records = append(records, DNSRecord{Name: *ep.Hostname + "." + name, IP: ip})
				}
			}
		}
	}
	return records
}

// APIServerRecord names the tenant API server as pods expect to find it.
func (t Translator) APIServerRecord() DNSRecord {
	return DNSRecord{Name: "kubernetes.default.svc." + t.ClusterDomain, IP: t.APIServerHost}
}

// Corefile is CoreDNS' configuration for the tenant: the hosts file the
// syncer writes (hostsPath) answers every name under the cluster domain, and
// nothing is forwarded anywhere else. CoreDNS serves on port, and /health on
// healthPort and /ready on the next port, both on loopback only: other pods
// must not reach them.
func Corefile(port int, hostsPath, clusterDomain string, healthPort int) string {
	return fmt.Sprintf(`.:%d {
    errors
    health 127.0.0.1:%d
    ready 127.0.0.1:%d
    hosts %s %s {
        reload 1s
        ttl 5
    }
    loadbalance
}
`, port, healthPort, healthPort+1, hostsPath, clusterDomain)
}
