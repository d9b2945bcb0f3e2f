package agent

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/nestdev/nest/internal/testutil"
)

// recorder is the log of every call the fakes take, in order: "start
// kubelet", "stop kube-proxy", "running kubelet", "count sandboxes",
// "remove sandboxes", "unmount <dir>".
type recorder struct {
	mu    sync.Mutex
	calls []string
}

func (r *recorder) add(call string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, call)
}

// all is every call so far.
func (r *recorder) all() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}

// changes is every call so far but the queries (running, count).
func (r *recorder) changes() []string {
	var out []string
	for _, c := range r.all() {
		if !strings.HasPrefix(c, "running ") && c != "count sandboxes" {
			out = append(out, c)
		}
	}
	return out
}

// fakeServices keeps a running flag per service. Start and Stop set it and
// then call the hook, if any, outside the lock.
type fakeServices struct {
	rec *recorder

	mu      sync.Mutex
	running map[Service]bool
	onStart func(Service)
	stopErr map[Service]error
}

func newFakeServices(rec *recorder) *fakeServices {
	return &fakeServices{rec: rec, running: map[Service]bool{}, stopErr: map[Service]error{}}
}

func (f *fakeServices) Running(_ context.Context, s Service) (bool, error) {
	f.rec.add("running " + string(s))
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.running[s], nil
}

func (f *fakeServices) Start(_ context.Context, s Service) error {
	f.rec.add("start " + string(s))
	f.mu.Lock()
	f.running[s] = true
	hook := f.onStart
	f.mu.Unlock()
	if hook != nil {
		hook(s)
	}
	return nil
}

func (f *fakeServices) Stop(_ context.Context, s Service) error {
	f.rec.add("stop " + string(s))
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.stopErr[s]; err != nil {
		return err
	}
	f.running[s] = false
	return nil
}

func (f *fakeServices) set(s Service, running bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.running[s] = running
}

func (f *fakeServices) isRunning(s Service) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.running[s]
}

func (f *fakeServices) setOnStart(hook func(Service)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.onStart = hook
}

// fakeRuntime holds a number of sandboxes.
type fakeRuntime struct {
	rec       *recorder
	mu        sync.Mutex
	sandboxes int
}

func (r *fakeRuntime) CountSandboxes(context.Context) (int, error) {
	r.rec.add("count sandboxes")
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sandboxes, nil
}

func (r *fakeRuntime) RemoveSandboxes(context.Context) error {
	r.rec.add("remove sandboxes")
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sandboxes = 0
	return nil
}

// The node's own configuration, as the fixture writes it.
const (
	ownKubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  x509:
    clientCAFile: /etc/kubernetes/pki/ca.crt
clusterDNS:
- 10.96.0.10
clusterDomain: cluster.local
tlsCertFile: /etc/kubernetes/pki/kubelet.crt
tlsPrivateKeyFile: /etc/kubernetes/pki/kubelet.key
`
	ownKubeProxyConfig = `apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: /var/lib/kube-proxy/kubeconfig.conf
clusterCIDR: 10.244.0.0/16
mode: iptables
`
	ownPodCIDR   = "10.244.1.0/24"
	ownCNIConfig = `{
  "cniVersion": "1.0.0",
  "name": "nest",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "ipMasq": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "10.244.1.0/24"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`
)

// testEnv is a Node whose every path lives under a temporary directory,
// with fake services, runtime and unmount.
type testEnv struct {
	root     string
	cfg      Config
	node     *Node
	rec      *recorder
	services *fakeServices
	runtime  *fakeRuntime
}

// newTestEnv writes the node's own configuration and a kubelet kubeconfig
// of homeServer, but does not save the configuration (SaveOwnConfig).
func newTestEnv(t *testing.T) *testEnv {
	t.Helper()
	root := t.TempDir()
	p := func(elem ...string) string { return filepath.Join(append([]string{root}, elem...)...) }
	cfg := Config{
		NodeName: "node-a",
		Listen:   "127.0.0.1:10260",
		TLS: TLSFiles{
			CertFile:     p("etc", "nest-agent", "tls.crt"),
			KeyFile:      p("etc", "nest-agent", "tls.key"),
			ClientCAFile: p("etc", "nest-agent", "ca.crt"),
		},
		AllowedClients: []string{ManagerIdentity},
		Kubelet: KubeletFiles{
			Config:              p("etc", "kubelet", "config.yaml"),
			Kubeconfig:          p("etc", "kubernetes", "kubelet.conf"),
			BootstrapKubeconfig: p("etc", "kubernetes", "bootstrap-kubelet.conf"),
			CertDir:             p("etc", "kubelet", "pki"),
			RootDir:             p("var", "lib", "kubelet"),
			ClientCAFile:        p("etc", "kubernetes", "pki", "kubelet-client-ca.crt"),
		},
		KubeProxy: KubeProxyFiles{
			Config:     p("etc", "kube-proxy", "config.yaml"),
			Kubeconfig: p("etc", "kube-proxy", "kubeconfig"),
		},
		CNIConfigFile:          p("etc", "cni", "net.d", "10-nest.conflist"),
		ContainerRuntimeSocket: p("run", "containerd", "containerd.sock"),
		SavedDir:               p("var", "lib", "nest-agent", "saved"),
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("the fixture's configuration: %v", err)
	}
	testutil.WriteFile(t, cfg.Kubelet.Config, ownKubeletConfig)
	testutil.WriteFile(t, cfg.KubeProxy.Config, ownKubeProxyConfig)
	testutil.WriteFile(t, cfg.CNIConfigFile, ownCNIConfig)
	writeKubeconfig(t, cfg.Kubelet.Kubeconfig, homeServer)
	testutil.WriteFile(t, filepath.Join(cfg.Kubelet.CertDir, kubeletClientCert), "client certificate and key")
	testutil.WriteFile(t, filepath.Join(cfg.Kubelet.RootDir, "pods", "uid", "volumes", "data"), "pod data")

	rec := &recorder{}
	env := &testEnv{root: root, cfg: cfg, rec: rec, services: newFakeServices(rec), runtime: &fakeRuntime{rec: rec}}
	env.node = NewNode(cfg, env.services)
	env.node.runtime = env.runtime
	env.node.unmount = func(root string) error {
		rec.add("unmount " + root)
		return nil
	}
	env.node.bootstrapTimeout = 10 * time.Second
	return env
}

// newSavedEnv is newTestEnv after SaveOwnConfig, as Run leaves it.
func newSavedEnv(t *testing.T) *testEnv {
	t.Helper()
	env := newTestEnv(t)
	if err := env.node.SaveOwnConfig(); err != nil {
		t.Fatal(err)
	}
	return env
}

// newResetEnv is a saved node whose kubelet has no kubeconfig: reset, or
// never joined.
func newResetEnv(t *testing.T) *testEnv {
	t.Helper()
	env := newSavedEnv(t)
	if err := os.Remove(env.cfg.Kubelet.Kubeconfig); err != nil {
		t.Fatal(err)
	}
	return env
}

// kubeconfigBytes is a kubeconfig for server whose user has an embedded
// client certificate, as a kubelet's after TLS bootstrapping (the agent
// looks only at its presence).
func kubeconfigBytes(t *testing.T, server string) []byte {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["home"] = &clientcmdapi.Cluster{Server: server}
	cfg.AuthInfos["kubelet"] = &clientcmdapi.AuthInfo{ClientCertificateData: []byte("client certificate"), ClientKeyData: []byte("key")}
	cfg.Contexts["home"] = &clientcmdapi.Context{Cluster: "home", AuthInfo: "kubelet"}
	cfg.CurrentContext = "home"
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func writeKubeconfig(t *testing.T, path, server string) {
	t.Helper()
	testutil.WriteFile(t, path, string(kubeconfigBytes(t, server)))
}

func assertAbsent(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Errorf("%s exists (%v), want it removed", path, err)
	}
}

func assertExists(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Lstat(path); err != nil {
		t.Errorf("%s: %v, want it kept", path, err)
	}
}

// snapshot is every regular file under the environment's root, by path.
func (env *testEnv) snapshot(t *testing.T) map[string]string {
	t.Helper()
	files := map[string]string{}
	err := filepath.WalkDir(env.root, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		files[path] = string(data)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}
