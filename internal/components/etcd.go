package components

import (
	"fmt"
	"net"
	"strconv"
)

// Ports of a control plane's etcd member (etcd's defaults), on loopback.
const (
	EtcdClientPort = 2379
	EtcdPeerPort   = 2380
	// EtcdMetricsPort serves plain-HTTP /health and /metrics, for probes
	// run in the member's own network namespace.
	EtcdMetricsPort = 2381
)

// Etcd is a control plane's etcd member. Alone it listens only on the
// loopback of the network namespace it shares with its API server; with
// Member it is one member of a cluster whose peers reach it over the pod
// network.
type Etcd struct {
	// Name names the member in --name and --initial-cluster.
	Name string
	// Member makes the member one of a cluster; nil is a cluster of one.
	Member *EtcdMember
	// DataDir is --data-dir.
	DataDir string
	// TLS makes the member serve clients and peers over TLS and accept only
	// certificates the etcd CA signed (Leaves lists them); without it the
	// member speaks plain HTTP and authenticates no one.
	TLS bool
	// PKI holds the member's TLS files.
	PKI PKIDir
	// SnapshotCount is --snapshot-count, the commits between two snapshots;
	// zero leaves etcd's default.
	SnapshotCount int
}

// EtcdMember places an Etcd in a cluster of members on the pod network,
// as kubeadm's stacked etcd is: it serves clients on loopback and on
// ListenIP, its peers on ListenIP, and is named Host in both URLs it
// advertises. It takes its initial cluster and state from the environment
// (ETCD_INITIAL_CLUSTER, ETCD_INITIAL_CLUSTER_STATE) rather than flags:
// they depend on the members the cluster has when it joins, which the
// etcd-member helper learns at run time and writes to a file
// (InitialClusterFile) that the kube binary loads before starting etcd.
type EtcdMember struct {
	// Host is the member's DNS name: peers dial it, and its serving and
	// peer certificates name it (DNSNames).
	Host string
	// ListenIP is the address it listens on besides loopback, such as
	// "$(POD_IP)".
	ListenIP string
	// DNSNames are the names its serving and peer certificates hold, such
	// as a wildcard over the members' names.
	DNSNames []string
}

// InitialClusterFileEnv names the environment variable that tells the kube
// binary's etcd where the file with ETCD_INITIAL_CLUSTER and
// ETCD_INITIAL_CLUSTER_STATE lines is (k8s/cmd/kube reads it; a test keeps
// the two names equal).
const InitialClusterFileEnv = "NEST_ETCD_INITIAL_CLUSTER_FILE"

// EtcdPeerCommonName is the common name of the members' peer certificate;
// a member accepts peers presenting only that name.
const EtcdPeerCommonName = "etcd-peer"

// ClientURL is where the API server reaches the member.
func (e Etcd) ClientURL() string { return e.loopbackURL(EtcdClientPort) }

func (e Etcd) peerURL() string { return e.loopbackURL(EtcdPeerPort) }

func (e Etcd) loopbackURL(port int) string { return e.url("127.0.0.1", port) }

// Flags is the member's command line: a cluster of one on loopback, or
// with Member one member of a cluster.
func (e Etcd) Flags() Flags {
	if e.Member != nil {
		return e.memberFlags()
	}
	f := Flags{
		{"name", e.Name},
		{"data-dir", e.DataDir},
		{"listen-client-urls", e.ClientURL()},
		{"advertise-client-urls", e.ClientURL()},
		{"listen-peer-urls", e.peerURL()},
		{"initial-advertise-peer-urls", e.peerURL()},
		{"initial-cluster", e.Name + "=" + e.peerURL()},
		// Plain HTTP even under TLS, so probes need no certificate: on
		// loopback, out of reach of other network namespaces.
		{"listen-metrics-urls", fmt.Sprintf("http://127.0.0.1:%d", EtcdMetricsPort)},
	}
	f = append(f, e.servingTLSFlags()...)
	if e.SnapshotCount > 0 {
		f = append(f, Flag{"snapshot-count", strconv.Itoa(e.SnapshotCount)})
	}
	return append(f, Flag{"log-level", "warn"})
}

// memberFlags is the command line of one member of a cluster; the initial
// cluster comes from the environment (EtcdMember). Peers present
// certificates that name no address they dial from, so etcd does not check
// their SANs against the address; it accepts the peer certificate's common
// name only, signed by the etcd CA.
func (e Etcd) memberFlags() Flags {
	m := e.Member
	f := Flags{
		{"name", e.Name},
		{"data-dir", e.DataDir},
		{"listen-client-urls", e.ClientURL() + "," + e.url(m.ListenIP, EtcdClientPort)},
		{"advertise-client-urls", e.MemberClientURL()},
		{"listen-peer-urls", e.url(m.ListenIP, EtcdPeerPort)},
		{"initial-advertise-peer-urls", e.MemberPeerURL()},
		{"listen-metrics-urls", fmt.Sprintf("http://127.0.0.1:%d", EtcdMetricsPort)},
	}
	f = append(f, e.servingTLSFlags()...)
	f = append(f, Flag{"peer-skip-client-san-verification", "true"}, Flag{"peer-cert-allowed-cn", EtcdPeerCommonName})
	if e.SnapshotCount > 0 {
		f = append(f, Flag{"snapshot-count", strconv.Itoa(e.SnapshotCount)})
	}
	return append(f, Flag{"log-level", "warn"})
}

// MemberPeerURL is where the member's peers reach it: its Host (Member
// only).
func (e Etcd) MemberPeerURL() string { return e.url(e.Member.Host, EtcdPeerPort) }

// MemberClientURL is where other members' helpers reach it as clients: its
// Host (Member only).
func (e Etcd) MemberClientURL() string { return e.url(e.Member.Host, EtcdClientPort) }

func (e Etcd) url(host string, port int) string {
	scheme := "http"
	if e.TLS {
		scheme = "https"
	}
	return fmt.Sprintf("%s://%s", scheme, net.JoinHostPort(host, strconv.Itoa(port)))
}

func (e Etcd) servingTLSFlags() Flags {
	if !e.TLS {
		return nil
	}
	return Flags{
		{"cert-file", e.PKI.Path(EtcdServerCert)}, {"key-file", e.PKI.Path(EtcdServerKey)},
		{"client-cert-auth", "true"}, {"trusted-ca-file", e.PKI.Path(EtcdCACert)},
		{"peer-cert-file", e.PKI.Path(EtcdPeerCert)}, {"peer-key-file", e.PKI.Path(EtcdPeerKey)},
		{"peer-client-cert-auth", "true"}, {"peer-trusted-ca-file", e.PKI.Path(EtcdCACert)},
	}
}

// apiServerFlags are the kube-apiserver flags that reach the member, with
// the client certificate from the API server's PKI directory when the member
// asks for one.
func (e Etcd) apiServerFlags(apiServerPKI PKIDir) Flags {
	f := Flags{{"etcd-servers", e.ClientURL()}}
	if !e.TLS {
		return f
	}
	return append(f, Flags{
		{"etcd-cafile", apiServerPKI.Path(EtcdCACert)},
		{"etcd-certfile", apiServerPKI.Path(EtcdClientCert)}, {"etcd-keyfile", apiServerPKI.Path(EtcdClientKey)},
	}...)
}

// Leaves are the certificates the member's TLS needs: its serving and peer
// certificates and the API server's client certificate. None without TLS.
func (e Etcd) Leaves() []Leaf {
	if !e.TLS {
		return nil
	}
	server, peer := EtcdServer(), EtcdPeer()
	if e.Member != nil {
		server.Spec.DNSNames = append(server.Spec.DNSNames, e.Member.DNSNames...)
		peer.Spec.DNSNames = append(peer.Spec.DNSNames, e.Member.DNSNames...)
	}
	return []Leaf{APIServerEtcdClient(), server, peer}
}
