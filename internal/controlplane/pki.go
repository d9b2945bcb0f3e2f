package controlplane

import (
	"bytes"
	"cmp"
	"crypto/x509"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/components"
	"github.com/nestdev/nest/internal/pki"
)

// Files of the PKI Secret, mounted at PKIDir in the control-plane pod: a
// control plane's (package components) and the tenant's own.
const (
	PKIDir = "/etc/kubernetes/pki"

	CACert, CAKey                             = components.CACert, components.CAKey
	EtcdCACert, EtcdCAKey                     = components.EtcdCACert, components.EtcdCAKey
	FrontProxyCACert, FrontProxyCAKey         = components.FrontProxyCACert, components.FrontProxyCAKey
	ServiceAccountKey, ServiceAccountPub      = components.ServiceAccountKey, components.ServiceAccountPub
	APIServerCert, APIServerKey               = components.APIServerCert, components.APIServerKey
	KubeletClientCert, KubeletClientKey       = components.KubeletClientCert, components.KubeletClientKey
	EtcdClientCert, EtcdClientKey             = components.EtcdClientCert, components.EtcdClientKey
	FrontProxyClientCert, FrontProxyClientKey = components.FrontProxyClientCert, components.FrontProxyClientKey
	EtcdServerCert, EtcdServerKey             = components.EtcdServerCert, components.EtcdServerKey
	EtcdPeerCert, EtcdPeerKey                 = components.EtcdPeerCert, components.EtcdPeerKey

	// KubeletClientCACert signs only the API server's kubelet client
	// certificate, and the virtual node trusts nothing else. The tenant's CSR
	// signer uses CACert, so a tenant cannot mint a certificate the virtual
	// node's kubelet API accepts.
	KubeletClientCACert, KubeletClientCAKey = "kubelet-client-ca.crt", "kubelet-client-ca.key"
	// SyncerServingCert serves the virtual node's kubelet API on loopback.
	SyncerServingCert, SyncerServingKey = "nest-syncer-serving.crt", "nest-syncer-serving.key"
	// CASignerCert is the cluster CA that signs, alone: the
	// controller-manager's CSR signer refuses a file of more than one
	// certificate, and CACert is a trust bundle while the CA rotates.
	CASignerCert = "ca-signer.crt"
)

// tenantPKI is PKIDir as the shared flags take it.
const tenantPKI = components.PKIDir(PKIDir)

// Endpoints are the addresses the tenant API server is reached at; its serving
// certificate must name all of them.
type Endpoints struct {
	// ServiceIP is the ClusterIP of the host Service; InClusterIP that of
	// the in-cluster Service tenant pods reach the API server at.
	ServiceIP, InClusterIP string
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
	// MemberAddresses are hosts (IPs or DNS names) at which pods the tenant
	// runs in member clusters reach its API server: the granted
	// MemberClusters' network.apiServerAddress hosts and
	// network.nodePortAddress (see MemberAddressesOf).
	MemberAddresses []string
}

// MemberAddressesOf lists the hosts of mc at which member pods reach a
// tenant API server, for its serving certificate: network.apiServerAddress
// without its port, and network.nodePortAddress when set.
func MemberAddressesOf(mc *nestv1.MemberCluster) []string {
	var out []string
	if host, _, err := net.SplitHostPort(mc.Spec.Network.APIServerAddress); err == nil && host != "" {
		out = append(out, host)
	}
	if mc.Spec.Network.NodePortAddress != "" {
		out = append(out, mc.Spec.Network.NodePortAddress)
	}
	return out
}

// APIServerSANs returns the DNS names and IPs of the tenant API server's
// serving certificate: its names inside the host cluster, inside the tenant
// cluster, and every address in e.
func APIServerSANs(n Names, e Endpoints) ([]string, []net.IP, error) {
	serving, err := apiServerServing(n, e)
	return serving.Spec.DNSNames, serving.Spec.IPs, err
}

// apiServerServing is a control plane's serving certificate that also names
// the host Service in front of the API server and every address in e, the
// ways in from the host cluster and from outside it.
func apiServerServing(n Names, e Endpoints) (components.Leaf, error) {
	cidr, err := parseServiceCIDR(e.TenantServiceCIDR)
	if err != nil {
		return components.Leaf{}, err
	}
	dns := []string{n.Service(), n.Service() + "." + n.Namespace, n.Service() + "." + n.Namespace + ".svc"}
	if e.HostClusterDomain != "" {
		dns = append(dns, n.Service()+"."+n.Namespace+".svc."+e.HostClusterDomain)
	}
	var ips []net.IP
	for _, s := range slices.Concat([]string{e.ServiceIP, e.InClusterIP}, e.ExternalIPs, e.NodeIPs, e.LoadBalancerIPs) {
		if ip := net.ParseIP(s); ip != nil {
			ips = append(ips, ip)
		}
	}
	for _, s := range e.MemberAddresses {
		ip := net.ParseIP(s)
		switch {
		case ip != nil && !slices.ContainsFunc(ips, ip.Equal):
			ips = append(ips, ip)
		case ip == nil && s != "" && !slices.Contains(dns, s):
			dns = append(dns, s)
		}
	}
	return components.APIServerServing(cidr, e.TenantClusterDomain, dns, ips), nil
}

// FirstServiceIP is the first usable address of a Service CIDR: the ClusterIP
// of the "kubernetes" Service.
func FirstServiceIP(cidr string) (netip.Addr, error) {
	p, err := parseServiceCIDR(cidr)
	if err != nil {
		return netip.Addr{}, err
	}
	return components.KubernetesServiceIP(p), nil
}

func parseServiceCIDR(cidr string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(cidr)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("spec.serviceCIDR %q: %w", cidr, err)
	}
	return p, nil
}

// NthServiceIP is the address n places into a Service CIDR.
func NthServiceIP(cidr string, n int) (netip.Addr, error) {
	a, err := FirstServiceIP(cidr)
	for i := 1; i < n && err == nil; i++ {
		a = a.Next()
	}
	return a, err
}

// authority is one of the tenant's certificate authorities: its files in
// the PKI Secret, the common name prefix of the CA it makes, and the name
// a CA rotation knows it by ("" for one no rotation replaces).
type authority struct {
	cert, key, name string
	rotation        nestv1.CAName
}

// authorities are the tenant's certificate authorities.
var authorities = []authority{
	{CACert, CAKey, "kubernetes-ca", nestv1.CACluster}, {EtcdCACert, EtcdCAKey, "etcd-ca", nestv1.CAEtcd},
	{FrontProxyCACert, FrontProxyCAKey, "front-proxy-ca", nestv1.CAFrontProxy},
	{KubeletClientCACert, KubeletClientCAKey, "kubelet-client-ca", ""},
}

// AuthoritiesOf is the part of PKI Secret data that is the tenant's
// identity rather than one control plane's: every authority's certificate
// and key and the service-account key pair, without any leaf certificate.
// A clone of the tenant (nest restore --as) starts from it, so tokens and
// client certificates of the tenant are accepted by the clone, and
// ReconcilePKI issues the clone's leaves for its own names and addresses.
func AuthoritiesOf(data map[string][]byte) map[string][]byte {
	out := map[string][]byte{}
	keep := []string{ServiceAccountKey, ServiceAccountPub}
	for _, a := range authorities {
		keep = append(keep, a.cert, a.key)
	}
	for _, k := range keep {
		if v, ok := data[k]; ok {
			out[k] = v
		}
	}
	return out
}

// ReconcilePKI returns the PKI Secret data for the tenant: existing
// authorities and keys are kept, and a missing one (such as the kubelet-client
// CA in a Secret from before it existed) is made, for r.CALifetime; the
// authorities of a CA rotation under way (r.CARotation) are brought to the
// shape of its phase (see applyCAPhase); a certificate is issued
// when it is missing, was not signed by the current authority, is due
// (r.Due), or (for the API server) does not name every endpoint, for
// r.LeafLifetime. changed is false when existing is already right.
func ReconcilePKI(existing map[string][]byte, n Names, e Endpoints, r Renewal) (data map[string][]byte, changed bool, err error) {
	data = map[string][]byte{}
	for k, v := range existing {
		data[k] = v
	}
	if len(existing) > 0 {
		if changed, err = applyCAPhase(data, n.VirtualCluster, r.CARotation, r.CALifetime); err != nil {
			return nil, false, err
		}
	}
	cas := map[string]*pki.CA{}
	for _, c := range authorities {
		lifetime := r.CALifetime
		if c.rotation == "" {
			// No rotation replaces it: the default, as before lifetimes.
			lifetime = pki.CAValidity
		}
		ca, issued, err := ensureCA(data, c.cert, c.key, c.name+"-"+n.VirtualCluster, lifetime)
		if err != nil {
			return nil, false, err
		}
		changed = changed || issued
		cas[c.cert] = ca
	}
	if signer := cas[CACert].CertificatePEM(); !bytes.Equal(data[CASignerCert], signer) {
		data[CASignerCert], changed = signer, true
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
		ca := cas[l.CA]
		if certMatches(data[l.Cert], data[l.Key], ca, l.Spec, r) {
			continue
		}
		l.Spec.Validity = r.LeafLifetime
		pair, err := ca.Issue(l.Spec)
		if err != nil {
			return nil, false, err
		}
		data[l.Cert], data[l.Key], changed = pair.CertPEM, pair.KeyPEM, true
	}
	changed = chainServing(data) || changed
	return data, changed, nil
}

// leafSpecs are the tenant's leaf certificates: a control plane's, with the
// tenant's names, and nest-syncer's.
func leafSpecs(n Names, e Endpoints) ([]components.Leaf, error) {
	serving, err := apiServerServing(n, e)
	if err != nil {
		return nil, err
	}
	leaves := []components.Leaf{
		serving,
		// Tenant only: the kubelet-client CA, which only the virtual node
		// trusts, rather than the cluster CA, which also signs what the
		// tenant's CSR API approves.
		components.APIServerKubeletClient(KubeletClientCACert),
		components.FrontProxyClient(),
		// Tenant only: the virtual node's kubelet API.
		{CA: CACert, Cert: SyncerServingCert, Key: SyncerServingKey, Spec: components.LoopbackServing("nest-syncer", 0)},
	}
	return append(leaves, tenantEtcd(n).Leaves()...), nil
}

func ensureCA(data map[string][]byte, certFile, keyFile, name string, lifetime time.Duration) (*pki.CA, bool, error) {
	if len(data[certFile]) > 0 && len(data[keyFile]) > 0 {
		ca, err := pki.LoadCA(pki.KeyPair{CertPEM: data[certFile], KeyPEM: data[keyFile]})
		if err == nil {
			return ca, false, nil
		}
	}
	ca, err := pki.NewCAFor(name, lifetime)
	if err != nil {
		return nil, false, err
	}
	data[certFile], data[keyFile] = ca.CertPEM, ca.KeyPEM
	return ca, true, nil
}

// certMatches reports whether certPEM and keyPEM are a valid pair signed by ca,
// not due for renewal (r), whose subject and SANs are those of spec.
func certMatches(certPEM, keyPEM []byte, ca *pki.CA, spec pki.CertSpec, r Renewal) bool {
	if len(certPEM) == 0 || len(keyPEM) == 0 {
		return false
	}
	cert, err := pki.ParseCertificate(certPEM)
	if err != nil || cert.CheckSignatureFrom(ca.Certificate()) != nil || r.Due(cert, ca.Certificate()) {
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

// Renewal says when a leaf certificate of the tenant is issued anew and for
// how long a new one is valid: spec.certificates with its defaults, and the
// time of the last rotation served (RenewalOf). The zero Renewal is the
// defaults now: a year's leaves, renewed with a third of their life left.
type Renewal struct {
	// LeafLifetime is a new leaf's validity; zero is pki.LeafValidity.
	LeafLifetime time.Duration
	// RenewBefore is how long before its expiry a leaf is renewed; zero,
	// or more than half the lifetime, is a third of its lifetime (from its
	// issue), the point at which the kubelet renews its own.
	RenewBefore time.Duration
	// IssuedAfter renews every leaf issued before it (a rotation); zero
	// renews none for that.
	IssuedAfter time.Time
	// CALifetime is a new CA's validity; zero is pki.CAValidity.
	CALifetime time.Duration
	// CARotation is the CA rotation under way, nil when none is.
	CARotation *nestv1.CARotation
	// Now is the time the decision is made at; zero is time.Now().
	Now time.Time
}

// RenewalOf is the Renewal of vc at now: spec.certificates and
// status.certificates' lastRotation and caRotation.
func RenewalOf(vc *nestv1.VirtualCluster, now time.Time) Renewal {
	r := Renewal{Now: now}
	if d := vc.Spec.Certificates.LeafLifetime; d != nil {
		r.LeafLifetime = d.Duration
	}
	if d := vc.Spec.Certificates.RenewBefore; d != nil {
		r.RenewBefore = d.Duration
	}
	if d := vc.Spec.Certificates.CALifetime; d != nil {
		r.CALifetime = d.Duration
	}
	if st := vc.Status.Certificates; st != nil {
		if st.LastRotation != nil {
			r.IssuedAfter = st.LastRotation.Time.Time
		}
		r.CARotation = st.CARotation
	}
	return r
}

// Due reports whether cert, signed by ca, is to be issued anew: it was
// issued before IssuedAfter (or before now, when IssuedAfter is later: a
// clock behind the one that served the rotation must not reissue for ever),
// it lives longer than LeafLifetime (which was lowered), or less than
// RenewBefore of it is left. A leaf cut to its CA's expiry is not due for
// its time: a new one would be cut the same, and due at once; the CA is
// what is renewed then (CA rotation).
func (r Renewal) Due(cert, ca *x509.Certificate) bool {
	now := r.Now
	if now.IsZero() {
		now = time.Now()
	}
	issued := pki.IssuedAt(cert)
	// Certificates keep whole seconds: one issued in the second of the
	// rotation counts as after it.
	after := r.IssuedAfter
	if after.After(now) {
		after = now
	}
	if !after.IsZero() && issued.Before(after.Truncate(time.Second)) {
		return true
	}
	if ca != nil && !cert.NotAfter.Before(ca.NotAfter) {
		return false
	}
	lifetime := cmp.Or(r.LeafLifetime, pki.LeafValidity)
	// A minute of slack: a leaf is issued a little after its NotBefore.
	if cert.NotAfter.Sub(issued) > lifetime+time.Minute {
		return true
	}
	return !now.Before(r.RenewAt(cert))
}

// RenewAt is when cert is renewed for its time: RenewBefore before it
// expires, or with a third of its life left when RenewBefore is unset or
// more than half the lifetime.
func (r Renewal) RenewAt(cert *x509.Certificate) time.Time {
	issued := pki.IssuedAt(cert)
	before := r.RenewBefore
	if before == 0 || 2*before > cmp.Or(r.LeafLifetime, pki.LeafValidity) {
		before = cert.NotAfter.Sub(issued) / 3
	}
	return cert.NotAfter.Add(-before)
}

// FirstLeafExpiry is when the first leaf certificate of PKI Secret data
// expires, or nil when it holds none.
func FirstLeafExpiry(data map[string][]byte) *metav1.Time {
	var first *metav1.Time
	for _, v := range data {
		cert, err := pki.ParseCertificate(v)
		if err != nil || cert.IsCA {
			continue
		}
		if first == nil || cert.NotAfter.Before(first.Time) {
			first = &metav1.Time{Time: cert.NotAfter}
		}
	}
	return first
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
