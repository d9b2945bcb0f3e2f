package components

import (
	"fmt"
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

// Etcd is a control plane's one etcd member. It listens only on the loopback
// of the network namespace it shares with its API server.
type Etcd struct {
	// Name names the member in --name and --initial-cluster.
	Name string
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

// ClientURL is where the API server reaches the member.
func (e Etcd) ClientURL() string { return e.loopbackURL(EtcdClientPort) }

func (e Etcd) peerURL() string { return e.loopbackURL(EtcdPeerPort) }

func (e Etcd) loopbackURL(port int) string {
	scheme := "http"
	if e.TLS {
		scheme = "https"
	}
	return fmt.Sprintf("%s://127.0.0.1:%d", scheme, port)
}

// Flags is the member's command line: a cluster of one, on loopback.
func (e Etcd) Flags() Flags {
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
	return []Leaf{APIServerEtcdClient(), EtcdServer(), EtcdPeer()}
}
