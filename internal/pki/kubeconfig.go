package pki

import (
	"fmt"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Kubeconfig describes a kubeconfig with one cluster, one user authenticated by
// a client certificate, and one context that joins them.
type Kubeconfig struct {
	// ClusterName names the cluster and the context.
	ClusterName string
	// Server is the API server URL, such as https://198.51.100.10:6443.
	Server string
	// CACertPEM verifies the API server's serving certificate.
	CACertPEM []byte
	// User names the user entry; the identity itself is the certificate's subject.
	User string
	// Client is the user's certificate and key.
	Client KeyPair
}

// Bytes renders k as kubeconfig YAML with the certificates embedded, so the file
// is self-contained and can be copied to another machine.
func (k Kubeconfig) Bytes() ([]byte, error) {
	if k.Server == "" || k.ClusterName == "" || k.User == "" {
		return nil, fmt.Errorf("pki: kubeconfig needs a server, a cluster name and a user (got %q, %q, %q)", k.Server, k.ClusterName, k.User)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[k.ClusterName] = &clientcmdapi.Cluster{Server: k.Server, CertificateAuthorityData: k.CACertPEM}
	cfg.AuthInfos[k.User] = &clientcmdapi.AuthInfo{ClientCertificateData: k.Client.CertPEM, ClientKeyData: k.Client.KeyPEM}
	cfg.Contexts[k.ClusterName] = &clientcmdapi.Context{Cluster: k.ClusterName, AuthInfo: k.User}
	cfg.CurrentContext = k.ClusterName
	return clientcmd.Write(*cfg)
}
