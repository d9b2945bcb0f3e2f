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

	"github.com/nestdev/nest/internal/images"
	"github.com/nestdev/nest/internal/version"
)

// Options configures a local host cluster.
type Options struct {
	// StateDir holds everything the cluster writes; see Layout.
	StateDir string
	// Nodes is the number of nodes, 1 to MaxNodes. The first is the control plane.
	Nodes int
	// BinDir holds the binaries built by `make build`: kube (the host's
	// version) and kube-VERSION for every supported version, coredns,
	// kube-network-policies, containerd with its runc shim and ctr, pause,
	// testapp, nest-probe and the nest commands.
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
	// Net is the cluster's addressing: DefaultAddressing, or AddressingFor a
	// named cluster. The zero value means the default cluster.
	Net Addressing
	// GPUs is how many nvidia.com/gpu every worker advertises: a fake
	// extended resource for scheduling tests, with no device behind it.
	GPUs int
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
	if o.Net == (Addressing{}) {
		o.Net = DefaultAddressing()
	}
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
	for _, prog := range []string{"runc", "ip", "nsenter", "iptables", "nft", "sysctl"} {
		if _, err := exec.LookPath(prog); err != nil {
			missing = append(missing, fmt.Errorf("program %s is not on PATH: run `make deps` (hack/install-deps.sh) as root", prog))
		}
	}
	files := []string{
		filepath.Join(o.BinDir, "kube"), filepath.Join(o.BinDir, "coredns"), filepath.Join(o.BinDir, "pause"),
		filepath.Join(o.BinDir, "testapp"), filepath.Join(o.BinDir, "nest-manager"), filepath.Join(o.BinDir, "nest-probe"),
		filepath.Join(o.BinDir, "kube-network-policies"), filepath.Join(o.BinDir, "metallb-controller"), filepath.Join(o.BinDir, "metallb-speaker"),
		filepath.Join(o.CNIBinDir, "bridge"), filepath.Join(o.CNIBinDir, "host-local"), o.BusyboxPath,
		containerdPath(o.BinDir), filepath.Join(o.BinDir, containerdShim), ctrPath(o.BinDir),
	}
	// Every supported version's kube image is made, so tenants may run any.
	for _, v := range version.Supported {
		files = append(files, filepath.Join(o.BinDir, images.KubeBinary(v)))
	}
	for _, f := range files {
		if _, err := os.Stat(f); err != nil {
			missing = append(missing, fmt.Errorf("%s is missing: run `make build` (binaries) or `make deps` (CNI plugins, busybox-static), or pass --bin-dir", f))
		}
	}
	return errors.Join(missing...)
}

// containerdShim is the runc shim's file name; containerd looks it up on its PATH.
const containerdShim = "containerd-shim-runc-v2"

// containerdPath is the containerd `make build` builds from k8s/containerd:
// Debian 12's 1.6 lacks what Kubernetes 1.36 uses (image volumes).
func containerdPath(binDir string) string { return filepath.Join(binDir, "containerd") }

// ctrPath is the ctr of the same containerd build, which imports images.
func ctrPath(binDir string) string { return filepath.Join(binDir, "ctr") }

// containerdEnv puts binDir first on containerd's PATH, so that it starts
// the shim of its own build, not another one on the machine.
func containerdEnv(binDir string) []string {
	return []string{"PATH=" + binDir + string(filepath.ListSeparator) + os.Getenv("PATH")}
}

// record is what cluster.json keeps about a started cluster. Up writes it
// once the machine-wide names are claimed, with a zero StartedAt, so that a
// later down or up of a run that was killed half-way finds the addressing it
// must clean up; StartedAt is set when the cluster is up.
type record struct {
	Nodes     int       `json:"nodes"`
	BinDir    string    `json:"binDir"`
	StartedAt time.Time `json:"startedAt"`
	// Cluster and Slot are the cluster's name and slot (AddressingFor);
	// both are empty for the default cluster.
	Cluster string `json:"cluster,omitempty"`
	Slot    int    `json:"slot,omitempty"`
	// GPUs is the nvidia.com/gpu count each worker advertises.
	GPUs int `json:"gpus,omitempty"`
}

// complete reports whether the recorded cluster came all the way up.
func (r record) complete() bool { return !r.StartedAt.IsZero() }

// addressingOf returns the addressing of the cluster in l: the recorded one,
// else fallback. A named fallback must match the record: it was asked for by
// --cluster, and the state directory holds another cluster.
func addressingOf(l Layout, fallback Addressing) (Addressing, error) {
	if fallback == (Addressing{}) {
		fallback = DefaultAddressing()
	}
	rec, err := readRecord(l)
	if err != nil {
		return fallback, nil
	}
	if fallback.Cluster != "" && rec.Cluster != fallback.Cluster {
		return Addressing{}, fmt.Errorf("%s holds the cluster %q, not %q: pass the matching --cluster or --state-dir", l.Root, rec.Cluster, fallback.Cluster)
	}
	return AddressingFor(rec.Cluster, rec.Slot)
}

// StateAddressing is the addressing of the cluster whose state is in
// stateDir, as `nest dev up` recorded it, or the default cluster's when
// nothing is recorded there.
func StateAddressing(stateDir string) (Addressing, error) {
	return addressingOf(Layout{Root: stateDir}, Addressing{})
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
