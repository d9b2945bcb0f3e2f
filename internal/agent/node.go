package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	kubeproxyv1alpha1 "k8s.io/kube-proxy/config/v1alpha1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"sigs.k8s.io/yaml"

	"github.com/nestdev/nest/internal/atomicfile"
	"github.com/nestdev/nest/internal/nodeclean"
	"github.com/nestdev/nest/internal/pki"
	"github.com/nestdev/nest/internal/pullproxy"
)

// Service names one of the node's services.
type Service string

// The services the agent stops and starts.
const (
	ServiceKubelet   Service = "kubelet"
	ServiceKubeProxy Service = "kube-proxy"
)

// Services starts and stops the node's services. Start and Stop return nil
// when the service already is in the state asked for.
type Services interface {
	Running(ctx context.Context, s Service) (bool, error)
	Start(ctx context.Context, s Service) error
	Stop(ctx context.Context, s Service) error
}

// Runtime is the node's container runtime, as Status and Reset see it.
type Runtime interface {
	CountSandboxes(ctx context.Context) (int, error)
	RemoveSandboxes(ctx context.Context) error
}

// criRuntime reaches the container runtime through the CRI.
type criRuntime struct{ socket string }

func (r criRuntime) CountSandboxes(ctx context.Context) (int, error) {
	return nodeclean.CountSandboxes(ctx, r.socket)
}

func (r criRuntime) RemoveSandboxes(ctx context.Context) error {
	return nodeclean.RemoveSandboxes(ctx, r.socket)
}

// ConflictError is an operation the node's present state does not allow,
// such as a Reset while the kubelet runs. The message says what comes first.
type ConflictError struct{ Reason string }

func (e *ConflictError) Error() string { return e.Reason }

// BadRequestError is a request the agent cannot carry out as sent.
type BadRequestError struct{ Err error }

func (e *BadRequestError) Error() string { return e.Err.Error() }
func (e *BadRequestError) Unwrap() error { return e.Err }

// DefaultBootstrapTimeout bounds how long Start waits for the kubelet's TLS
// bootstrap: its certificate request must be approved and signed.
const DefaultBootstrapTimeout = 2 * time.Minute

// kubeletClientCert is the file in the kubelet's --cert-dir that always
// holds its current client certificate and key (upstream's
// kubelet-client-current.pem, a link the certificate manager updates).
const kubeletClientCert = "kubelet-client-current.pem"

// The copies of the node's own configuration in Config.SavedDir.
const (
	savedKubeletConfig   = "kubelet-config.yaml"
	savedKubeProxyConfig = "kube-proxy-config.yaml"
	savedCNIConfig       = "cni.conflist"
)

// Node carries out the operations on one node. They run one at a time.
type Node struct {
	cfg              Config
	services         Services
	runtime          Runtime
	unmount          func(root string) error
	bootstrapTimeout time.Duration
	// pullAddress is where the node's pull proxy listens: always
	// pullproxy.DefaultAddress but in tests.
	pullAddress string
	// pull is the running pull proxy; nil when none runs.
	pull *pullServer
	mu   sync.Mutex
}

// NewNode returns the operations of the node cfg describes, whose services
// services starts and stops, and whose runtime it reaches through the CRI.
func NewNode(cfg Config, services Services) *Node {
	return &Node{
		cfg:              cfg,
		services:         services,
		runtime:          criRuntime{socket: cfg.ContainerRuntimeSocket},
		unmount:          nodeclean.UnmountUnder,
		bootstrapTimeout: DefaultBootstrapTimeout,
		pullAddress:      pullproxy.DefaultAddress,
	}
}

// savedFiles pairs each configuration file of the node with its copy.
func (n *Node) savedFiles() []struct{ field, live, saved string } {
	return []struct{ field, live, saved string }{
		{"kubelet.config", n.cfg.Kubelet.Config, filepath.Join(n.cfg.SavedDir, savedKubeletConfig)},
		{"kubeProxy.config", n.cfg.KubeProxy.Config, filepath.Join(n.cfg.SavedDir, savedKubeProxyConfig)},
		{"cniConfigFile", n.cfg.CNIConfigFile, filepath.Join(n.cfg.SavedDir, savedCNIConfig)},
	}
}

// SaveOwnConfig copies the node's kubelet, kube-proxy and CNI configuration
// to SavedDir, unless copies are there already: the first copy is the
// node's own configuration, which every Reset puts back, so a later start of
// the agent on a node joined elsewhere must not replace it.
func (n *Node) SaveOwnConfig() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, f := range n.savedFiles() {
		if _, err := os.Stat(f.saved); err == nil {
			continue
		}
		data, err := os.ReadFile(f.live)
		if err != nil {
			return fmt.Errorf("%s: the node's own configuration must exist when the agent first starts: %w", f.field, err)
		}
		if err := atomicfile.Write(f.saved, data, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// checkKubeletClientCA refuses a kubelet.clientCAFile that the node's own
// kubelet configuration trusts for its clients (kubeadm's
// /etc/kubernetes/pki/ca.crt): every Reset removes kubelet.clientCAFile,
// and a node that returns home joins without a client CA, keeping its own,
// so its kubelet would find the file gone and not start.
func (n *Node) checkKubeletClientCA() error {
	var own kubeletv1beta1.KubeletConfiguration
	if err := readSavedYAML(filepath.Join(n.cfg.SavedDir, savedKubeletConfig), &own); err != nil {
		return err
	}
	ca := own.Authentication.X509.ClientCAFile
	if ca == "" {
		return nil
	}
	// The kubelet reads a relative path from its configuration file's directory.
	if !filepath.IsAbs(ca) {
		ca = filepath.Join(filepath.Dir(n.cfg.Kubelet.Config), ca)
	}
	if filepath.Clean(ca) == n.cfg.Kubelet.ClientCAFile {
		return fmt.Errorf("kubelet.clientCAFile: %s is the client CA of the node's own kubelet (authentication.x509.clientCAFile of %s), which a reset removes and a return home does not write back: name a file of its own, such as %s",
			n.cfg.Kubelet.ClientCAFile, n.cfg.Kubelet.Config, filepath.Join(filepath.Dir(n.cfg.Kubelet.ClientCAFile), "kubelet-client-ca.crt"))
	}
	return nil
}

// Status reports the node as the agent finds it.
func (n *Node) Status(ctx context.Context) (Status, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	st := Status{NodeName: n.cfg.NodeName}
	var err error
	if st.Kubelet.Running, err = n.services.Running(ctx, ServiceKubelet); err != nil {
		return st, err
	}
	if st.KubeProxy.Running, err = n.services.Running(ctx, ServiceKubeProxy); err != nil {
		return st, err
	}
	st.Server = n.joinedServer()
	st.Bootstrapped = st.Server != "" && serverOf(n.cfg.Kubelet.Kubeconfig) == st.Server && hasCredential(n.cfg.Kubelet.Kubeconfig)
	st.CAHash = caHashOf(n.cfg.Kubelet.Kubeconfig)
	if st.PodCIDR, err = podCIDROf(n.cfg.CNIConfigFile); err != nil {
		return st, err
	}
	st.Sandboxes, err = n.runtime.CountSandboxes(ctx)
	return st, err
}

// joinedServer is the server of the kubelet's kubeconfig, else of its
// bootstrap kubeconfig; empty when neither names one.
func (n *Node) joinedServer() string {
	for _, path := range []string{n.cfg.Kubelet.Kubeconfig, n.cfg.Kubelet.BootstrapKubeconfig} {
		if server := serverOf(path); server != "" {
			return server
		}
	}
	return ""
}

// hasCredential reports whether the kubeconfig at path names a server and
// holds a client certificate: embedded, or in a file that exists. A kubelet
// that rotates its certificates writes its kubeconfig, pointing at
// kubelet-client-current.pem, before the certificate is signed.
func hasCredential(path string) bool {
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		return false
	}
	ctx, ok := cfg.Contexts[cfg.CurrentContext]
	if !ok {
		return false
	}
	cluster, auth := cfg.Clusters[ctx.Cluster], cfg.AuthInfos[ctx.AuthInfo]
	if cluster == nil || cluster.Server == "" || auth == nil {
		return false
	}
	if len(auth.ClientCertificateData) > 0 {
		return true
	}
	if auth.ClientCertificate == "" {
		return false
	}
	_, err = os.Stat(auth.ClientCertificate)
	return err == nil
}

// serverOf is the server of the current context of the kubeconfig at path.
func serverOf(path string) string {
	if cluster := clusterOf(path); cluster != nil {
		return cluster.Server
	}
	return ""
}

// caHashOf is pki.BundleHash of the CA bundle of the current context of
// the kubeconfig at path, embedded or in the file it names; "" when there
// is none.
func caHashOf(path string) string {
	cluster := clusterOf(path)
	if cluster == nil {
		return ""
	}
	data := cluster.CertificateAuthorityData
	if len(data) == 0 && cluster.CertificateAuthority != "" {
		data, _ = os.ReadFile(cluster.CertificateAuthority)
	}
	return pki.BundleHash(data)
}

// clusterOf is the cluster of the current context of the kubeconfig at
// path, with file paths resolved; nil when there is none.
func clusterOf(path string) *clientcmdapi.Cluster {
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		return nil
	}
	if ctx, ok := cfg.Contexts[cfg.CurrentContext]; ok {
		return cfg.Clusters[ctx.Cluster]
	}
	return nil
}

// Stop stops kube-proxy, then the kubelet. Pods keep running until Reset.
func (n *Node) Stop(ctx context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, s := range []Service{ServiceKubeProxy, ServiceKubelet} {
		if err := n.services.Stop(ctx, s); err != nil {
			return fmt.Errorf("stop %s: %w", s, err)
		}
	}
	return nil
}

// requireStopped refuses an operation while a service runs.
func (n *Node) requireStopped(ctx context.Context, op string) error {
	for _, s := range []Service{ServiceKubelet, ServiceKubeProxy} {
		running, err := n.services.Running(ctx, s)
		if err != nil {
			return err
		}
		if running {
			return &ConflictError{Reason: fmt.Sprintf("%s runs: %s needs the node stopped (POST %s first)", s, op, PathStop)}
		}
	}
	return nil
}

// Reset takes the node out of whatever cluster it is in: it removes every
// pod sandbox, unmounts what the kubelet mounted, removes the kubelet's
// state and every credential, puts back the node's own configuration, and
// stops the agent's pull proxy (the host's takes its address again when the
// node returns home). It refuses while the kubelet or kube-proxy runs.
func (n *Node) Reset(ctx context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.requireStopped(ctx, "reset"); err != nil {
		return err
	}
	// Read what goes back before anything is removed: a node that cannot
	// be put back is left as it is.
	own := make(map[string][]byte, len(n.savedFiles()))
	for _, f := range n.savedFiles() {
		data, err := os.ReadFile(f.saved)
		if err != nil {
			return fmt.Errorf("put back %s: %w", f.field, err)
		}
		own[f.live] = data
	}
	if err := n.runtime.RemoveSandboxes(ctx); err != nil {
		return fmt.Errorf("remove pod sandboxes: %w", err)
	}
	if err := n.unmount(n.cfg.Kubelet.RootDir); err != nil {
		return fmt.Errorf("unmount the kubelet's volumes: %w", err)
	}
	for _, path := range []string{
		n.cfg.Kubelet.RootDir, n.cfg.Kubelet.CertDir, n.cfg.Kubelet.Kubeconfig,
		n.cfg.Kubelet.BootstrapKubeconfig, n.cfg.Kubelet.ClientCAFile, n.cfg.KubeProxy.Kubeconfig,
	} {
		if err := os.RemoveAll(path); err != nil {
			return err
		}
	}
	for live, data := range own {
		if err := atomicfile.Write(live, data, 0o644); err != nil {
			return err
		}
	}
	return n.setPullProxy(ctx, nil)
}

// Join writes what the kubelet and kube-proxy need to join the cluster req
// names; Start then starts them. Before it writes a file it serves the
// node's pull proxy as req.PullProxy says, or stops it when that is nil
// (setPullProxy), and fails when the proxy cannot listen. It refuses while
// the kubelet and kube-proxy run, and while the kubelet holds a kubeconfig
// of another cluster (Reset first). When the kubelet's kubeconfig is of
// req's cluster but trusts another CA bundle than req.CACertPEM (the
// cluster's CA rotates), Join removes it and the kubelet's certificates,
// so that Start bootstraps them anew with req's token from the cluster's
// signer; its pods and state stay. Repeating it with the same request
// changes nothing.
func (n *Node) Join(ctx context.Context, req JoinRequest) error {
	if err := req.Validate(); err != nil {
		return &BadRequestError{Err: err}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.requireStopped(ctx, "join"); err != nil {
		return err
	}
	if server := serverOf(n.cfg.Kubelet.Kubeconfig); server != "" && server != req.Server {
		return &ConflictError{Reason: fmt.Sprintf("the kubelet is joined to %s: reset the node (POST %s) before it joins %s", server, PathReset, req.Server)}
	}
	files, err := n.joinFiles(req)
	if err != nil {
		return err
	}
	if err := n.setPullProxy(ctx, req.PullProxy); err != nil {
		return err
	}
	if n.trustsAnotherBundle(req) {
		for _, path := range []string{n.cfg.Kubelet.Kubeconfig, n.cfg.Kubelet.CertDir} {
			if err := os.RemoveAll(path); err != nil {
				return fmt.Errorf("remove the kubelet's credentials of the old CA bundle: %w", err)
			}
		}
	}
	for _, f := range files {
		if err := atomicfile.Write(f.path, f.data, f.mode); err != nil {
			return err
		}
	}
	return nil
}

// trustsAnotherBundle reports whether the kubelet holds a kubeconfig of
// req's cluster that trusts another CA bundle than req's.
func (n *Node) trustsAnotherBundle(req JoinRequest) bool {
	kubeconfig := n.cfg.Kubelet.Kubeconfig
	return serverOf(kubeconfig) == req.Server && caHashOf(kubeconfig) != pki.BundleHash(req.CACertPEM)
}

type fileContent struct {
	path string
	data []byte
	mode os.FileMode
}

// joinFiles renders every file Join writes, before any is written.
func (n *Node) joinFiles(req JoinRequest) ([]fileContent, error) {
	bootstrap, err := clientcmd.Write(kubeconfigFor(req, &clientcmdapi.AuthInfo{Token: req.BootstrapToken}))
	if err != nil {
		return nil, err
	}
	clientCert := filepath.Join(n.cfg.Kubelet.CertDir, kubeletClientCert)
	proxyKubeconfig, err := clientcmd.Write(kubeconfigFor(req, &clientcmdapi.AuthInfo{ClientCertificate: clientCert, ClientKey: clientCert}))
	if err != nil {
		return nil, err
	}
	kubelet, err := n.kubeletConfigFor(req)
	if err != nil {
		return nil, err
	}
	proxy, err := n.kubeProxyConfigFor(req)
	if err != nil {
		return nil, err
	}
	files := []fileContent{
		{n.cfg.Kubelet.BootstrapKubeconfig, bootstrap, 0o600},
		{n.cfg.Kubelet.Config, kubelet, 0o644},
		{n.cfg.KubeProxy.Kubeconfig, proxyKubeconfig, 0o600},
		{n.cfg.KubeProxy.Config, proxy, 0o644},
	}
	if len(req.KubeletClientCAPEM) > 0 {
		files = append(files, fileContent{n.cfg.Kubelet.ClientCAFile, req.KubeletClientCAPEM, 0o644})
	}
	if req.PodCIDR != "" {
		cni, err := n.cniConfigFor(req.PodCIDR)
		if err != nil {
			return nil, err
		}
		files = append(files, fileContent{n.cfg.CNIConfigFile, cni, 0o644})
	}
	return files, nil
}

// kubeconfigFor is a kubeconfig for req's server with the user auth.
func kubeconfigFor(req JoinRequest, auth *clientcmdapi.AuthInfo) clientcmdapi.Config {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["cluster"] = &clientcmdapi.Cluster{Server: req.Server, CertificateAuthorityData: req.CACertPEM}
	cfg.AuthInfos["node"] = auth
	cfg.Contexts["node"] = &clientcmdapi.Context{Cluster: "cluster", AuthInfo: "node"}
	cfg.CurrentContext = "node"
	return *cfg
}

// kubeletConfigFor is the node's own kubelet configuration with what req
// changes: the target's DNS, the CA of the kubelet's clients if given, and
// rotated client certificates (and a signed serving certificate if asked).
func (n *Node) kubeletConfigFor(req JoinRequest) ([]byte, error) {
	var cfg kubeletv1beta1.KubeletConfiguration
	if err := readSavedYAML(filepath.Join(n.cfg.SavedDir, savedKubeletConfig), &cfg); err != nil {
		return nil, err
	}
	if len(req.ClusterDNS) > 0 {
		cfg.ClusterDNS = req.ClusterDNS
	}
	if req.ClusterDomain != "" {
		cfg.ClusterDomain = req.ClusterDomain
	}
	if len(req.KubeletClientCAPEM) > 0 {
		cfg.Authentication.X509.ClientCAFile = n.cfg.Kubelet.ClientCAFile
	}
	cfg.RotateCertificates = true
	if req.ServerTLSBootstrap {
		cfg.TLSCertFile, cfg.TLSPrivateKeyFile = "", ""
		cfg.ServerTLSBootstrap = true
	}
	return yaml.Marshal(cfg)
}

// kubeProxyConfigFor is the node's own kube-proxy configuration with the
// kubeconfig Join writes and the target's pod range.
func (n *Node) kubeProxyConfigFor(req JoinRequest) ([]byte, error) {
	var cfg kubeproxyv1alpha1.KubeProxyConfiguration
	if err := readSavedYAML(filepath.Join(n.cfg.SavedDir, savedKubeProxyConfig), &cfg); err != nil {
		return nil, err
	}
	cfg.ClientConnection.Kubeconfig = n.cfg.KubeProxy.Kubeconfig
	if req.ClusterCIDR != "" {
		cfg.ClusterCIDR = req.ClusterCIDR
	}
	return yaml.Marshal(cfg)
}

func readSavedYAML(path string, into any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("the node's own configuration is not saved (the agent saves it when it starts): %w", err)
	}
	if err := yaml.Unmarshal(data, into); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// cniConfigFor is the node's own CNI network list with every IPAM range
// replaced by podCIDR.
func (n *Node) cniConfigFor(podCIDR string) ([]byte, error) {
	data, err := os.ReadFile(filepath.Join(n.cfg.SavedDir, savedCNIConfig))
	if err != nil {
		return nil, fmt.Errorf("the node's own CNI configuration is not saved: %w", err)
	}
	var list map[string]any
	if err := json.Unmarshal(data, &list); err != nil {
		return nil, fmt.Errorf("the node's CNI configuration: %w", err)
	}
	set := 0
	plugins, _ := list["plugins"].([]any)
	for _, p := range plugins {
		plugin, ok := p.(map[string]any)
		if !ok {
			continue
		}
		ipam, _ := plugin["ipam"].(map[string]any)
		if _, ok := ipam["ranges"]; ok {
			ipam["ranges"] = []any{[]any{map[string]any{"subnet": podCIDR}}}
			set++
		}
	}
	if set == 0 {
		return nil, &BadRequestError{Err: fmt.Errorf("podCIDR: the node's CNI configuration %s has no IPAM ranges to put it in", n.cfg.CNIConfigFile)}
	}
	return json.MarshalIndent(list, "", "  ")
}

// podCIDROf is the first IPAM range of the CNI network list at path.
func podCIDROf(path string) (string, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	var list struct {
		Plugins []struct {
			IPAM struct {
				Ranges [][]struct {
					Subnet string `json:"subnet"`
				} `json:"ranges"`
			} `json:"ipam"`
		} `json:"plugins"`
	}
	if err := json.Unmarshal(data, &list); err != nil {
		return "", fmt.Errorf("the node's CNI configuration %s: %w", path, err)
	}
	for _, p := range list.Plugins {
		for _, r := range p.IPAM.Ranges {
			for _, s := range r {
				if s.Subnet != "" {
					return s.Subnet, nil
				}
			}
		}
	}
	return "", nil
}

// Start starts the kubelet, waits until it holds a kubeconfig (at once if
// it has one; after TLS bootstrapping otherwise), then starts kube-proxy,
// which authenticates with the kubelet's client certificate.
func (n *Node) Start(ctx context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.services.Start(ctx, ServiceKubelet); err != nil {
		return fmt.Errorf("start the kubelet: %w", err)
	}
	if err := n.waitBootstrapped(ctx); err != nil {
		return err
	}
	if err := n.services.Start(ctx, ServiceKubeProxy); err != nil {
		return fmt.Errorf("start kube-proxy: %w", err)
	}
	return nil
}

// waitBootstrapped polls until the kubelet's kubeconfig names a server and
// its client certificate exists (hasCredential), and fails if the kubelet
// stops or bootstrapTimeout passes.
func (n *Node) waitBootstrapped(ctx context.Context) error {
	var exited bool
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, n.bootstrapTimeout, true, func(ctx context.Context) (bool, error) {
		if hasCredential(n.cfg.Kubelet.Kubeconfig) {
			return true, nil
		}
		running, err := n.services.Running(ctx, ServiceKubelet)
		if err != nil {
			return false, err
		}
		exited = !running
		return exited, nil
	})
	switch {
	case exited:
		return errors.New("the kubelet exited before it had a kubeconfig: see its log")
	case err != nil:
		return fmt.Errorf("the kubelet has no kubeconfig after %s: its client certificate request was not approved and signed (is the bootstrap token valid, and may its group create node client requests?): %w", n.bootstrapTimeout, err)
	}
	return nil
}
