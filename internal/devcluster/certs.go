package devcluster

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/nestdev/nest/internal/agent"
	"github.com/nestdev/nest/internal/atomicfile"
	"github.com/nestdev/nest/internal/components"
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
	cas := map[string]*pki.CA{}
	for _, a := range []struct{ cert, key, name string }{
		{components.CACert, components.CAKey, "nest-dev-ca"},
		{components.FrontProxyCACert, components.FrontProxyCAKey, "nest-dev-front-proxy-ca"},
		{AgentCACert, AgentCAKey, agent.CACommonName},
	} {
		ca, err := ensureCA(l, a.cert, a.key, a.name)
		if err != nil {
			return err
		}
		cas[a.cert] = ca
	}
	if err := ensureServiceAccountKey(l); err != nil {
		return err
	}
	for _, leaf := range leaves(l, nodes) {
		ca := cas[leaf.CA]
		if ca == nil {
			return fmt.Errorf("%s: its authority %s is not one of the cluster's", leaf.Cert, leaf.CA)
		}
		if err := ensureLeaf(l, ca, leaf); err != nil {
			return err
		}
	}
	return ensureKubeconfigs(l, cas[components.CACert], nodes)
}

// leaves are the cluster's leaf certificates: a control plane's, and a
// serving certificate for each kubelet.
func leaves(l Layout, nodes []Node) []components.Leaf {
	cp := nodes[0]
	out := []components.Leaf{
		// Nodes and the machine reach the API server at the control-plane
		// node's IP (APIServerURL).
		components.APIServerServing(cp.Net.ServiceCIDR, ClusterDomain, []string{cp.Name}, []net.IP{cp.IP.AsSlice()}),
		// The cluster CA, which the kubelets trust for clients. A tenant has
		// a CA of its own for this certificate.
		components.APIServerKubeletClient(components.CACert),
		components.FrontProxyClient(),
	}
	out = append(out, etcd(l, cp).Leaves()...)
	for _, n := range nodes {
		cert, key := KubeletServingCert(n)
		out = append(out, components.Leaf{CA: components.CACert, Cert: cert, Key: key, Spec: components.KubeletServing(n.Name, n.IP.AsSlice())})
		if !n.ControlPlane() {
			cert, key := AgentServingCert(n)
			out = append(out, components.Leaf{CA: AgentCACert, Cert: cert, Key: key, Spec: agent.ServingCertSpec(n.Name, n.IP.AsSlice())})
		}
	}
	return out
}

// kubeconfigSpec is one identity that gets a kubeconfig.
type kubeconfigSpec struct {
	file, server string
	subject      pki.CertSpec
}

func kubeconfigSpecs(nodes []Node) []kubeconfigSpec {
	external := APIServerURL(nodes[0])
	specs := []kubeconfigSpec{
		// kubeadm's name for the administrator; a tenant's is nest-admin.
		{"admin", external, components.Client("kubernetes-admin", components.MastersGroup)},
		{controllerManagerKubeconfig, loopbackAPIServerURL(), components.ControllerManagerClient()},
		{schedulerKubeconfig, loopbackAPIServerURL(), components.SchedulerClient()},
		{"kube-proxy", external, components.KubeProxyClient()},
		{"kube-network-policies", external, components.Client(NetworkPolicyName)},
	}
	for _, n := range nodes {
		specs = append(specs, kubeconfigSpec{"kubelet-" + n.Name, external, components.NodeClient(n.Name)})
	}
	return specs
}

func ensureKubeconfigs(l Layout, ca *pki.CA, nodes []Node) error {
	for _, s := range kubeconfigSpecs(nodes) {
		path := l.Kubeconfig(s.file)
		if exists(path) {
			continue
		}
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

func ensureLeaf(l Layout, ca *pki.CA, leaf components.Leaf) error {
	certPath, keyPath := filepath.Join(l.PKIDir(), leaf.Cert), filepath.Join(l.PKIDir(), leaf.Key)
	if exists(certPath) && exists(keyPath) {
		return nil
	}
	pair, err := ca.Issue(leaf.Spec)
	if err != nil {
		return err
	}
	return writePair(certPath, keyPath, pair)
}

func ensureServiceAccountKey(l Layout) error {
	priv, pub := filepath.Join(l.PKIDir(), components.ServiceAccountKey), filepath.Join(l.PKIDir(), components.ServiceAccountPub)
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
