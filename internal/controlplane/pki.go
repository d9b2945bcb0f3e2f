package controlplane

import (
	"bytes"
	"crypto/x509"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/nestdev/nest/internal/pki"
	"github.com/nestdev/nest/internal/syncer"
)

// Files of the PKI Secret, mounted at PKIDir in the control-plane pod.
const (
	PKIDir = "/etc/kubernetes/pki"

	CACert, CAKey                     = "ca.crt", "ca.key"
	EtcdCACert, EtcdCAKey             = "etcd-ca.crt", "etcd-ca.key"
	FrontProxyCACert, FrontProxyCAKey = "front-proxy-ca.crt", "front-proxy-ca.key"
	// KubeletClientCACert signs only the API server's kubelet client
	// certificate, and the virtual node trusts nothing else. The tenant's CSR
	// signer uses CACert, so a tenant cannot mint a certificate the virtual
	// node's kubelet API accepts.
	KubeletClientCACert, KubeletClientCAKey   = "kubelet-client-ca.crt", "kubelet-client-ca.key"
	ServiceAccountKey, ServiceAccountPub      = "sa.key", "sa.pub"
	APIServerCert, APIServerKey               = "apiserver.crt", "apiserver.key"
	KubeletClientCert, KubeletClientKey       = "apiserver-kubelet-client.crt", "apiserver-kubelet-client.key"
	EtcdClientCert, EtcdClientKey             = "apiserver-etcd-client.crt", "apiserver-etcd-client.key"
	FrontProxyClientCert, FrontProxyClientKey = "front-proxy-client.crt", "front-proxy-client.key"
	EtcdServerCert, EtcdServerKey             = "etcd-server.crt", "etcd-server.key"
	EtcdPeerCert, EtcdPeerKey                 = "etcd-peer.crt", "etcd-peer.key"
	// SyncerServingCert serves the virtual node's kubelet API on loopback.
	SyncerServingCert, SyncerServingKey = "nest-syncer-serving.crt", "nest-syncer-serving.key"

	frontProxyClientName = "front-proxy-client"
)

// Endpoints are the addresses the tenant API server is reached at; its serving
// certificate must name all of them.
type Endpoints struct {
	// ServiceIP is the ClusterIP of the host Service.
	ServiceIP string
	// ExternalIPs are spec.externalIPs.
	ExternalIPs []string
	// NodeIPs are the host nodes' addresses, for NodePort Services.
	NodeIPs []string
	// LoadBalancerIPs are the host Service's load-balancer addresses.
	LoadBalancerIPs []string
	// HostClusterDomain is the host cluster's DNS suffix, such as cluster.local.
	HostClusterDomain string
	// TenantClusterDomain is spec.clusterDomain.
	TenantClusterDomain string
	// TenantServiceCIDR is spec.serviceCIDR; its first address is the tenant's
	// "kubernetes" Service.
	TenantServiceCIDR string
}

// APIServerSANs returns the DNS names and IPs of the tenant API server's
// serving certificate: its names inside the host cluster, inside the tenant
// cluster, and every address in e.
func APIServerSANs(n Names, e Endpoints) ([]string, []net.IP, error) {
	dns := []string{
		"localhost", n.Service(), n.Service() + "." + n.Namespace, n.Service() + "." + n.Namespace + ".svc",
		"kubernetes", "kubernetes.default", "kubernetes.default.svc",
	}
	if e.HostClusterDomain != "" {
		dns = append(dns, n.Service()+"."+n.Namespace+".svc."+e.HostClusterDomain)
	}
	if e.TenantClusterDomain != "" {
		dns = append(dns, "kubernetes.default.svc."+e.TenantClusterDomain)
	}
	kubernetesIP, err := FirstServiceIP(e.TenantServiceCIDR)
	if err != nil {
		return nil, nil, err
	}
	var ips []net.IP
	seen := map[string]bool{}
	for _, s := range append([]string{"127.0.0.1", kubernetesIP.String(), e.ServiceIP}, append(append(e.ExternalIPs, e.NodeIPs...), e.LoadBalancerIPs...)...) {
		ip := net.ParseIP(s)
		if ip == nil || seen[ip.String()] {
			continue
		}
		seen[ip.String()] = true
		ips = append(ips, ip)
	}
	return dns, ips, nil
}

// FirstServiceIP is the first usable address of a Service CIDR: the ClusterIP
// of the "kubernetes" Service.
func FirstServiceIP(cidr string) (netip.Addr, error) {
	p, err := netip.ParsePrefix(cidr)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("spec.serviceCIDR %q: %w", cidr, err)
	}
	return p.Masked().Addr().Next(), nil
}

// NthServiceIP is the address n places into a Service CIDR.
func NthServiceIP(cidr string, n int) (netip.Addr, error) {
	a, err := FirstServiceIP(cidr)
	for i := 1; i < n && err == nil; i++ {
		a = a.Next()
	}
	return a, err
}

// ReconcilePKI returns the PKI Secret data for the tenant: existing
// authorities and keys are kept, and a missing one (such as the kubelet-client
// CA in a Secret from before it existed) is made; a certificate is issued
// when it is missing, was not signed by the current authority, or (for the
// API server) does not name every endpoint. changed is false when existing is
// already right.
func ReconcilePKI(existing map[string][]byte, n Names, e Endpoints) (data map[string][]byte, changed bool, err error) {
	data = map[string][]byte{}
	for k, v := range existing {
		data[k] = v
	}
	cas := map[string]*pki.CA{}
	for _, c := range []struct{ cert, key, name string }{
		{CACert, CAKey, "kubernetes-ca"}, {EtcdCACert, EtcdCAKey, "etcd-ca"}, {FrontProxyCACert, FrontProxyCAKey, "front-proxy-ca"},
		{KubeletClientCACert, KubeletClientCAKey, "kubelet-client-ca"},
	} {
		ca, issued, err := ensureCA(data, c.cert, c.key, c.name+"-"+n.VirtualCluster)
		if err != nil {
			return nil, false, err
		}
		changed = changed || issued
		cas[c.cert] = ca
	}
	if len(data[ServiceAccountKey]) == 0 || len(data[ServiceAccountPub]) == 0 {
		priv, pub, err := pki.NewServiceAccountKey()
		if err != nil {
			return nil, false, err
		}
		data[ServiceAccountKey], data[ServiceAccountPub], changed = priv, pub, true
	}
	leaves, err := leafSpecs(n, e)
	if err != nil {
		return nil, false, err
	}
	for _, l := range leaves {
		ca := cas[l.caFile]
		if certMatches(data[l.cert], data[l.key], ca, l.spec) {
			continue
		}
		pair, err := ca.Issue(l.spec)
		if err != nil {
			return nil, false, err
		}
		data[l.cert], data[l.key], changed = pair.CertPEM, pair.KeyPEM, true
	}
	return data, changed, nil
}

type leaf struct {
	caFile, cert, key string
	spec              pki.CertSpec
}

func leafSpecs(n Names, e Endpoints) ([]leaf, error) {
	dns, ips, err := APIServerSANs(n, e)
	if err != nil {
		return nil, err
	}
	loopback := []net.IP{net.IPv4(127, 0, 0, 1)}
	return []leaf{
		{CACert, APIServerCert, APIServerKey, pki.CertSpec{CommonName: "kube-apiserver", DNSNames: dns, IPs: ips, Usage: pki.ServerAuth}},
		{KubeletClientCACert, KubeletClientCert, KubeletClientKey, pki.CertSpec{CommonName: syncer.KubeletClientName, Organizations: []string{"system:masters"}, Usage: pki.ClientAuth}},
		{FrontProxyCACert, FrontProxyClientCert, FrontProxyClientKey, pki.CertSpec{CommonName: frontProxyClientName, Usage: pki.ClientAuth}},
		{EtcdCACert, EtcdClientCert, EtcdClientKey, pki.CertSpec{CommonName: "kube-apiserver-etcd-client", Usage: pki.ClientAuth}},
		{EtcdCACert, EtcdServerCert, EtcdServerKey, pki.CertSpec{CommonName: "etcd-server", DNSNames: []string{"localhost"}, IPs: loopback, Usage: pki.ServerAuth | pki.ClientAuth}},
		{CACert, SyncerServingCert, SyncerServingKey, pki.CertSpec{CommonName: "nest-syncer", DNSNames: []string{"localhost"}, IPs: loopback, Usage: pki.ServerAuth}},
		{EtcdCACert, EtcdPeerCert, EtcdPeerKey, pki.CertSpec{CommonName: "etcd-peer", DNSNames: []string{"localhost"}, IPs: loopback, Usage: pki.ServerAuth | pki.ClientAuth}},
	}, nil
}

func ensureCA(data map[string][]byte, certFile, keyFile, name string) (*pki.CA, bool, error) {
	if len(data[certFile]) > 0 && len(data[keyFile]) > 0 {
		ca, err := pki.LoadCA(pki.KeyPair{CertPEM: data[certFile], KeyPEM: data[keyFile]})
		if err == nil {
			return ca, false, nil
		}
	}
	ca, err := pki.NewCA(name)
	if err != nil {
		return nil, false, err
	}
	data[certFile], data[keyFile] = ca.CertPEM, ca.KeyPEM
	return ca, true, nil
}

// certMatches reports whether certPEM and keyPEM are a valid pair signed by ca,
// not due for renewal, whose subject and SANs are those of spec.
func certMatches(certPEM, keyPEM []byte, ca *pki.CA, spec pki.CertSpec) bool {
	if len(certPEM) == 0 || len(keyPEM) == 0 {
		return false
	}
	cert, err := pki.ParseCertificate(certPEM)
	if err != nil || cert.CheckSignatureFrom(ca.Certificate()) != nil || DueForRenewal(cert, time.Now()) {
		return false
	}
	if cert.Subject.CommonName != spec.CommonName || !slices.Equal(cert.Subject.Organization, spec.Organizations) {
		return false
	}
	return sameNames(cert, spec)
}

func sameNames(cert *x509.Certificate, spec pki.CertSpec) bool {
	if !slices.Equal(slices.Sorted(slices.Values(cert.DNSNames)), slices.Sorted(slices.Values(spec.DNSNames))) {
		return false
	}
	if len(cert.IPAddresses) != len(spec.IPs) {
		return false
	}
	for _, want := range spec.IPs {
		if !slices.ContainsFunc(cert.IPAddresses, func(got net.IP) bool { return got.Equal(want) }) {
			return false
		}
	}
	return true
}

// DueForRenewal reports whether less than a third of cert's lifetime is left
// at now, the point at which the kubelet also renews its certificates.
func DueForRenewal(cert *x509.Certificate, now time.Time) bool {
	lifetime := cert.NotAfter.Sub(cert.NotBefore)
	return cert.NotAfter.Sub(now) < lifetime/3
}

// SignedBy reports whether the PEM certificate was signed by the PEM CA.
func SignedBy(certPEM, caPEM []byte) bool {
	cert, err := pki.ParseCertificate(certPEM)
	if err != nil {
		return false
	}
	ca, err := pki.ParseCertificate(caPEM)
	return err == nil && cert.CheckSignatureFrom(ca) == nil && !bytes.Equal(certPEM, caPEM)
}
