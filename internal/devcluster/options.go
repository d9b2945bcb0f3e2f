package devcluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// Options configures a local host cluster.
type Options struct {
	// StateDir holds everything the cluster writes; see Layout.
	StateDir string
	// Nodes is the number of nodes, 1 to MaxNodes. The first is the control plane.
	Nodes int
	// BinDir holds the binaries built by `make build`: kube, coredns,
	// kube-network-policies, pause, testapp, nest-probe and the nest commands.
	BinDir string
	// CNIBinDir holds the CNI plugins (Debian's containernetworking-plugins).
	CNIBinDir string
	// BusyboxPath is a static busybox for the busybox image.
	BusyboxPath string
	// Timeout bounds `up` as a whole.
	Timeout time.Duration
	// Out receives progress lines; nil discards them.
	Out io.Writer
	// WithNest also installs Nest (CRDs and nest-manager) once the cluster is up.
	WithNest bool
}

// DefaultBinDir is the directory of the running executable: `make build` puts
// nest next to the binaries it starts.
func DefaultBinDir() string {
	exe, err := os.Executable()
	if err != nil {
		return "_output/bin"
	}
	return filepath.Dir(exe)
}

func (o *Options) setDefaults() {
	if o.CNIBinDir == "" {
		o.CNIBinDir = "/usr/lib/cni"
	}
	if o.BusyboxPath == "" {
		o.BusyboxPath = "/bin/busybox"
	}
	if o.BinDir == "" {
		o.BinDir = DefaultBinDir()
	}
	if o.Timeout == 0 {
		o.Timeout = 5 * time.Minute
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
}

// preflight checks, before anything is changed, that we run as root and that
// every program and binary the cluster needs is there, naming what is missing
// and how to get it.
func (o Options) preflight() error {
	if os.Geteuid() != 0 {
		return errors.New("nest dev needs root: it creates network namespaces, cgroups and mounts; run it with sudo")
	}
	var missing []error
	for _, prog := range []string{"containerd", "containerd-shim-runc-v2", "runc", "ctr", "ip", "nsenter", "iptables", "nft", "sysctl"} {
		if _, err := exec.LookPath(prog); err != nil {
			missing = append(missing, fmt.Errorf("program %s is not on PATH: run `make deps` (hack/install-deps.sh) as root", prog))
		}
	}
	for _, f := range []string{
		filepath.Join(o.BinDir, "kube"), filepath.Join(o.BinDir, "coredns"), filepath.Join(o.BinDir, "pause"),
		filepath.Join(o.BinDir, "testapp"), filepath.Join(o.BinDir, "nest-manager"), filepath.Join(o.BinDir, "nest-probe"),
		filepath.Join(o.BinDir, "kube-network-policies"), filepath.Join(o.CNIBinDir, "bridge"), filepath.Join(o.CNIBinDir, "host-local"), o.BusyboxPath,
	} {
		if _, err := os.Stat(f); err != nil {
			missing = append(missing, fmt.Errorf("%s is missing: run `make build` (binaries) or `make deps` (CNI plugins, busybox-static), or pass --bin-dir", f))
		}
	}
	return errors.Join(missing...)
}

// record is what cluster.json keeps about a started cluster.
type record struct {
	Nodes     int       `json:"nodes"`
	BinDir    string    `json:"binDir"`
	StartedAt time.Time `json:"startedAt"`
}

func readRecord(l Layout) (record, error) {
	var r record
	data, err := os.ReadFile(l.StateFile())
	if err != nil {
		return r, err
	}
	return r, json.Unmarshal(data, &r)
}

func writeRecord(l Layout, r record) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(l.StateFile(), data, 0o644)
}
