package components

import (
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/nestdev/nest/internal/pki"
)

const testPKI PKIDir = "/pki"

func testEtcd(tls bool) Etcd {
	return Etcd{Name: "m", DataDir: "/data", TLS: tls, PKI: testPKI}
}

func testAPIServer(tls bool) APIServer {
	return APIServer{AdvertiseAddress: "192.0.2.1", Port: 6443, PKI: testPKI, Etcd: testEtcd(tls), ServiceCIDR: "10.96.0.0/16", ClusterDomain: "cluster.local"}
}

// every command line, with etcd speaking TLS or not.
func commandLines() map[string]Flags {
	client := ClientComponent{Kubeconfig: "/kc", BindAddress: "127.0.0.1"}
	out := map[string]Flags{
		"kube-controller-manager": ControllerManagerFlags(client, testPKI, CACert),
		"kube-scheduler":          SchedulerFlags(client),
	}
	for _, tls := range []bool{false, true} {
		suffix := map[bool]string{false: " (plain)", true: " (TLS)"}[tls]
		out["etcd"+suffix] = testEtcd(tls).Flags()
		out["kube-apiserver"+suffix] = testAPIServer(tls).Flags()
	}
	return out
}

// Map and the host's sorted rendering would silently drop a repeated flag.
func TestNoFlagRepeats(t *testing.T) {
	for name, f := range commandLines() {
		if len(f.Map()) != len(f) {
			t.Errorf("%s repeats a flag: %s", name, f)
		}
	}
}

func TestFlagsRender(t *testing.T) {
	f := Flags{{"b", "2"}, {"a", "x=y"}}
	if got := strings.Join(f.Args(), " "); got != "--b=2 --a=x=y" {
		t.Errorf("Args = %s, want the flags in order", got)
	}
	if got := f.Map(); !maps.Equal(got, map[string]string{"a": "x=y", "b": "2"}) {
		t.Errorf("Map = %v", got)
	}
}

// TLS is one switch: the member's URLs, its serving flags, the API server's
// client flags and the certificates they name all follow it.
func TestEtcdTLS(t *testing.T) {
	for _, tls := range []bool{false, true} {
		etcd, api := testEtcd(tls).Flags().Map(), testAPIServer(tls).Flags().Map()
		scheme := map[bool]string{false: "http://", true: "https://"}[tls]
		for _, f := range []string{"listen-client-urls", "advertise-client-urls", "listen-peer-urls", "initial-advertise-peer-urls"} {
			if !strings.HasPrefix(etcd[f], scheme+"127.0.0.1:") {
				t.Errorf("TLS=%v: etcd --%s=%s, want %s on loopback", tls, f, etcd[f], scheme)
			}
		}
		if etcd["listen-metrics-urls"] != "http://127.0.0.1:2381" {
			t.Errorf("TLS=%v: metrics on %s, want plain HTTP on loopback for the probes", tls, etcd["listen-metrics-urls"])
		}
		if api["etcd-servers"] != etcd["advertise-client-urls"] {
			t.Errorf("TLS=%v: the API server dials %s, etcd advertises %s", tls, api["etcd-servers"], etcd["advertise-client-urls"])
		}
		_, serves := etcd["client-cert-auth"]
		_, dials := api["etcd-certfile"]
		if serves != tls || dials != tls || (len(testEtcd(tls).Leaves()) > 0) != tls {
			t.Errorf("TLS=%v: etcd TLS flags %v, API server client certificate %v, leaves %v", tls, serves, dials, testEtcd(tls).Leaves())
		}
	}
	if f := (Etcd{SnapshotCount: 10000}).Flags().Map(); f["snapshot-count"] != "10000" {
		t.Errorf("snapshot-count = %q", f["snapshot-count"])
	}
	if _, set := testEtcd(false).Flags().Map()["snapshot-count"]; set {
		t.Error("a zero SnapshotCount must leave etcd's default")
	}
}

// Every file a flag names is a certificate or key some leaf is issued into,
// the authority that signs one, or a key the callers make besides: the
// cluster CA's key (the CSR signer) and the service-account key pair.
func TestEveryFileAFlagNamesIsIssued(t *testing.T) {
	issued := map[string]bool{CAKey: true, ServiceAccountKey: true, ServiceAccountPub: true}
	for _, l := range allLeaves() {
		issued[l.Cert], issued[l.Key], issued[l.CA] = true, true, true
	}
	for name, f := range commandLines() {
		for _, fl := range f {
			if file, ok := strings.CutPrefix(fl.Value, string(testPKI)+"/"); ok && !issued[file] {
				t.Errorf("%s --%s names %s, which no leaf or key is", name, fl.Name, file)
			}
		}
	}
}

func allLeaves() []Leaf {
	serving := APIServerServing(netip.MustParsePrefix("10.96.0.0/16"), "cluster.local", nil, nil)
	return append([]Leaf{serving, APIServerKubeletClient(CACert), FrontProxyClient()}, testEtcd(true).Leaves()...)
}

// The API server trusts the front-proxy headers from the certificate it
// presents itself.
func TestFrontProxyFlagsNameTheFrontProxyClient(t *testing.T) {
	api, leaf := testAPIServer(false).Flags().Map(), FrontProxyClient()
	if api["requestheader-allowed-names"] != leaf.Spec.CommonName || api["requestheader-client-ca-file"] != testPKI.Path(leaf.CA) ||
		api["proxy-client-cert-file"] != testPKI.Path(leaf.Cert) || api["proxy-client-key-file"] != testPKI.Path(leaf.Key) {
		t.Errorf("front-proxy flags %v do not match the leaf %+v", api, leaf)
	}
}

func TestAPIServerServing(t *testing.T) {
	extra := []net.IP{net.ParseIP("192.0.2.1"), net.ParseIP("10.100.0.1"), net.ParseIP("127.0.0.1")}
	leaf := APIServerServing(netip.MustParsePrefix("10.100.0.0/16"), "tenant.local", []string{"node-a"}, extra)
	wantDNS := []string{"localhost", "node-a", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.tenant.local"}
	if !slices.Equal(leaf.Spec.DNSNames, wantDNS) {
		t.Errorf("DNS names %v, want %v", leaf.Spec.DNSNames, wantDNS)
	}
	var ips []string
	for _, ip := range leaf.Spec.IPs {
		ips = append(ips, ip.String())
	}
	if want := []string{"127.0.0.1", "10.100.0.1", "192.0.2.1"}; !slices.Equal(ips, want) {
		t.Errorf("IPs %v, want %v: loopback, the kubernetes Service, the rest, each once", ips, want)
	}
	if leaf.CA != CACert || leaf.Cert != APIServerCert || leaf.Spec.Usage != pki.ServerAuth {
		t.Errorf("leaf %+v", leaf)
	}
	noDomain := APIServerServing(netip.MustParsePrefix("10.100.0.0/16"), "", nil, nil)
	if slices.ContainsFunc(noDomain.Spec.DNSNames, func(n string) bool { return strings.HasPrefix(n, "kubernetes.default.svc.") }) {
		t.Errorf("no cluster domain, yet %v", noDomain.Spec.DNSNames)
	}
}

// Service-account tokens name the API server's in-cluster URL as their
// issuer; its serving certificate must name that host.
func TestIssuerIsNamedByTheServingCertificate(t *testing.T) {
	a := testAPIServer(false)
	issuer := a.Flags().Map()["service-account-issuer"]
	host, ok := strings.CutPrefix(issuer, "https://")
	serving := APIServerServing(netip.MustParsePrefix(a.ServiceCIDR), a.ClusterDomain, nil, nil)
	if !ok || !slices.Contains(serving.Spec.DNSNames, host) {
		t.Errorf("issuer %s is not among the serving certificate's names %v", issuer, serving.Spec.DNSNames)
	}
}

func TestKubernetesServiceIP(t *testing.T) {
	for cidr, want := range map[string]string{"10.96.0.0/16": "10.96.0.1", "10.100.7.0/24": "10.100.7.1", "10.100.7.9/24": "10.100.7.1"} {
		if got := KubernetesServiceIP(netip.MustParsePrefix(cidr)); got.String() != want {
			t.Errorf("KubernetesServiceIP(%s) = %s, want %s", cidr, got, want)
		}
	}
}

// Every spec can be issued: a common name and a usage each.
func TestEverySpecIssues(t *testing.T) {
	ca, err := pki.NewCA("test")
	if err != nil {
		t.Fatal(err)
	}
	specs := []pki.CertSpec{
		KubeletServing("n", net.ParseIP("192.0.2.2")), NodeClient("n"),
		ControllerManagerClient(), SchedulerClient(), KubeProxyClient(), Client("admin", MastersGroup),
		LoopbackServing("s", 0),
	}
	for _, l := range allLeaves() {
		specs = append(specs, l.Spec)
	}
	for _, s := range specs {
		if _, err := ca.Issue(s); err != nil {
			t.Errorf("%s: %v", s.CommonName, err)
		}
	}
	if s := NodeClient("n"); s.CommonName != "system:node:n" || !slices.Equal(s.Organizations, []string{NodesGroup}) || s.Usage != pki.ClientAuth {
		t.Errorf("node client %+v: the Node authorizer would not know it", s)
	}
}

func TestParseCIDRs(t *testing.T) {
	got, err := ParseCIDRs("host-pod-cidrs", " 10.244.1.7/16, ,fd00::/64")
	if err != nil || len(got) != 2 || got[0].String() != "10.244.0.0/16" || got[1].String() != "fd00::/64" {
		t.Errorf("got %v, %v; want masked 10.244.0.0/16 and fd00::/64", got, err)
	}
	if got, err := ParseCIDRs("host-pod-cidrs", ""); err != nil || len(got) != 0 {
		t.Errorf("empty list: %v %v", got, err)
	}
	if _, err := ParseCIDRs("host-node-cidrs", "10.0.0.1"); err == nil || !strings.Contains(err.Error(), "--host-node-cidrs") || !strings.Contains(err.Error(), `"10.0.0.1"`) {
		t.Errorf("error %v does not name the flag and the entry", err)
	}
}
