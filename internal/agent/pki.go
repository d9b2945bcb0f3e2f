package agent

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/nestdev/nest/internal/atomicfile"
	"github.com/nestdev/nest/internal/pki"
)

// CACommonName names the Nest agent CA, which signs the agents' serving
// certificates and nest-manager's client certificate, and nothing else.
const CACommonName = "nest-agent-ca"

// ServingCertSpec is the serving certificate of the agent of nodeName at ip.
// It names the node, which clients check (NewClient).
func ServingCertSpec(nodeName string, ip net.IP) pki.CertSpec {
	return pki.CertSpec{
		CommonName: "nest-agent:" + nodeName,
		DNSNames:   []string{nodeName},
		IPs:        []net.IP{ip},
		Usage:      pki.ServerAuth,
	}
}

// ManagerCertValidity is the life of the client certificate nest-manager
// issues itself from the agent CA each time it starts.
const ManagerCertValidity = 7 * 24 * time.Hour

// ClientCertSpec is a client certificate for name, such as ManagerIdentity.
func ClientCertSpec(name string, validity time.Duration) pki.CertSpec {
	return pki.CertSpec{CommonName: name, Usage: pki.ClientAuth, Validity: validity}
}

// The files WriteServingCert writes into its directory, the names
// deploy/systemd/agent.yaml gives its tls section under /etc/nest/pki.
const (
	ServingCertFile = "nest-agent.crt"
	ServingKeyFile  = "nest-agent.key"
	CACertFile      = "nest-agent-ca.crt"
)

// WriteServingCert issues, from the agent CA ca, the serving certificate of
// the agent of nodeName at ip (`nest agent certs`), and writes it, its key
// and the CA's certificate (the agent's tls.clientCAFile; never the CA's
// key, which stays with whoever issues certificates) into dir. An existing
// certificate is replaced, so running it again renews one.
func WriteServingCert(ca *pki.CA, nodeName string, ip net.IP, dir string) error {
	pair, err := ca.Issue(ServingCertSpec(nodeName, ip))
	if err != nil {
		// The likely cause: x509 refuses a key that is not the CA certificate's.
		return fmt.Errorf("sign with the agent CA (are its certificate and key a pair?): %w", err)
	}
	// The key first: a certificate on disk then always has its key.
	for _, f := range []struct {
		name string
		data []byte
		mode os.FileMode
	}{
		{ServingKeyFile, pair.KeyPEM, 0o600},
		{ServingCertFile, pair.CertPEM, 0o644},
		{CACertFile, ca.CertPEM, 0o644},
	} {
		if err := atomicfile.Write(filepath.Join(dir, f.name), f.data, f.mode); err != nil {
			return err
		}
	}
	return nil
}
