package agent

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

const fullConfigYAML = `nodeName: node-a
listen: 198.51.100.11:10260
tls:
  certFile: /etc/nest-agent/tls.crt
  keyFile: /etc/nest-agent/tls.key
  clientCAFile: /etc/nest-agent/ca.crt
kubelet:
  config: /var/lib/kubelet/config.yaml
  kubeconfig: /etc/kubernetes/kubelet.conf
  bootstrapKubeconfig: /etc/kubernetes/bootstrap-kubelet.conf
  certDir: /var/lib/kubelet/pki
  rootDir: /var/lib/kubelet
  clientCAFile: /etc/kubernetes/pki/kubelet-client-ca.crt
kubeProxy:
  config: /var/lib/kube-proxy/config.conf
  kubeconfig: /var/lib/kube-proxy/kubeconfig.conf
cniConfigFile: /etc/cni/net.d/10-bridge.conflist
containerRuntimeSocket: /run/containerd/containerd.sock
savedDir: /var/lib/nest-agent/saved
`

// fullConfig is what fullConfigYAML describes.
func fullConfig() Config {
	return Config{
		NodeName: "node-a",
		Listen:   "198.51.100.11:10260",
		TLS: TLSFiles{
			CertFile:     "/etc/nest-agent/tls.crt",
			KeyFile:      "/etc/nest-agent/tls.key",
			ClientCAFile: "/etc/nest-agent/ca.crt",
		},
		AllowedClients: []string{ManagerIdentity},
		Kubelet: KubeletFiles{
			Config:              "/var/lib/kubelet/config.yaml",
			Kubeconfig:          "/etc/kubernetes/kubelet.conf",
			BootstrapKubeconfig: "/etc/kubernetes/bootstrap-kubelet.conf",
			CertDir:             "/var/lib/kubelet/pki",
			RootDir:             "/var/lib/kubelet",
			ClientCAFile:        "/etc/kubernetes/pki/kubelet-client-ca.crt",
		},
		KubeProxy: KubeProxyFiles{
			Config:     "/var/lib/kube-proxy/config.conf",
			Kubeconfig: "/var/lib/kube-proxy/kubeconfig.conf",
		},
		CNIConfigFile:          "/etc/cni/net.d/10-bridge.conflist",
		ContainerRuntimeSocket: "/run/containerd/containerd.sock",
		SavedDir:               "/var/lib/nest-agent/saved",
	}
}

func writeConfigFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "nest-agent.yaml")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// errorLines splits an errors.Join message into its errors.
func errorLines(err error) []string {
	if err == nil {
		return nil
	}
	return strings.Split(err.Error(), "\n")
}

func TestLoadConfigReadsAFullConfigAndDefaultsAllowedClients(t *testing.T) {
	got, err := LoadConfig(writeConfigFile(t, fullConfigYAML))
	if err != nil {
		t.Fatal(err)
	}
	if want := fullConfig(); !reflect.DeepEqual(got, want) {
		t.Errorf("LoadConfig() =\n%+v\nwant\n%+v", got, want)
	}
}

func TestLoadConfigKeepsAllowedClients(t *testing.T) {
	got, err := LoadConfig(writeConfigFile(t, fullConfigYAML+"allowedClients: [nest-manager, nest-debug]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{ManagerIdentity, "nest-debug"}; !reflect.DeepEqual(got.AllowedClients, want) {
		t.Errorf("AllowedClients = %v, want %v", got.AllowedClients, want)
	}
}

func TestConfigMarshalRoundTripsThroughLoadConfig(t *testing.T) {
	want := fullConfig()
	data, err := want.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	got, err := LoadConfig(writeConfigFile(t, string(data)))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("LoadConfig(Marshal()) =\n%+v\nwant\n%+v", got, want)
	}
}

func TestLoadConfigRefusesUnknownField(t *testing.T) {
	_, err := LoadConfig(writeConfigFile(t, fullConfigYAML+"podCIDR: 10.244.1.0/24\n"))
	if err == nil || !strings.Contains(err.Error(), "podCIDR") {
		t.Errorf("LoadConfig() = %v, want an error naming the unknown field podCIDR", err)
	}
}

func TestLoadConfigRefusesUnknownNestedField(t *testing.T) {
	yaml := strings.Replace(fullConfigYAML, "  rootDir: /var/lib/kubelet\n", "  rootDir: /var/lib/kubelet\n  dataDir: /data\n", 1)
	if _, err := LoadConfig(writeConfigFile(t, yaml)); err == nil || !strings.Contains(err.Error(), "dataDir") {
		t.Errorf("LoadConfig() = %v, want an error naming the unknown field dataDir", err)
	}
}

func TestLoadConfigMissingFile(t *testing.T) {
	if _, err := LoadConfig(filepath.Join(t.TempDir(), "absent.yaml")); !os.IsNotExist(err) {
		t.Errorf("LoadConfig() = %v, want a not-exist error", err)
	}
}

func TestLoadConfigNamesTheFileAndTheBadField(t *testing.T) {
	path := writeConfigFile(t, strings.Replace(fullConfigYAML, "rootDir: /var/lib/kubelet", "rootDir: var/lib/kubelet", 1))
	_, err := LoadConfig(path)
	if err == nil || !strings.HasPrefix(err.Error(), path+": ") || !strings.Contains(err.Error(), "kubelet.rootDir: ") {
		t.Errorf("LoadConfig() = %v, want an error naming %s and kubelet.rootDir", err, path)
	}
}

func TestConfigValidateAcceptsFullConfig(t *testing.T) {
	if err := fullConfig().Validate(); err != nil {
		t.Errorf("Validate() = %v", err)
	}
}

func TestConfigValidateNamesEachBadPath(t *testing.T) {
	fields := map[string]func(c *Config) *string{
		"tls.certFile":                func(c *Config) *string { return &c.TLS.CertFile },
		"tls.keyFile":                 func(c *Config) *string { return &c.TLS.KeyFile },
		"tls.clientCAFile":            func(c *Config) *string { return &c.TLS.ClientCAFile },
		"kubelet.config":              func(c *Config) *string { return &c.Kubelet.Config },
		"kubelet.kubeconfig":          func(c *Config) *string { return &c.Kubelet.Kubeconfig },
		"kubelet.bootstrapKubeconfig": func(c *Config) *string { return &c.Kubelet.BootstrapKubeconfig },
		"kubelet.certDir":             func(c *Config) *string { return &c.Kubelet.CertDir },
		"kubelet.rootDir":             func(c *Config) *string { return &c.Kubelet.RootDir },
		"kubelet.clientCAFile":        func(c *Config) *string { return &c.Kubelet.ClientCAFile },
		"kubeProxy.config":            func(c *Config) *string { return &c.KubeProxy.Config },
		"kubeProxy.kubeconfig":        func(c *Config) *string { return &c.KubeProxy.Kubeconfig },
		"cniConfigFile":               func(c *Config) *string { return &c.CNIConfigFile },
		"containerRuntimeSocket":      func(c *Config) *string { return &c.ContainerRuntimeSocket },
		"savedDir":                    func(c *Config) *string { return &c.SavedDir },
	}
	if n := len(fullConfig().paths()); n != len(fields) {
		t.Fatalf("Config has %d paths, the test knows %d", n, len(fields))
	}
	bad := map[string]string{
		"relative":           "var/lib/x",
		"unclean":            "/var/lib/../lib/x",
		"trailing slash":     "/var/lib/x/",
		"root":               "/",
		"empty":              "",
		"dot":                ".",
		"double slash":       "//var/lib/x",
		"relative with dots": "../x",
	}
	for field, ptr := range fields {
		for name, value := range bad {
			t.Run(field+"/"+name, func(t *testing.T) {
				c := fullConfig()
				*ptr(&c) = value
				lines := errorLines(c.Validate())
				if len(lines) != 1 || !strings.HasPrefix(lines[0], field+": ") {
					t.Errorf("Validate() = %q, want one error naming %s", lines, field)
				}
			})
		}
	}
}

func TestConfigValidateNamesBadFields(t *testing.T) {
	tests := []struct {
		name   string
		field  string
		mutate func(c *Config)
	}{
		{"nodeName upper case", "nodeName", func(c *Config) { c.NodeName = "Node-A" }},
		{"nodeName underscore", "nodeName", func(c *Config) { c.NodeName = "node_a" }},
		{"nodeName empty", "nodeName", func(c *Config) { c.NodeName = "" }},
		{"listen without port", "listen", func(c *Config) { c.Listen = "198.51.100.11" }},
		{"listen empty", "listen", func(c *Config) { c.Listen = "" }},
		{"listen bare IPv6", "listen", func(c *Config) { c.Listen = "2001:db8::1:10260" }},
		{"allowedClients blank", "allowedClients[1]", func(c *Config) { c.AllowedClients = []string{ManagerIdentity, " "} }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := fullConfig()
			tt.mutate(&c)
			lines := errorLines(c.Validate())
			if len(lines) != 1 || !strings.HasPrefix(lines[0], tt.field+": ") {
				t.Errorf("Validate() = %q, want one error naming %s", lines, tt.field)
			}
		})
	}
}

func TestConfigValidateAcceptsListenForms(t *testing.T) {
	for _, listen := range []string{":10260", "[2001:db8::1]:10260", "node-a.example:10260"} {
		c := fullConfig()
		c.Listen = listen
		if err := c.Validate(); err != nil {
			t.Errorf("Validate() with listen %q = %v", listen, err)
		}
	}
}

func TestConfigValidateReportsEveryBadField(t *testing.T) {
	c := fullConfig()
	c.NodeName = "Node-A"
	c.Listen = "nowhere"
	c.Kubelet.RootDir = "/"
	c.SavedDir = ""
	lines := errorLines(c.Validate())
	for _, field := range []string{"nodeName", "listen", "kubelet.rootDir", "savedDir"} {
		found := false
		for _, l := range lines {
			found = found || strings.HasPrefix(l, field+": ")
		}
		if !found {
			t.Errorf("Validate() = %q, want an error naming %s", lines, field)
		}
	}
}

func TestLoadConfigReadsTheSystemdSection(t *testing.T) {
	got, err := LoadConfig(writeConfigFile(t, fullConfigYAML+"systemd:\n  kubeletUnit: kubelet-nest.service\n  kubeProxyUnit: kube-proxy@eth0.service\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := SystemdUnits{KubeletUnit: "kubelet-nest.service", KubeProxyUnit: "kube-proxy@eth0.service"}
	if got.Systemd != want {
		t.Errorf("Systemd = %+v, want %+v", got.Systemd, want)
	}
}

func TestSystemdUnitsDefault(t *testing.T) {
	for _, tt := range []struct {
		units       SystemdUnits
		s           Service
		unit, field string
	}{
		{SystemdUnits{}, ServiceKubelet, "kubelet.service", "systemd.kubeletUnit"},
		{SystemdUnits{}, ServiceKubeProxy, "kube-proxy.service", "systemd.kubeProxyUnit"},
		{SystemdUnits{KubeletUnit: "k.service"}, ServiceKubelet, "k.service", "systemd.kubeletUnit"},
		{SystemdUnits{KubeletUnit: "k.service"}, ServiceKubeProxy, "kube-proxy.service", "systemd.kubeProxyUnit"},
	} {
		unit, field, err := tt.units.Unit(tt.s)
		if err != nil || unit != tt.unit || field != tt.field {
			t.Errorf("%+v.Unit(%s) = %q, %q, %v; want %q, %q", tt.units, tt.s, unit, field, err, tt.unit, tt.field)
		}
	}
	if _, _, err := (SystemdUnits{}).Unit("containerd"); err == nil {
		t.Error("Unit(containerd) found a unit")
	}
}

func TestConfigMarshalOmitsAnEmptySystemdSection(t *testing.T) {
	data, err := fullConfig().Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), "systemd") {
		t.Errorf("Marshal() wrote a systemd section for none:\n%s", data)
	}
	c := fullConfig()
	c.Systemd = SystemdUnits{KubeletUnit: "kubelet-nest.service"}
	data, err = c.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	got, err := LoadConfig(writeConfigFile(t, string(data)))
	if err != nil || got.Systemd != c.Systemd {
		t.Errorf("LoadConfig(Marshal()) systemd = %+v, %v; want %+v", got.Systemd, err, c.Systemd)
	}
}

func TestConfigValidateAcceptsSystemdUnitNames(t *testing.T) {
	for _, name := range []string{"kubelet.service", "kubelet-nest.service", "snap.kubelet.daemon.service", "kubelet@node-a.service", `kube\x2dproxy.service`, "a:b_c.service"} {
		c := fullConfig()
		c.Systemd.KubeletUnit = name
		if err := c.Validate(); err != nil {
			t.Errorf("Validate() with systemd.kubeletUnit %q = %v", name, err)
		}
	}
}

func TestConfigValidateNamesBadSystemdUnits(t *testing.T) {
	bad := map[string]string{
		"no suffix":       "kubelet",
		"a socket":        "kubelet.socket",
		"absolute path":   "/etc/systemd/system/kubelet.service",
		"relative path":   "system/kubelet.service",
		"dot dot":         "../kubelet.service",
		"a space":         "kube let.service",
		"a template":      "kubelet@.service",
		"only the suffix": ".service",
		"a newline":       "kubelet.service\n",
		"too long":        strings.Repeat("k", 250) + ".service",
	}
	for _, field := range []string{"systemd.kubeletUnit", "systemd.kubeProxyUnit"} {
		for name, value := range bad {
			t.Run(field+"/"+name, func(t *testing.T) {
				c := fullConfig()
				if field == "systemd.kubeletUnit" {
					c.Systemd.KubeletUnit = value
				} else {
					c.Systemd.KubeProxyUnit = value
				}
				lines := errorLines(c.Validate())
				if len(lines) != 1 || !strings.HasPrefix(lines[0], field+": must be a plain systemd service name") {
					t.Errorf("Validate() = %q, want one error naming %s", lines, field)
				}
			})
		}
	}
}

func TestConfigValidateRefusesOneUnitForBothServices(t *testing.T) {
	for _, units := range []SystemdUnits{
		{KubeletUnit: "node.service", KubeProxyUnit: "node.service"},
		{KubeProxyUnit: "kubelet.service"},
		{KubeletUnit: "kube-proxy.service"},
	} {
		c := fullConfig()
		c.Systemd = units
		lines := errorLines(c.Validate())
		if len(lines) != 1 || !strings.HasPrefix(lines[0], "systemd.kubeProxyUnit: must differ from systemd.kubeletUnit") {
			t.Errorf("Validate() with %+v = %q, want one error naming systemd.kubeProxyUnit", units, lines)
		}
	}
}

// The example configuration the systemd packaging ships must load as it is.
func TestDeployedExampleConfigLoads(t *testing.T) {
	path := filepath.Join("..", "..", "deploy", "systemd", "agent.yaml")
	c, err := LoadConfig(path)
	if err != nil {
		t.Fatalf("LoadConfig(%s) = %v", path, err)
	}
	for _, tt := range []struct{ field, got, want string }{
		{"tls.certFile", c.TLS.CertFile, filepath.Join("/etc/nest/pki", ServingCertFile)},
		{"tls.keyFile", c.TLS.KeyFile, filepath.Join("/etc/nest/pki", ServingKeyFile)},
		{"tls.clientCAFile", c.TLS.ClientCAFile, filepath.Join("/etc/nest/pki", CACertFile)},
		{"systemd.kubeletUnit", c.Systemd.KubeletUnit, DefaultKubeletUnit},
		{"systemd.kubeProxyUnit", c.Systemd.KubeProxyUnit, DefaultKubeProxyUnit},
	} {
		if tt.got != tt.want {
			t.Errorf("%s: %s = %q, want %q (what `nest agent certs` writes, the units' defaults)", path, tt.field, tt.got, tt.want)
		}
	}
	// kubeadm's kubelet trusts /etc/kubernetes/pki/ca.crt for its clients,
	// which a reset must not remove (checkKubeletClientCA).
	if c.Kubelet.ClientCAFile == "/etc/kubernetes/pki/ca.crt" {
		t.Errorf("%s: kubelet.clientCAFile is the node's own kubelet client CA", path)
	}
}
