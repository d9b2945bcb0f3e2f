package components

import "path"

// Files of a control plane's PKI directory. Existing clusters hold them
// under these names (the tenant's PKI Secret as keys, the local host cluster
// as files in its state directory), so a renamed file is a missing one.
const (
	CACert, CAKey                             = "ca.crt", "ca.key"
	EtcdCACert, EtcdCAKey                     = "etcd-ca.crt", "etcd-ca.key"
	FrontProxyCACert, FrontProxyCAKey         = "front-proxy-ca.crt", "front-proxy-ca.key"
	ServiceAccountKey, ServiceAccountPub      = "sa.key", "sa.pub"
	APIServerCert, APIServerKey               = "apiserver.crt", "apiserver.key"
	KubeletClientCert, KubeletClientKey       = "apiserver-kubelet-client.crt", "apiserver-kubelet-client.key"
	EtcdClientCert, EtcdClientKey             = "apiserver-etcd-client.crt", "apiserver-etcd-client.key"
	FrontProxyClientCert, FrontProxyClientKey = "front-proxy-client.crt", "front-proxy-client.key"
	EtcdServerCert, EtcdServerKey             = "etcd-server.crt", "etcd-server.key"
	EtcdPeerCert, EtcdPeerKey                 = "etcd-peer.crt", "etcd-peer.key"
)

// PKIDir is the directory, as the control-plane processes see it, that
// holds the PKI files.
type PKIDir string

// Path is the path of file in d.
func (d PKIDir) Path(file string) string { return path.Join(string(d), file) }
