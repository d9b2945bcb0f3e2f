// Package images builds Nest's container images from local binaries and imports
// them into containerd, for machines that reach no container registry.
//
// Each image is one gzip layer made of files on this machine (a Go
// binary, symlinks to it, an empty /tmp), written as a docker-save tarball with
// go-containerregistry and imported into a containerd with `ctr images import`.
// A tarball is rebuilt only when its fingerprint (the spec and the SHA-256 of
// every input file) differs from the one recorded beside it: `go build` rewrites
// an unchanged binary, so modification times cannot tell.
package images

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/nestdev/nest/internal/version"
)

// Names of the images Nest builds. Pods refer to them with imagePullPolicy
// Never or IfNotPresent: they exist only in the nodes' containerd stores.
const (
	Pause = "nest.local/pause:3.10"
	// KubeRepository holds one kube image per supported Kubernetes
	// version, tagged with it (KubeImage).
	KubeRepository = "nest.local/kube"
	CoreDNS        = "nest.local/coredns:v1.14.7"
	Busybox        = "nest.local/busybox:1.35"
	TestApp        = "nest.local/testapp:dev"
	// NestManager runs the Nest operator in the host cluster.
	NestManager = "nest.local/nest-manager:dev"
	// NestSyncer runs in every tenant control-plane pod: the virtual node.
	NestSyncer = "nest.local/nest-syncer:dev"
	// Nest is the nest CLI; the chart's dashboard runs `nest dashboard` from it.
	Nest = "nest.local/nest:dev"
	// MetalLB holds MetalLB's /controller and /speaker, the local host
	// cluster's LoadBalancer implementation, built from the module
	// k8s/metallb pins at MetalLBVersion.
	MetalLB = "nest.local/metallb:" + MetalLBVersion
)

// Registry is the CNCF Distribution registry's /registry, built from the
// module k8s/registry pins at RegistryVersion, with its configuration
// (RegistryConfig) at RegistryConfigPath: the local host cluster's OCI
// registry, which snapshots are pushed to.
const Registry = "nest.local/registry:" + RegistryVersion

// RegistryVersion is the github.com/distribution/distribution/v3 version
// k8s/registry/go.mod pins (internal/devcluster's test fails when they
// differ).
const RegistryVersion = "v3.1.2"

// RegistryConfigPath is where the registry image holds its configuration.
const RegistryConfigPath = "/etc/distribution/config.yml"

// RegistryPort is the port the registry serves plain HTTP on.
const RegistryPort = 5000

// RegistryConfig is the registry's configuration: blobs on the filesystem
// under /var/lib/registry, deletes allowed (a snapshot schedule removes
// the snapshots it no longer keeps), plain HTTP on RegistryPort, health
// at /v2/, and a log line a request.
var RegistryConfig = fmt.Sprintf(`version: 0.1
log:
  level: info
  accesslog:
    disabled: false
storage:
  filesystem:
    rootdirectory: /var/lib/registry
  delete:
    enabled: true
http:
  addr: :%d
`, RegistryPort)

// MetalLBVersion is the go.universe.tf/metallb version k8s/metallb/go.mod
// pins (internal/devcluster's test fails when they differ).
const MetalLBVersion = "v0.15.2"

// ProbePath is where the kube, nest-syncer and CoreDNS images hold
// nest-probe, which exec probes run to check servers that listen on loopback only.
const ProbePath = "/usr/local/bin/nest-probe"

// KubeComponents are the names the multi-call kube binary answers to; the kube
// image has a symlink for each in /usr/local/bin.
var KubeComponents = []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy", "kubectl", "etcd"}

// File is one file of an image layer.
type File struct {
	// Path inside the image, absolute.
	Path string
	// Source is the file on this machine to copy; empty for a symlink, a
	// directory or a file given by Data.
	Source string
	// Data is the content of a regular file made here rather than copied.
	Data []byte
	// Link makes the entry a symlink to this target.
	Link string
	// Dir makes the entry a directory with Mode.
	Dir  bool
	Mode int64
}

// Spec describes one image.
type Spec struct {
	Name       string
	Files      []File
	Entrypoint []string
	// Cmd holds the default arguments.
	Cmd []string
	// User is the image's default user ("1234"); empty runs as root.
	User string
}

// TarballName is the file name of the image's tarball, derived from its name.
func (s Spec) TarballName() string {
	r := strings.NewReplacer("/", "_", ":", "_")
	return r.Replace(s.Name) + ".tar"
}

// KubeImage is the image in repository of the Kubernetes components of
// version v: repository:v, such as nest.local/kube:v1.37.2.
func KubeImage(repository, v string) string { return repository + ":" + v }

// KubeBinary is the file name, in the binary directory, of the multi-call
// kube binary of version v (`make build` writes one per supported version,
// and a link named kube to the host's).
func KubeBinary(v string) string { return "kube-" + v }

// Specs returns Nest's images, made from the binaries in binDir and Debian's
// busybox-static at busyboxPath: one kube image per supported Kubernetes
// version.
func Specs(binDir, busyboxPath string, busyboxApplets []string) []Spec {
	probe := File{Path: ProbePath, Source: filepath.Join(binDir, "nest-probe"), Mode: 0o755}
	var kubes []Spec
	for _, v := range version.Supported {
		kube := []File{tmpDir(), {Path: "/usr/local/bin/kube", Source: filepath.Join(binDir, KubeBinary(v)), Mode: 0o755}, probe}
		for _, c := range KubeComponents {
			kube = append(kube, File{Path: "/usr/local/bin/" + c, Link: "kube"})
		}
		kubes = append(kubes, Spec{Name: KubeImage(KubeRepository, v), Files: kube})
	}
	box := []File{tmpDir(), {Path: "/bin/busybox", Source: busyboxPath, Mode: 0o755}}
	for _, a := range busyboxApplets {
		if a != "busybox" {
			box = append(box, File{Path: "/bin/" + a, Link: "busybox"})
		}
	}
	return append(kubes, []Spec{
		{Name: Pause, Files: []File{{Path: "/pause", Source: filepath.Join(binDir, "pause"), Mode: 0o755}}, Entrypoint: []string{"/pause"}},
		{Name: CoreDNS, Files: []File{tmpDir(), {Path: "/coredns", Source: filepath.Join(binDir, "coredns"), Mode: 0o755}, probe}, Entrypoint: []string{"/coredns"}},
		{Name: Busybox, Files: box, Cmd: []string{"sh"}},
		{Name: TestApp, Files: []File{tmpDir(), {Path: "/testapp", Source: filepath.Join(binDir, "testapp"), Mode: 0o755}}, Entrypoint: []string{"/testapp"}},
		{Name: NestManager, Files: []File{tmpDir(), {Path: "/nest-manager", Source: filepath.Join(binDir, "nest-manager"), Mode: 0o755}}, Entrypoint: []string{"/nest-manager"}},
		{Name: NestSyncer, Files: []File{tmpDir(), {Path: "/nest-syncer", Source: filepath.Join(binDir, "nest-syncer"), Mode: 0o755}, probe}, Entrypoint: []string{"/nest-syncer"}},
		{Name: Nest, Files: []File{tmpDir(), {Path: "/nest", Source: filepath.Join(binDir, "nest"), Mode: 0o755}}, Entrypoint: []string{"/nest"}},
		{Name: MetalLB, Files: []File{tmpDir(),
			{Path: "/controller", Source: filepath.Join(binDir, "metallb-controller"), Mode: 0o755},
			{Path: "/speaker", Source: filepath.Join(binDir, "metallb-speaker"), Mode: 0o755}}},
		{Name: Registry, Files: []File{tmpDir(),
			{Path: "/registry", Source: filepath.Join(binDir, "registry"), Mode: 0o755},
			{Path: RegistryConfigPath, Data: []byte(RegistryConfig), Mode: 0o644}},
			Entrypoint: []string{"/registry"}, Cmd: []string{"serve", RegistryConfigPath}},
	}...)
}

func tmpDir() File { return File{Path: "/tmp", Dir: true, Mode: 0o1777} }

// BusyboxApplets asks a busybox binary for the applets it provides.
func BusyboxApplets(ctx context.Context, busyboxPath string) ([]string, error) {
	out, err := exec.CommandContext(ctx, busyboxPath, "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("list busybox applets of %s (install busybox-static): %w", busyboxPath, err)
	}
	return strings.Fields(string(out)), nil
}

// Build writes the image's tarball into dir unless the one there was built from
// the same spec and inputs. It returns the tarball's path. Local clusters
// started side by side share dir: an exclusive lock on dir/.lock makes
// each tarball and its recorded fingerprint one step to the others.
func Build(s Spec, dir string) (string, error) {
	out := filepath.Join(dir, s.TarballName())
	sum, err := Fingerprint(s)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	unlock, err := lockDir(dir)
	if err != nil {
		return "", err
	}
	defer unlock()
	if recorded, err := os.ReadFile(out + ".sum"); err == nil && string(recorded) == sum {
		if _, err := os.Stat(out); err == nil {
			return out, nil
		}
	}
	img, err := Image(s)
	if err != nil {
		return "", err
	}
	ref, err := name.NewTag(s.Name)
	if err != nil {
		return "", fmt.Errorf("image name %q: %w", s.Name, err)
	}
	tmp := out + ".tmp"
	if err := tarball.WriteToFile(tmp, ref, img); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("write image %s: %w", s.Name, err)
	}
	if err := os.Rename(tmp, out); err != nil {
		return "", err
	}
	return out, os.WriteFile(out+".sum", []byte(sum), 0o644)
}

// lockDir takes an exclusive flock on dir/.lock, waiting for other
// processes, and returns its release.
func lockDir(dir string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", f.Name(), err)
	}
	return func() { f.Close() }, nil
}

// Fingerprint hashes the spec and the content of every input file. A missing
// input is an error that names it.
func Fingerprint(s Spec) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%q\n%q\n%q\n", s.Name, s.Entrypoint, s.Cmd, s.User)
	for _, f := range s.Files {
		fmt.Fprintf(h, "%s %s %s %v %o %x\n", f.Path, f.Source, f.Link, f.Dir, f.Mode, sha256.Sum256(f.Data))
		if f.Source == "" {
			continue
		}
		in, err := os.Open(f.Source)
		if err != nil {
			return "", fmt.Errorf("image %s: input %s is missing: run `make build` first: %w", s.Name, f.Source, err)
		}
		_, err = io.Copy(h, in)
		in.Close()
		if err != nil {
			return "", err
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Image assembles the image of s: one layer, linux on this machine's
// architecture, with the spec's entrypoint and a PATH.
func Image(s Spec) (v1.Image, error) {
	layerTar, err := layerBytes(s.Files)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", s.Name, err)
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithCompressionLevel(gzip.BestSpeed))
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", runtime.GOARCH
	cfg.Created = v1.Time{Time: time.Unix(0, 0).UTC()}
	cfg.Config.Entrypoint = s.Entrypoint
	cfg.Config.Cmd = s.Cmd
	cfg.Config.User = s.User
	cfg.Config.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin"}
	return mutate.ConfigFile(img, cfg)
}

// layerBytes writes files as a tar stream, directories of each path first;
// of two files with one path, the first in sorted order is kept.
func layerBytes(files []File) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	written := map[string]bool{}
	sorted := append([]File(nil), files...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Path < sorted[j].Path })
	for _, f := range sorted {
		// Specs assembled from shared parts may name a file twice.
		if written[f.Path] {
			continue
		}
		if err := writeParents(tw, f.Path, written); err != nil {
			return nil, err
		}
		if err := writeEntry(tw, f); err != nil {
			return nil, err
		}
		written[f.Path] = true
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func writeParents(tw *tar.Writer, path string, written map[string]bool) error {
	parts := strings.Split(strings.Trim(filepath.Dir(path), "/"), "/")
	dir := ""
	for _, p := range parts {
		if p == "" {
			continue
		}
		dir += "/" + p
		if written[dir] {
			continue
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(dir, "/") + "/", Mode: 0o755}); err != nil {
			return err
		}
		written[dir] = true
	}
	return nil
}

func writeEntry(tw *tar.Writer, f File) error {
	name := strings.TrimPrefix(f.Path, "/")
	switch {
	case f.Dir:
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: f.Mode})
	case f.Link != "":
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: f.Link, Mode: 0o777})
	case f.Source == "":
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: f.Mode, Size: int64(len(f.Data))}); err != nil {
			return err
		}
		_, err := tw.Write(f.Data)
		return err
	}
	src, err := os.Open(f.Source)
	if err != nil {
		return fmt.Errorf("open %s for %s: %w", f.Source, f.Path, err)
	}
	defer src.Close()
	st, err := src.Stat()
	if err != nil {
		return err
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: f.Mode, Size: st.Size()}); err != nil {
		return err
	}
	_, err = io.Copy(tw, src)
	return err
}

// Import loads the image tarballs into the containerd listening on socket, in
// the k8s.io namespace the CRI uses, unpacked for the overlayfs snapshotter,
// with the ctr program at ctr (the one of that containerd's build).
func Import(ctx context.Context, ctr, socket string, tarballs []string) error {
	for _, t := range tarballs {
		out, err := exec.CommandContext(ctx, ctr, "--address", socket, "--namespace", "k8s.io",
			"images", "import", "--snapshotter", "overlayfs", t).CombinedOutput()
		if err != nil {
			return fmt.Errorf("import %s into %s: %w: %s", filepath.Base(t), socket, err, bytes.TrimSpace(out))
		}
	}
	return nil
}
