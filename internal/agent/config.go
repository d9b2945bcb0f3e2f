package agent

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"
)

// Config is the agent's configuration file (YAML). The paths in it are the
// only files and directories the agent writes or removes: a request can name
// none.
type Config struct {
	// NodeName is the node's name; the agent's serving certificate names it.
	NodeName string `json:"nodeName"`
	// Listen is host:port, normally the node's address and DefaultPort.
	Listen string `json:"listen"`
	// TLS is the agent's serving certificate and the CA its clients' must
	// chain to (the Nest agent CA), as PEM files.
	TLS TLSFiles `json:"tls"`
	// AllowedClients are the client certificate common names the agent
	// serves; default [ManagerIdentity].
	AllowedClients []string `json:"allowedClients,omitempty"`
	// Kubelet and KubeProxy are the files of those services.
	Kubelet   KubeletFiles   `json:"kubelet"`
	KubeProxy KubeProxyFiles `json:"kubeProxy"`
	// CNIConfigFile is the node's CNI network list, which the container
	// runtime reads.
	CNIConfigFile string `json:"cniConfigFile"`
	// ContainerRuntimeSocket is the CRI socket (a unix socket path) of the
	// node's container runtime.
	ContainerRuntimeSocket string `json:"containerRuntimeSocket"`
	// SavedDir holds the copies of the node's own kubelet, kube-proxy and CNI
	// configuration that the agent makes when it first starts and puts back
	// on every Reset.
	SavedDir string `json:"savedDir"`
	// Systemd names the units of the kubelet and kube-proxy where systemd
	// runs them (`nest agent`). Optional: the units default to kubelet.service
	// and kube-proxy.service, and the local host cluster, which runs them as
	// processes, ignores it.
	Systemd SystemdUnits `json:"systemd,omitzero"`
}

// SystemdUnits are the systemd units `nest agent` stops and starts. An empty
// name is the default: DefaultKubeletUnit, DefaultKubeProxyUnit. Defaults
// are applied where the units are used, not when the file is read, so a
// configuration without the section reads back as written.
type SystemdUnits struct {
	KubeletUnit   string `json:"kubeletUnit,omitempty"`
	KubeProxyUnit string `json:"kubeProxyUnit,omitempty"`
}

// The units of kubeadm-style hosts, whose packages name them so.
const (
	DefaultKubeletUnit   = "kubelet.service"
	DefaultKubeProxyUnit = "kube-proxy.service"
)

// Unit is the unit of service s, and the field that names it (for errors
// that send the reader to the right line of the file).
func (u SystemdUnits) Unit(s Service) (unit, field string, err error) {
	switch s {
	case ServiceKubelet:
		return cmp.Or(u.KubeletUnit, DefaultKubeletUnit), "systemd.kubeletUnit", nil
	case ServiceKubeProxy:
		return cmp.Or(u.KubeProxyUnit, DefaultKubeProxyUnit), "systemd.kubeProxyUnit", nil
	}
	return "", "", fmt.Errorf("no systemd unit for the service %q", s)
}

// unitName is a plain systemd service name, optionally an instance of a
// template. A name, not a path: systemd refuses a unit name with a slash
// (systemctl would make one into the name of a mount or device unit), and
// the agent must act on exactly the service named.
var unitName = regexp.MustCompile(`^[A-Za-z0-9:_.\\-]+(@[A-Za-z0-9:_.\\-]+)?\.service$`)

// maxUnitName is systemd's limit on a unit name's length.
const maxUnitName = 255

func (u SystemdUnits) validate() []error {
	var errs []error
	for _, f := range []struct{ field, value, example string }{
		{"systemd.kubeletUnit", u.KubeletUnit, DefaultKubeletUnit},
		{"systemd.kubeProxyUnit", u.KubeProxyUnit, DefaultKubeProxyUnit},
	} {
		if f.value != "" && (!unitName.MatchString(f.value) || len(f.value) > maxUnitName) {
			errs = append(errs, fmt.Errorf(`%s: must be a plain systemd service name such as %s (letters, digits and :-_.\, an optional @instance, ending in .service; no path), got %q`,
				f.field, f.example, f.value))
		}
	}
	kubelet, _, _ := u.Unit(ServiceKubelet)
	proxy, _, _ := u.Unit(ServiceKubeProxy)
	if kubelet == proxy {
		errs = append(errs, fmt.Errorf("systemd.kubeProxyUnit: must differ from systemd.kubeletUnit (%s): stopping kube-proxy would stop the kubelet", kubelet))
	}
	return errs
}

// TLSFiles are PEM files.
type TLSFiles struct {
	CertFile     string `json:"certFile"`
	KeyFile      string `json:"keyFile"`
	ClientCAFile string `json:"clientCAFile"`
}

// KubeletFiles are the kubelet's files, as its command line names them.
type KubeletFiles struct {
	// Config is --config, the KubeletConfiguration.
	Config string `json:"config"`
	// Kubeconfig is --kubeconfig, which TLS bootstrapping writes.
	Kubeconfig string `json:"kubeconfig"`
	// BootstrapKubeconfig is --bootstrap-kubeconfig.
	BootstrapKubeconfig string `json:"bootstrapKubeconfig"`
	// CertDir is --cert-dir, where the kubelet keeps its client and serving
	// certificates.
	CertDir string `json:"certDir"`
	// RootDir is --root-dir, the pods' volumes and the kubelet's state.
	RootDir string `json:"rootDir"`
	// ClientCAFile is where Join writes the CA that verifies clients of the
	// kubelet's API; the kubelet configuration it writes points there.
	ClientCAFile string `json:"clientCAFile"`
}

// KubeProxyFiles are kube-proxy's files.
type KubeProxyFiles struct {
	// Config is --config, the KubeProxyConfiguration.
	Config string `json:"config"`
	// Kubeconfig is where Join writes kube-proxy's kubeconfig, which uses the
	// kubelet's client certificate.
	Kubeconfig string `json:"kubeconfig"`
}

// LoadConfig reads and validates the configuration file at path.
func LoadConfig(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, err
	}
	var c Config
	if err := yaml.UnmarshalStrict(data, &c); err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	c.setDefaults()
	if err := c.Validate(); err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

func (c *Config) setDefaults() {
	if len(c.AllowedClients) == 0 {
		c.AllowedClients = []string{ManagerIdentity}
	}
}

// Validate reports every field the agent cannot run with, by its YAML path.
func (c Config) Validate() error {
	var errs []error
	for _, msg := range validation.IsDNS1123Subdomain(c.NodeName) {
		errs = append(errs, fmt.Errorf("nodeName: %s", msg))
	}
	if _, port, err := net.SplitHostPort(c.Listen); err != nil {
		errs = append(errs, fmt.Errorf("listen: must be host:port, such as 198.51.100.11:%d: %v", DefaultPort, err))
	} else if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		errs = append(errs, fmt.Errorf("listen: the port must be a number from 1 to 65535, got %q", port))
	}
	for i, name := range c.AllowedClients {
		if strings.TrimSpace(name) == "" {
			errs = append(errs, fmt.Errorf("allowedClients[%d]: must be a certificate common name, got an empty one", i))
		}
	}
	for _, p := range c.paths() {
		if !filepath.IsAbs(p.value) || filepath.Clean(p.value) != p.value || p.value == "/" {
			errs = append(errs, fmt.Errorf("%s: must be a clean absolute path other than /, got %q", p.field, p.value))
		}
	}
	errs = append(errs, c.overlaps()...)
	errs = append(errs, c.Systemd.validate()...)
	return errors.Join(errs...)
}

// overlaps refuses the files the agent keeps (its TLS files and the saved
// configuration) inside a directory that Reset removes. The node's
// configuration files may be there (kubeadm keeps the kubelet's in its root
// directory): Reset writes them back.
func (c Config) overlaps() []error {
	var errs []error
	wiped := []configPath{{"kubelet.rootDir", c.Kubelet.RootDir}, {"kubelet.certDir", c.Kubelet.CertDir}}
	kept := []configPath{
		{"tls.certFile", c.TLS.CertFile}, {"tls.keyFile", c.TLS.KeyFile}, {"tls.clientCAFile", c.TLS.ClientCAFile}, {"savedDir", c.SavedDir},
	}
	for _, w := range wiped {
		for _, k := range kept {
			if w.value != "" && k.value != "" && (k.value == w.value || strings.HasPrefix(k.value, w.value+"/")) {
				errs = append(errs, fmt.Errorf("%s: must not be inside %s (%s), which a reset removes", k.field, w.field, w.value))
			}
		}
	}
	return errs
}

type configPath struct{ field, value string }

// paths lists every path of c with its field name.
func (c Config) paths() []configPath {
	return []configPath{
		{"tls.certFile", c.TLS.CertFile},
		{"tls.keyFile", c.TLS.KeyFile},
		{"tls.clientCAFile", c.TLS.ClientCAFile},
		{"kubelet.config", c.Kubelet.Config},
		{"kubelet.kubeconfig", c.Kubelet.Kubeconfig},
		{"kubelet.bootstrapKubeconfig", c.Kubelet.BootstrapKubeconfig},
		{"kubelet.certDir", c.Kubelet.CertDir},
		{"kubelet.rootDir", c.Kubelet.RootDir},
		{"kubelet.clientCAFile", c.Kubelet.ClientCAFile},
		{"kubeProxy.config", c.KubeProxy.Config},
		{"kubeProxy.kubeconfig", c.KubeProxy.Kubeconfig},
		{"cniConfigFile", c.CNIConfigFile},
		{"containerRuntimeSocket", c.ContainerRuntimeSocket},
		{"savedDir", c.SavedDir},
	}
}

// Marshal renders c as the YAML LoadConfig reads.
func (c Config) Marshal() ([]byte, error) { return yaml.Marshal(c) }
