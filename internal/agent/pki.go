package agent

import (
	"net"
	"time"

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
