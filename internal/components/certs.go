package components

import (
	"net"
	"net/netip"
	"reflect"
	"slices"

	"github.com/nestdev/nest/internal/pki"
)

// Users and groups Kubernetes gives meaning to, and Nest's
// ClusterAdminsGroup. The RBAC bootstrap policy binds the system:kube-*
// users to their components' roles; the Node authorizer and
// NodeRestriction know a kubelet by NodeUser and NodesGroup.
const (
	// MastersGroup bypasses authorization, and API Priority and Fairness
	// exempts it (the mandatory "exempt" FlowSchema): only the control
	// plane's own components belong in it.
	MastersGroup = "system:masters"
	// ClusterAdminsGroup is the group of a tenant's administrators, as
	// kubeadm's "kubeadm:cluster-admins" is since v1.29: RBAC grants it
	// cluster-admin (addons.ClusterAdmins) instead of MastersGroup, so API
	// Priority and Fairness holds its requests in the global-default
	// priority level, and a tenant's own flood cannot starve the control
	// plane's components of the API server.
	ClusterAdminsGroup    = "nest:cluster-admins"
	NodesGroup            = "system:nodes"
	ControllerManagerUser = "system:kube-controller-manager"
	SchedulerUser         = "system:kube-scheduler"
	KubeProxyUser         = "system:kube-proxy"
	// KubeletClientUser is the API server's name toward kubelets.
	KubeletClientUser = "kube-apiserver-kubelet-client"
	// FrontProxyClientUser is the API server's name toward aggregated API
	// servers (--requestheader-allowed-names).
	FrontProxyClientUser = "front-proxy-client"
	// EtcdClientUser is the API server's name toward etcd.
	EtcdClientUser = "kube-apiserver-etcd-client"
)

// NodeUser is the user name of node's kubelet.
func NodeUser(node string) string { return "system:node:" + node }

// Leaf is a certificate a control plane issues and keeps in its PKI
// directory.
type Leaf struct {
	// CA is the certificate file of the authority that signs it.
	CA string
	// Cert and Key are the files it is kept in.
	Cert, Key string
	// Spec is what it says.
	Spec pki.CertSpec
}

// Equal reports whether two leaves are the same certificate files and spec.
// Addresses compare by value: net.IP has a 4-byte and a 16-byte form of one
// IPv4 address.
func (l Leaf) Equal(o Leaf) bool {
	if !slices.EqualFunc(l.Spec.IPs, o.Spec.IPs, net.IP.Equal) {
		return false
	}
	l.Spec.IPs, o.Spec.IPs = nil, nil
	return reflect.DeepEqual(l, o)
}

// APIServerServing is the API server's serving certificate, signed by the
// cluster CA. It names the API server as loopback clients reach it
// (localhost, 127.0.0.1), as the cluster's pods do through the kubernetes
// Service (its names, the last in clusterDomain unless that is empty, and
// its ClusterIP in serviceCIDR), and by dnsNames and ips, the caller's other
// ways in. Each address appears once.
func APIServerServing(serviceCIDR netip.Prefix, clusterDomain string, dnsNames []string, ips []net.IP) Leaf {
	dns := append([]string{"localhost"}, dnsNames...)
	dns = append(dns, "kubernetes", "kubernetes.default", "kubernetes.default.svc")
	if clusterDomain != "" {
		dns = append(dns, kubernetesServiceFQDN(clusterDomain))
	}
	addrs := append([]net.IP{net.IPv4(127, 0, 0, 1), KubernetesServiceIP(serviceCIDR).AsSlice()}, ips...)
	return Leaf{CACert, APIServerCert, APIServerKey, pki.CertSpec{CommonName: "kube-apiserver", DNSNames: dns, IPs: distinct(addrs), Usage: pki.ServerAuth}}
}

// KubernetesServiceIP is the ClusterIP kube-apiserver gives the kubernetes
// Service: the first address after serviceCIDR's network address.
func KubernetesServiceIP(serviceCIDR netip.Prefix) netip.Addr {
	return serviceCIDR.Masked().Addr().Next()
}

func kubernetesServiceFQDN(clusterDomain string) string {
	return "kubernetes.default.svc." + clusterDomain
}

func distinct(ips []net.IP) []net.IP {
	var out []net.IP
	seen := map[string]bool{}
	for _, ip := range ips {
		if !seen[ip.String()] {
			seen[ip.String()] = true
			out = append(out, ip)
		}
	}
	return out
}

// APIServerKubeletClient is the certificate the API server presents to
// kubelets (logs, exec, port-forward, metrics), signed by the authority
// whose certificate file is ca: the one the kubelets trust for clients.
func APIServerKubeletClient(ca string) Leaf {
	return Leaf{ca, KubeletClientCert, KubeletClientKey, Client(KubeletClientUser, MastersGroup)}
}

// FrontProxyClient is the certificate the API server presents to aggregated
// API servers, signed by the front-proxy CA they trust for it.
func FrontProxyClient() Leaf {
	return Leaf{FrontProxyCACert, FrontProxyClientCert, FrontProxyClientKey, Client(FrontProxyClientUser)}
}

// APIServerEtcdClient is the certificate the API server presents to etcd
// when etcd speaks TLS.
func APIServerEtcdClient() Leaf {
	return Leaf{EtcdCACert, EtcdClientCert, EtcdClientKey, Client(EtcdClientUser)}
}

// EtcdServer is etcd's serving certificate. It is a client certificate too:
// etcd's gRPC gateway presents it when it dials the member itself
// (etcd-io/etcd#16590), as kubeadm's etcd server certificate allows.
func EtcdServer() Leaf {
	return Leaf{EtcdCACert, EtcdServerCert, EtcdServerKey, LoopbackServing("etcd-server", pki.ClientAuth)}
}

// EtcdPeer is etcd's certificate toward its peers: members both serve and
// dial each other with it.
func EtcdPeer() Leaf {
	return Leaf{EtcdCACert, EtcdPeerCert, EtcdPeerKey, LoopbackServing(EtcdPeerCommonName, pki.ClientAuth)}
}

// LoopbackServing is the serving certificate of a server only loopback
// clients reach: it names localhost and 127.0.0.1. also are usages it has
// besides ServerAuth (zero for none).
func LoopbackServing(commonName string, also pki.Usage) pki.CertSpec {
	return pki.CertSpec{CommonName: commonName, DNSNames: []string{"localhost"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Usage: pki.ServerAuth | also}
}

// KubeletServing is the serving certificate of node's kubelet, reached at ip.
func KubeletServing(node string, ip net.IP) pki.CertSpec {
	return pki.CertSpec{CommonName: NodeUser(node), Organizations: []string{NodesGroup}, DNSNames: []string{node}, IPs: []net.IP{ip}, Usage: pki.ServerAuth}
}

// Client is a client certificate for user in groups.
func Client(user string, groups ...string) pki.CertSpec {
	return pki.CertSpec{CommonName: user, Organizations: groups, Usage: pki.ClientAuth}
}

// NodeClient is node's kubelet's client certificate.
func NodeClient(node string) pki.CertSpec { return Client(NodeUser(node), NodesGroup) }

// ControllerManagerClient is kube-controller-manager's client certificate.
func ControllerManagerClient() pki.CertSpec { return Client(ControllerManagerUser) }

// SchedulerClient is kube-scheduler's client certificate.
func SchedulerClient() pki.CertSpec { return Client(SchedulerUser) }

// KubeProxyClient is kube-proxy's client certificate.
func KubeProxyClient() pki.CertSpec { return Client(KubeProxyUser) }
