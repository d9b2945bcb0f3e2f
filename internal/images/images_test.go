package images

import (
	"archive/tar"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/nestdev/nest/internal/version"
)

func TestImageLayerAndConfig(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "kube")
	if err := os.WriteFile(bin, []byte("binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	spec := Spec{Name: "nest.local/x:1", Entrypoint: []string{"/usr/local/bin/kube"}, Files: []File{
		tmpDir(),
		{Path: "/usr/local/bin/kube", Source: bin, Mode: 0o755},
		{Path: "/usr/local/bin/kubelet", Link: "kube"},
	}}
	img, err := Image(spec)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.OS != "linux" || cfg.Architecture != runtime.GOARCH || cfg.Config.Entrypoint[0] != "/usr/local/bin/kube" {
		t.Errorf("config = %s/%s %v", cfg.OS, cfg.Architecture, cfg.Config.Entrypoint)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers = %d, %v", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	entries := map[string]*tar.Header{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		entries[h.Name] = h
	}
	for name, typ := range map[string]byte{"usr/": tar.TypeDir, "usr/local/bin/": tar.TypeDir, "usr/local/bin/kube": tar.TypeReg, "usr/local/bin/kubelet": tar.TypeSymlink, "tmp/": tar.TypeDir} {
		h, ok := entries[name]
		if !ok || h.Typeflag != typ {
			t.Errorf("entry %s missing or of the wrong type: %+v", name, h)
		}
	}
	if entries["tmp/"].Mode != 0o1777 {
		t.Errorf("/tmp mode = %o", entries["tmp/"].Mode)
	}
}

// pauseSpec writes a one-file input into a new directory and returns a
// Spec of it, the input's path and an images directory beside it.
func pauseSpec(t *testing.T) (spec Spec, bin, out string) {
	t.Helper()
	dir := t.TempDir()
	bin = filepath.Join(dir, "pause")
	if err := os.WriteFile(bin, []byte("v1"), 0o755); err != nil {
		t.Fatal(err)
	}
	spec = Spec{Name: "nest.local/pause:test", Files: []File{{Path: "/pause", Source: bin, Mode: 0o755}}}
	return spec, bin, filepath.Join(dir, "images")
}

func TestBuildIsIncremental(t *testing.T) {
	spec, bin, out := pauseSpec(t)
	path, err := Build(spec, out)
	if err != nil {
		t.Fatal(err)
	}
	first, _ := os.Stat(path)
	// Same content rewritten (as `go build` does) must not rebuild.
	if err := os.WriteFile(bin, []byte("v1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Build(spec, out); err != nil {
		t.Fatal(err)
	}
	second, _ := os.Stat(path)
	if !second.ModTime().Equal(first.ModTime()) {
		t.Error("unchanged input rebuilt the tarball")
	}
	sumBefore, _ := os.ReadFile(path + ".sum")
	if err := os.WriteFile(bin, []byte("v2"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Build(spec, out); err != nil {
		t.Fatal(err)
	}
	sumAfter, _ := os.ReadFile(path + ".sum")
	if string(sumBefore) == string(sumAfter) {
		t.Error("changed input did not rebuild the tarball")
	}
	tag, _ := name.NewTag(spec.Name)
	if _, err := tarball.ImageFromPath(path, &tag); err != nil {
		t.Fatalf("tarball does not hold %s: %v", spec.Name, err)
	}
}

// TestBuildSideBySide: local clusters started at once share the images
// directory; every concurrent Build of the same image succeeds, and one
// tarball is written (the others find it built).
func TestBuildSideBySide(t *testing.T) {
	spec, _, out := pauseSpec(t)
	const builders = 8
	errs := make(chan error, builders)
	for range builders {
		go func() {
			_, err := Build(spec, out)
			errs <- err
		}()
	}
	for range builders {
		if err := <-errs; err != nil {
			t.Errorf("a concurrent build: %v", err)
		}
	}
	if _, err := os.Stat(filepath.Join(out, spec.TarballName()+".tmp")); !os.IsNotExist(err) {
		t.Errorf("a temporary tarball is left: %v", err)
	}
}

func TestBuildNamesMissingInput(t *testing.T) {
	spec := Spec{Name: "nest.local/x:1", Files: []File{{Path: "/x", Source: "/nonexistent/x"}}}
	if _, err := Build(spec, t.TempDir()); err == nil {
		t.Fatal("missing input accepted")
	}
}

func TestSpecsCoverNestImages(t *testing.T) {
	specs := Specs("/bin", "/busybox", []string{"sh", "busybox", "wget"})
	names := map[string]Spec{}
	for _, s := range specs {
		names[s.Name] = s
	}
	for _, want := range []string{Pause, CoreDNS, Busybox, TestApp} {
		if _, ok := names[want]; !ok {
			t.Errorf("no spec for %s", want)
		}
	}
	// One kube image per supported version, from that version's binary.
	for _, v := range version.Supported {
		kube, ok := names[KubeImage(KubeRepository, v)]
		if !ok {
			t.Errorf("no kube image for %s", v)
			continue
		}
		if !slices.ContainsFunc(kube.Files, func(f File) bool { return f.Path == "/usr/local/bin/kube" && f.Source == "/bin/kube-"+v }) {
			t.Errorf("kube image of %s: files %+v, want /usr/local/bin/kube from /bin/kube-%s", v, kube.Files, v)
		}
	}
	links := 0
	for _, f := range names[Busybox].Files {
		if f.Link == "busybox" {
			links++
		}
	}
	if links != 2 {
		t.Errorf("busybox applet links = %d, want 2 (sh, wget; not busybox itself)", links)
	}
}

// The control plane's exec probes run nest-probe from the image of the
// container they check.
func TestProbeInControlPlaneImages(t *testing.T) {
	for _, s := range Specs("/out/bin", "/busybox", nil) {
		has := false
		for _, f := range s.Files {
			if f.Path == ProbePath && f.Source == "/out/bin/nest-probe" && f.Mode&0o111 != 0 {
				has = true
			}
		}
		want := strings.HasPrefix(s.Name, KubeRepository+":") || s.Name == NestSyncer || s.Name == CoreDNS
		if has != want {
			t.Errorf("%s holds %s: %v, want %v", s.Name, ProbePath, has, want)
		}
	}
}
