package devcluster

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
	kubeproxyv1alpha1 "k8s.io/kube-proxy/config/v1alpha1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"sigs.k8s.io/yaml"

	"github.com/nestdev/nest/internal/components"
)

func TestTopology(t *testing.T) {
	nodes, err := Topology("/state", 3)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		name, ip, podCIDR, netns string
	}{
		{"nest-control-plane", "198.51.100.10", "10.244.0.0/24", "nestdev-0"},
		{"nest-worker", "198.51.100.11", "10.244.1.0/24", "nestdev-1"},
		{"nest-worker2", "198.51.100.12", "10.244.2.0/24", "nestdev-2"},
	}
	for i, w := range want {
		n := nodes[i]
		if n.Name != w.name || n.IP.String() != w.ip || n.PodCIDR.String() != w.podCIDR || n.Netns != w.netns {
			t.Errorf("node %d = %s %s %s %s, want %+v", i, n.Name, n.IP, n.PodCIDR, n.Netns, w)
		}
		if len(n.HostVeth) > 15 {
			t.Errorf("veth name %q is longer than IFNAMSIZ-1", n.HostVeth)
		}
	}
	if !nodes[0].ControlPlane() || nodes[1].ControlPlane() {
		t.Error("only the first node is the control plane")
	}
	subnet := netip.MustParsePrefix(NodeSubnet)
	if !subnet.Contains(BridgeIP()) || BridgeIP().String() != "198.51.100.1" {
		t.Errorf("bridge IP %s", BridgeIP())
	}
	apiServerIP := components.KubernetesServiceIP(netip.MustParsePrefix(ServiceCIDR))
	if apiServerIP.String() != "10.96.0.1" || DNSIP().String() != "10.96.0.10" {
		t.Errorf("service IPs %s %s", apiServerIP, DNSIP())
	}
}

func TestTopologyRejectsBadNodeCounts(t *testing.T) {
	for _, n := range []int{0, -1, MaxNodes + 1} {
		_, err := Topology("/s", n)
		if err == nil || !strings.Contains(err.Error(), "--nodes") {
			t.Errorf("Topology(%d) error = %v, want one naming --nodes", n, err)
		}
	}
}

// The last node's addresses must stay inside their ranges.
func TestTopologyLastNodeInRange(t *testing.T) {
	nodes, err := Topology("/s", MaxNodes)
	if err != nil {
		t.Fatal(err)
	}
	last := nodes[len(nodes)-1]
	if !netip.MustParsePrefix(NodeSubnet).Contains(last.IP) || !netip.MustParsePrefix(ClusterCIDR).Contains(last.PodCIDR.Addr()) {
		t.Fatalf("last node %s %s is out of range", last.IP, last.PodCIDR)
	}
}

func TestStateDir(t *testing.T) {
	t.Setenv(StateDirEnv, "")
	if got := StateDir(""); got != DefaultStateDir {
		t.Errorf("default = %s", got)
	}
	t.Setenv(StateDirEnv, "/from/env")
	if got := StateDir(""); got != "/from/env" {
		t.Errorf("env = %s", got)
	}
	if got := StateDir("/from/flag"); got != "/from/flag" {
		t.Errorf("flag = %s", got)
	}
	// A cluster named by the environment: its own directory, or the one
	// the environment gives with it.
	t.Setenv(ClusterEnv, "gpu")
	if got, want := StateDir(""), "/from/env"; got != want {
		t.Errorf("named cluster with %s = %s, want %s", StateDirEnv, got, want)
	}
	t.Setenv(StateDirEnv, "")
	if got, want := StateDir(""), DefaultStateDir+"-gpu"; got != want {
		t.Errorf("named cluster = %s, want %s", got, want)
	}
	// --cluster alone never takes a directory the environment gives for
	// another cluster.
	t.Setenv(StateDirEnv, "/from/env")
	if got, want := (Addressing{Cluster: "other"}).StateDir(""), DefaultStateDir+"-other"; got != want {
		t.Errorf("--cluster other under %s=gpu = %s, want %s", ClusterEnv, got, want)
	}
}

// TestContainerdConfig has the containerd that `make build` builds read the
// rendered config (`containerd config dump`): what counts is what containerd
// makes of it, in its own schema, with no migration.
func TestContainerdConfig(t *testing.T) {
	nodes, _ := Topology("/state", 2)
	data, err := ContainerdConfig(nodes[1], "/usr/lib/cni")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	bin := containerdPath(unitBinDir())
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%v: run `make build-k8s`, which builds containerd from k8s/containerd", err)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(bin, "--config", path, "config", "dump")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("containerd config dump: %v: %s", err, stderr.String())
	}
	// containerd warns, and still starts, on a config it migrates or a key
	// it does not know (a misspelt one): the dump must be silent.
	if stderr.Len() > 0 {
		t.Errorf("containerd warns about the config: %s", stderr.String())
	}
	var cfg map[string]any
	if _, err := toml.Decode(stdout.String(), &cfg); err != nil {
		t.Fatalf("dump is not TOML: %v", err)
	}
	plugins := cfg["plugins"].(map[string]any)
	section := func(name string) map[string]any {
		m, ok := plugins[name].(map[string]any)
		if !ok {
			t.Fatalf("plugin %s missing from the dump", name)
		}
		return m
	}
	images, runtime := section("io.containerd.cri.v1.images"), section("io.containerd.cri.v1.runtime")
	cni := runtime["cni"].(map[string]any)
	checks := map[string][2]any{
		"root":                   {cfg["root"], "/state/nodes/nest-worker/containerd/root"},
		"grpc address":           {section("io.containerd.server.v1.grpc")["address"], nodes[1].ContainerdSocket()},
		"ttrpc address":          {section("io.containerd.server.v1.ttrpc")["address"], nodes[1].ContainerdSocket() + ".ttrpc"},
		"NRI disabled":           {section("io.containerd.nri.v1.nri")["disable"], true},
		"sandbox image":          {images["pinned_images"].(map[string]any)["sandbox"], PauseImage},
		"registry config_path":   {images["registry"].(map[string]any)["config_path"], "/state/nodes/nest-worker/" + containerdCertsDir},
		"restrict_oom_score_adj": {runtime["restrict_oom_score_adj"], true},
		"CNI conf_dir":           {cni["conf_dir"], "/state/nodes/nest-worker/cni/net.d"},
		"CNI bin_dirs":           {fmt.Sprint(cni["bin_dirs"]), "[/usr/lib/cni]"},
		"stream server":          {section("io.containerd.grpc.v1.cri")["stream_server_address"], "127.0.0.1"},
		"unprivileged ports":     {runtime["enable_unprivileged_ports"], false},
		"unprivileged ICMP":      {runtime["enable_unprivileged_icmp"], false},
	}
	for what, c := range checks {
		if c[0] != c[1] {
			t.Errorf("%s = %v, want %v", what, c[0], c[1])
		}
	}
}

// unitBinDir is where `make build` puts the binaries, seen from this
// package's directory (go test runs there): $NEST_BIN_DIR, else _output/bin.
func unitBinDir() string {
	if d := os.Getenv("NEST_BIN_DIR"); d != "" {
		return d
	}
	return filepath.Join("..", "..", "_output", "bin")
}

func TestCNIConfig(t *testing.T) {
	nodes, _ := Topology("/state", 2)
	data, err := CNIConfig(nodes[1])
	if err != nil {
		t.Fatal(err)
	}
	var conf struct {
		Plugins []struct {
			Type        string `json:"type"`
			HairpinMode bool   `json:"hairpinMode"`
			IPAM        struct {
				DataDir string                `json:"dataDir"`
				Ranges  [][]map[string]string `json:"ranges"`
			} `json:"ipam"`
		} `json:"plugins"`
	}
	if err := json.Unmarshal(data, &conf); err != nil {
		t.Fatal(err)
	}
	bridge := conf.Plugins[0]
	if bridge.Type != "bridge" || !bridge.HairpinMode {
		t.Errorf("first plugin = %+v", bridge)
	}
	if got := bridge.IPAM.Ranges[0][0]["subnet"]; got != "10.244.1.0/24" {
		t.Errorf("subnet = %s", got)
	}
	if !strings.HasPrefix(bridge.IPAM.DataDir, nodes[1].Dir) {
		t.Errorf("IPAM data dir %s is not the node's own", bridge.IPAM.DataDir)
	}
	if conf.Plugins[1].Type != "portmap" {
		t.Errorf("second plugin = %s", conf.Plugins[1].Type)
	}
}

func TestKubeletConfig(t *testing.T) {
	nodes, _ := Topology("/state", 2)
	data, err := KubeletConfig(nodes[1], KubeletPaths{ClientCAFile: "/ca.crt", TLSCertFile: "/k.crt", TLSKeyFile: "/k.key", ResolvConf: "/resolv"})
	if err != nil {
		t.Fatal(err)
	}
	var cfg kubeletv1beta1.KubeletConfiguration
	if err := yaml.UnmarshalStrict(data, &cfg); err != nil {
		t.Fatal(err)
	}
	checks := map[string]bool{
		"kind":              cfg.Kind == "KubeletConfiguration",
		"cgroupfs driver":   cfg.CgroupDriver == "cgroupfs",
		"cgroup root":       cfg.CgroupRoot == "/nest-dev/nest-worker",
		"cgroup v1 allowed": cfg.FailCgroupV1 != nil && !*cfg.FailCgroupV1,
		"runtime endpoint":  cfg.ContainerRuntimeEndpoint == "unix://"+nodes[1].ContainerdSocket(),
		"cluster DNS":       len(cfg.ClusterDNS) == 1 && cfg.ClusterDNS[0] == "10.96.0.10",
		"no anonymous":      cfg.Authentication.Anonymous.Enabled != nil && !*cfg.Authentication.Anonymous.Enabled,
		"webhook authz":     cfg.Authorization.Mode == kubeletv1beta1.KubeletAuthorizationModeWebhook,
		"read-only off":     cfg.ReadOnlyPort == 0,
		"own pod logs":      strings.HasPrefix(cfg.PodLogsDir, nodes[1].Dir),
		"no image GC":       cfg.ImageGCHighThresholdPercent != nil && *cfg.ImageGCHighThresholdPercent == 100,
		"bound to node IP":  cfg.Address == "198.51.100.11",
		"empty resolv":      cfg.ResolverConfig != nil && *cfg.ResolverConfig == "/resolv",
	}
	for name, ok := range checks {
		if !ok {
			t.Errorf("kubelet config: %s is wrong:\n%s", name, data)
		}
	}
}

func TestKubeProxyConfig(t *testing.T) {
	nodes, _ := Topology("/state", 2)
	data, err := KubeProxyConfig(nodes[0], "/kp.conf")
	if err != nil {
		t.Fatal(err)
	}
	var cfg kubeproxyv1alpha1.KubeProxyConfiguration
	if err := yaml.UnmarshalStrict(data, &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Mode != "iptables" || cfg.HostnameOverride != "nest-control-plane" || cfg.ClusterCIDR != ClusterCIDR ||
		cfg.ClientConnection.Kubeconfig != "/kp.conf" || cfg.Conntrack.MaxPerCore == nil || *cfg.Conntrack.MaxPerCore != 0 {
		t.Errorf("kube-proxy config:\n%s", data)
	}
}

func TestComponentArgs(t *testing.T) {
	l := Layout{Root: "/state"}
	nodes, _ := Topology("/state", 2)
	api := APIServerArgs(l, nodes[0])
	for flag, want := range map[string]string{
		"advertise-address":               "198.51.100.10",
		"service-cluster-ip-range":        ServiceCIDR,
		"authorization-mode":              "Node,RBAC",
		"enable-admission-plugins":        "NodeRestriction",
		"kubelet-preferred-address-types": "InternalIP,Hostname",
		"etcd-servers":                    "http://127.0.0.1:2379",
		"client-ca-file":                  "/state/pki/ca.crt",
	} {
		if api[flag] != want {
			t.Errorf("kube-apiserver --%s = %q, want %q", flag, api[flag], want)
		}
	}
	if kc := ControllerManagerArgs(l)["root-ca-file"]; kc != "/state/pki/ca.crt" {
		t.Errorf("controller-manager root CA = %q: projected service-account volumes need it", kc)
	}
	kubelet := KubeletArgs(nodes[1])
	if kubelet["node-ip"] != "198.51.100.11" || kubelet["hostname-override"] != "nest-worker" {
		t.Errorf("kubelet args %v", kubelet)
	}
	etcd := EtcdArgs(l, nodes[0])
	for _, f := range []string{"listen-client-urls", "listen-peer-urls", "listen-metrics-urls"} {
		if !strings.Contains(etcd[f], "127.0.0.1") {
			t.Errorf("etcd --%s = %s must stay on loopback", f, etcd[f])
		}
	}
	rendered := Args{"b": "2", "a": "1"}.Render()
	if strings.Join(rendered, " ") != "--a=1 --b=2" {
		t.Errorf("Render = %v, want sorted flags", rendered)
	}
}

// The agent writes exactly the files the kubelet and kube-proxy of its node
// read, and its configuration is one the agent accepts.
func TestAgentConfigNamesTheNodesOwnFiles(t *testing.T) {
	l := Layout{Root: "/state"}
	nodes, err := Topology(l.Root, 2)
	if err != nil {
		t.Fatal(err)
	}
	cfg := AgentConfig(l, nodes[1])
	if err := cfg.Validate(); err != nil {
		t.Fatalf("the agent refuses its own configuration: %v", err)
	}
	kubelet, proxy := KubeletArgs(nodes[1]), KubeProxyArgs(nodes[1])
	for field, pair := range map[string][2]string{
		"kubelet.config":              {cfg.Kubelet.Config, kubelet["config"]},
		"kubelet.kubeconfig":          {cfg.Kubelet.Kubeconfig, kubelet["kubeconfig"]},
		"kubelet.bootstrapKubeconfig": {cfg.Kubelet.BootstrapKubeconfig, kubelet["bootstrap-kubeconfig"]},
		"kubelet.certDir":             {cfg.Kubelet.CertDir, kubelet["cert-dir"]},
		"kubelet.rootDir":             {cfg.Kubelet.RootDir, kubelet["root-dir"]},
		"kubeProxy.config":            {cfg.KubeProxy.Config, proxy["config"]},
		"containerRuntimeSocket":      {cfg.ContainerRuntimeSocket, nodes[1].ContainerdSocket()},
	} {
		if pair[0] == "" || pair[0] != pair[1] {
			t.Errorf("%s = %q, the process reads %q", field, pair[0], pair[1])
		}
	}
	if cfg.NodeName != "nest-worker" || cfg.Listen != "198.51.100.11:10260" {
		t.Errorf("agent of %s listens at %s", cfg.NodeName, cfg.Listen)
	}
}
