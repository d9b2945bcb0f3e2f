package devcluster

import (
	"errors"
	"net"
	"os"
	"path/filepath"

	"github.com/nestdev/nest/internal/atomicfile"
	"github.com/nestdev/nest/internal/pki"
)

// ensurePKI writes the cluster CA, the control-plane certificates, one serving
// certificate per kubelet and one kubeconfig per component. Files that exist are
// kept, so a restarted cluster keeps its identity and its etcd data stays valid.
func ensurePKI(l Layout, nodes []Node) error {
	if err := os.MkdirAll(l.PKIDir(), 0o700); err != nil {
		return err
	}
	if err := os.MkdirAll(l.KubeconfigDir(), 0o700); err != nil {
		return err
	}
	ca, err := ensureCA(l, caCert, caKey, "nest-dev-ca")
	if err != nil {
		return err
	}
	frontProxyCA, err := ensureCA(l, frontProxyCACert, frontProxyCAKey, "nest-dev-front-proxy-ca")
	if err != nil {
		return err
	}
	if err := ensureServiceAccountKey(l); err != nil {
		return err
	}
	cp := nodes[0]
	leaves := []struct {
		ca        *pki.CA
		cert, key string
		spec      pki.CertSpec
	}{
		{ca, apiserverCert, apiserverKey, apiserverCertSpec(cp)},
		{ca, apiserverKubeletCert, apiserverKubeletKey, pki.CertSpec{CommonName: "kube-apiserver-kubelet-client", Organizations: []string{"system:masters"}, Usage: pki.ClientAuth}},
		{frontProxyCA, frontProxyClientCert, frontProxyClientKey, pki.CertSpec{CommonName: frontProxyClientName, Usage: pki.ClientAuth}},
	}
	for _, n := range nodes {
		cert, key := KubeletServingCert(n)
		leaves = append(leaves, struct {
			ca        *pki.CA
			cert, key string
			spec      pki.CertSpec
		}{ca, cert, key, pki.CertSpec{CommonName: "system:node:" + n.Name, Organizations: []string{"system:nodes"}, DNSNames: []string{n.Name}, IPs: []net.IP{n.IP.AsSlice()}, Usage: pki.ServerAuth}})
	}
	for _, leaf := range leaves {
		if err := ensureLeaf(l, leaf.ca, leaf.cert, leaf.key, leaf.spec); err != nil {
			return err
		}
	}
	return ensureKubeconfigs(l, ca, nodes)
}

func apiserverCertSpec(cp Node) pki.CertSpec {
	return pki.CertSpec{
		CommonName: "kube-apiserver",
		DNSNames: []string{
			"localhost", cp.Name, "kubernetes", "kubernetes.default", "kubernetes.default.svc",
			"kubernetes.default.svc." + ClusterDomain,
		},
		IPs:   []net.IP{cp.IP.AsSlice(), APIServerIP().AsSlice(), net.IPv4(127, 0, 0, 1)},
		Usage: pki.ServerAuth,
	}
}

// kubeconfigSpec is one identity that gets a kubeconfig.
type kubeconfigSpec struct {
	file, server string
	subject      pki.CertSpec
}

func kubeconfigSpecs(nodes []Node) []kubeconfigSpec {
	external := APIServerURL(nodes[0])
	specs := []kubeconfigSpec{
		{"admin", external, pki.CertSpec{CommonName: "kubernetes-admin", Organizations: []string{"system:masters"}}},
		{"controller-manager", loopbackAPIServerURL(), pki.CertSpec{CommonName: "system:kube-controller-manager"}},
		{"scheduler", loopbackAPIServerURL(), pki.CertSpec{CommonName: "system:kube-scheduler"}},
		{"kube-proxy", external, pki.CertSpec{CommonName: "system:kube-proxy"}},
		{"kube-network-policies", external, pki.CertSpec{CommonName: NetworkPolicyName}},
	}
	for _, n := range nodes {
		specs = append(specs, kubeconfigSpec{"kubelet-" + n.Name, external,
			pki.CertSpec{CommonName: "system:node:" + n.Name, Organizations: []string{"system:nodes"}}})
	}
	return specs
}

func ensureKubeconfigs(l Layout, ca *pki.CA, nodes []Node) error {
	for _, s := range kubeconfigSpecs(nodes) {
		path := l.Kubeconfig(s.file)
		if exists(path) {
			continue
		}
		s.subject.Usage = pki.ClientAuth
		client, err := ca.Issue(s.subject)
		if err != nil {
			return err
		}
		data, err := pki.Kubeconfig{ClusterName: "nest-dev", Server: s.server, CACertPEM: ca.CertPEM, User: s.subject.CommonName, Client: client}.Bytes()
		if err != nil {
			return err
		}
		if err := writeFileAtomic(path, data, 0o600); err != nil {
			return err
		}
	}
	return nil
}

func ensureCA(l Layout, certFile, keyFile, name string) (*pki.CA, error) {
	certPath, keyPath := filepath.Join(l.PKIDir(), certFile), filepath.Join(l.PKIDir(), keyFile)
	if exists(certPath) && exists(keyPath) {
		pair, err := readPair(certPath, keyPath)
		if err != nil {
			return nil, err
		}
		return pki.LoadCA(pair)
	}
	ca, err := pki.NewCA(name)
	if err != nil {
		return nil, err
	}
	return ca, writePair(certPath, keyPath, ca.KeyPair)
}

func ensureLeaf(l Layout, ca *pki.CA, certFile, keyFile string, spec pki.CertSpec) error {
	certPath, keyPath := filepath.Join(l.PKIDir(), certFile), filepath.Join(l.PKIDir(), keyFile)
	if exists(certPath) && exists(keyPath) {
		return nil
	}
	pair, err := ca.Issue(spec)
	if err != nil {
		return err
	}
	return writePair(certPath, keyPath, pair)
}

func ensureServiceAccountKey(l Layout) error {
	priv, pub := filepath.Join(l.PKIDir(), serviceAccountKey), filepath.Join(l.PKIDir(), serviceAccountPubKey)
	if exists(priv) && exists(pub) {
		return nil
	}
	privPEM, pubPEM, err := pki.NewServiceAccountKey()
	if err != nil {
		return err
	}
	if err := writeFileAtomic(priv, privPEM, 0o600); err != nil {
		return err
	}
	return writeFileAtomic(pub, pubPEM, 0o644)
}

func readPair(certPath, keyPath string) (pki.KeyPair, error) {
	cert, err := os.ReadFile(certPath)
	if err != nil {
		return pki.KeyPair{}, err
	}
	key, err := os.ReadFile(keyPath)
	if err != nil {
		return pki.KeyPair{}, err
	}
	return pki.KeyPair{CertPEM: cert, KeyPEM: key}, nil
}

// writePair writes the key before the certificate: a certificate file on disk
// then always has its key next to it.
func writePair(certPath, keyPath string, pair pki.KeyPair) error {
	if err := writeFileAtomic(keyPath, pair.KeyPEM, 0o600); err != nil {
		return err
	}
	return writeFileAtomic(certPath, pair.CertPEM, 0o644)
}

// writeFileAtomic writes a file so an interrupted run never leaves a
// truncated certificate or config.
func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	return atomicfile.Write(path, data, perm)
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return !errors.Is(err, os.ErrNotExist)
}
