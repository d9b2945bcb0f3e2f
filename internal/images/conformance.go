package images

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// The upstream registry of the e2e test images and its repositories, as
// test/utils/image/manifest.go of k8s.io/kubernetes names them. The conformance suite refers to its images
// by these names; the nodes hold local builds under the same names, so no
// pull ever happens.
const (
	UpstreamRegistry = "registry.k8s.io"
	e2eRegistry      = UpstreamRegistry + "/e2e-test-images/"
	gcRegistry       = UpstreamRegistry + "/"
)

// ConformanceOptions says where the inputs of the conformance test images are.
type ConformanceOptions struct {
	// BinDir holds agnhost, nonewprivs and sample-apiserver (built by `make
	// conformance-build`) and pause and kube (built by `make build`).
	BinDir string
	// UpstreamDir is the k8s.io/kubernetes module's source: the agnhost
	// image's porter certificate and the kitten and nautilus pages come from
	// its test/images.
	UpstreamDir string
	// BusyboxPath is a static upstream busybox (hack/build-busybox.sh says
	// why not Debian's); BusyboxApplets the applets it provides.
	BusyboxPath    string
	BusyboxApplets []string
	// Tools are the files of the Debian tools the agnhost image carries
	// (AgnhostTools) with their shared libraries, and GlibcDNS those of
	// GlibcDNSTools: see DebianTools.
	Tools, GlibcDNS []File
}

// DebianToolPaths are the Debian binaries conformance specs run inside
// agnhost containers (curl, dig, nc and ss in network and DNS specs; bash
// for scripts), each with the name it has in the upstream alpine-based image.
var DebianToolPaths = map[string]string{
	"bash": "/usr/bin/bash",
	"curl": "/usr/bin/curl",
	"dig":  "/usr/bin/dig",
	"nc":   "/usr/bin/nc.openbsd",
	"ip":   "/usr/sbin/ip",
	"ss":   "/usr/bin/ss",
	// getent is glibc's, for specs that check /etc/hosts through NSS.
	"getent": "/usr/bin/getent",
}

// AgnhostTools are the names in DebianToolPaths the agnhost image carries.
var AgnhostTools = []string{"bash", "curl", "dig", "getent", "ip", "nc", "ss"}

// GlibcDNSTools are those the glibc-dns-testing image carries: upstream's is
// Debian with dnsutils, and DNS specs run dig and getent in it.
var GlibcDNSTools = []string{"bash", "dig", "getent"}

// DebianTools returns the files of the named tools of DebianToolPaths, in
// /usr/bin, with every shared library and the dynamic loader ldd lists for
// them at the paths the binaries look them up. `make deps` installs them
// (curl, bind9-dnsutils, netcat-openbsd, iproute2).
func DebianTools(ctx context.Context, names ...string) ([]File, error) {
	var files []File
	libs := map[string]bool{}
	for _, n := range names {
		src, ok := DebianToolPaths[n]
		if !ok {
			return nil, fmt.Errorf("no Debian tool %q", n)
		}
		files = append(files, File{Path: "/usr/bin/" + n, Source: src, Mode: 0o755})
		deps, err := sharedLibraries(ctx, src)
		if err != nil {
			return nil, err
		}
		for _, d := range deps {
			libs[d] = true
		}
	}
	paths := make([]string, 0, len(libs))
	for l := range libs {
		paths = append(paths, l)
	}
	sort.Strings(paths)
	for _, l := range paths {
		files = append(files, File{Path: l, Source: l, Mode: 0o755})
	}
	return files, nil
}

// ConformanceInputs gathers the ConformanceOptions of this machine: the
// applets of the upstream busybox in binDir (`make conformance-build` builds
// it) and the Debian tools with their libraries.
func ConformanceInputs(ctx context.Context, binDir, upstreamDir string) (ConformanceOptions, error) {
	o := ConformanceOptions{BinDir: binDir, UpstreamDir: upstreamDir, BusyboxPath: filepath.Join(binDir, "busybox")}
	var err error
	if o.BusyboxApplets, err = BusyboxApplets(ctx, o.BusyboxPath); err != nil {
		return o, err
	}
	for _, t := range []struct {
		files *[]File
		names []string
	}{{&o.Tools, AgnhostTools}, {&o.GlibcDNS, GlibcDNSTools}} {
		if *t.files, err = DebianTools(ctx, t.names...); err != nil {
			return o, err
		}
	}
	return o, nil
}

// sharedLibraries lists the absolute paths ldd resolves for binary: every
// library and the dynamic loader.
func sharedLibraries(ctx context.Context, binary string) ([]string, error) {
	out, err := exec.CommandContext(ctx, "ldd", binary).Output()
	if err != nil {
		return nil, fmt.Errorf("ldd %s (install it with `make deps`): %w", binary, err)
	}
	return parseLdd(out)
}

// parseLdd reads ldd's output: "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6
// (0x...)" for a library, "/lib64/ld-linux-x86-64.so.2 (0x...)" for the
// loader, and "linux-vdso.so.1 (0x...)" for the kernel's, which has no file.
func parseLdd(out []byte) ([]string, error) {
	var paths []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) >= 3 && f[1] == "=>":
			if f[2] == "not" {
				return nil, fmt.Errorf("ldd: library %s not found", f[0])
			}
			paths = append(paths, f[2])
		case len(f) >= 1 && filepath.IsAbs(f[0]):
			paths = append(paths, f[0])
		}
	}
	return paths, sc.Err()
}

// Names of the upstream images Nest builds for the conformance suite.
const (
	Agnhost         = e2eRegistry + "agnhost:2.63.0"
	AgnhostPrev     = e2eRegistry + "agnhost:2.55"
	BusyboxUpstream = e2eRegistry + "busybox:1.37.0-1"
	BusyboxPrev     = e2eRegistry + "busybox:1.36.1-1"
	Nginx           = e2eRegistry + "nginx:1.15-4"
	NginxNew        = e2eRegistry + "nginx:1.27-0"
	Kitten          = e2eRegistry + "kitten:1.8"
	Nautilus        = e2eRegistry + "nautilus:1.8"
	Nonewprivs      = e2eRegistry + "nonewprivs:1.4"
	NonRoot         = e2eRegistry + "nonroot:1.5"
	SampleAPIServer = e2eRegistry + "sample-apiserver:1.29.2"
	PauseUpstream   = gcRegistry + "pause:3.10.2"
	Etcd            = gcRegistry + "etcd:3.6.8-0"
	GlibcDNSTesting = e2eRegistry + "glibc-dns-testing:2.0.0"
)

// agnhostPasswd and agnhostGroup hold the user and group upstream's agnhost
// image adds for the spec on supplemental groups defined in an image.
const (
	agnhostPasswd = "root:x:0:0:root:/root:/bin/sh\nuser-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh\n"
	agnhostGroup  = "root:x:0:\nuser-defined-in-image:x:1000:\ngroup-defined-in-image:x:50000:user-defined-in-image\n"
)

// agnhostOSRelease is the /etc/os-release of upstream agnhost's base image
// (alpine:3.21, test/images/agnhost/BASEIMAGE), which images built on
// agnhost inherit: the ImageVolume spec reads it from a kitten image volume.
// The stand-in carries upstream's file; it is not alpine, and says so.
const agnhostOSRelease = `NAME="Alpine Linux"
ID=alpine
VERSION_ID=3.21
PRETTY_NAME="Alpine Linux v3.21 (the upstream base; this is Nest's local stand-in, internal/images)"
HOME_URL="https://alpinelinux.org/"
`

// ConformanceSpecs returns the upstream test images the conformance suite
// runs, built from local files. What each holds follows upstream's
// Dockerfiles under test/images, with Debian's busybox and tools where those
// use alpine's:
//   - agnhost: the agnhost binary as entrypoint (default argument pause),
//     agnhost-2, the porter certificate, /uploads, its base's os-release,
//     busybox and the tools;
//   - kitten and nautilus: agnhost serving their page with test-webserver;
//   - nginx (both tags): a stand-in, agnhost's test-webserver on port 80,
//     because the specs use it only as a web server and a name to change;
//   - busybox (both tags), nonroot (user 1234), nonewprivs (setuid nnp):
//     upstream busybox, whose ash is /bin/sh;
//   - glibc-dns-testing: busybox with Debian's dig and getent;
//   - pause and etcd: Nest's pause and the kube binary's etcd;
//   - sample-apiserver: k8s.io/sample-apiserver at the pinned version.
func ConformanceSpecs(o ConformanceOptions) []Spec {
	bin := func(n string) string { return filepath.Join(o.BinDir, n) }
	upstream := func(p string) string { return filepath.Join(o.UpstreamDir, "test", "images", p) }
	box := []File{tmpDir(), {Path: "/bin/busybox", Source: o.BusyboxPath, Mode: 0o755}}
	for _, a := range o.BusyboxApplets {
		if a != "busybox" {
			box = append(box, File{Path: "/bin/" + a, Link: "busybox"})
		}
	}
	// glibc's getent without this file asks DNS before /etc/hosts and stops
	// at its NXDOMAIN; alpine's (upstream agnhost) and Debian's
	// (glibc-dns-testing) images read /etc/hosts first.
	nsswitch := File{Path: "/etc/nsswitch.conf", Data: []byte("hosts: files dns\n"), Mode: 0o644}
	agnhost := append(append([]File{
		{Path: "/agnhost", Source: bin("agnhost"), Mode: 0o755},
		{Path: "/agnhost-2", Link: "agnhost"},
		{Path: "/localhost.crt", Source: upstream("agnhost/porter/localhost.crt"), Mode: 0o644},
		{Path: "/localhost.key", Source: upstream("agnhost/porter/localhost.key"), Mode: 0o644},
		{Path: "/uploads", Dir: true, Mode: 0o755},
		{Path: "/etc/passwd", Data: []byte(agnhostPasswd), Mode: 0o644},
		{Path: "/etc/group", Data: []byte(agnhostGroup), Mode: 0o644},
		{Path: "/etc/os-release", Data: []byte(agnhostOSRelease), Mode: 0o644},
		nsswitch,
	}, box...), o.Tools...)
	page := func(name string) []File {
		return append(append([]File(nil), agnhost...),
			File{Path: "/" + name + ".jpg", Source: upstream(name + "/html/" + name + ".jpg"), Mode: 0o644},
			File{Path: "/data.json", Source: upstream(name + "/html/data.json"), Mode: 0o644})
	}
	agnhostSpec := func(name string) Spec {
		return Spec{Name: name, Files: agnhost, Entrypoint: []string{"/agnhost"}, Cmd: []string{"pause"}}
	}
	webserver := func(name string, files []File, args ...string) Spec {
		return Spec{Name: name, Files: files, Entrypoint: []string{"/agnhost"}, Cmd: append([]string{"test-webserver"}, args...)}
	}
	etcd := []File{tmpDir(), {Path: "/usr/local/bin/kube", Source: bin("kube"), Mode: 0o755}, {Path: "/usr/local/bin/etcd", Link: "kube"}}
	return []Spec{
		agnhostSpec(Agnhost),
		agnhostSpec(AgnhostPrev),
		webserver(Kitten, page("kitten")),
		webserver(Nautilus, page("nautilus")),
		webserver(Nginx, agnhost, "--port", "80"),
		webserver(NginxNew, agnhost, "--port", "80"),
		{Name: BusyboxUpstream, Files: box, Cmd: []string{"sh"}},
		{Name: BusyboxPrev, Files: box, Cmd: []string{"sh"}},
		{Name: NonRoot, Files: box, Cmd: []string{"sh"}, User: "1234"},
		{Name: Nonewprivs, Files: append(append([]File(nil), box...), File{Path: "/usr/local/bin/nnp", Source: bin("nonewprivs"), Mode: 0o4755}), Cmd: []string{"nnp"}},
		{Name: PauseUpstream, Files: []File{{Path: "/pause", Source: bin("pause"), Mode: 0o755}}, Entrypoint: []string{"/pause"}},
		{Name: Etcd, Files: etcd},
		{Name: GlibcDNSTesting, Files: append(append([]File{nsswitch}, box...), o.GlibcDNS...), Cmd: []string{"sh"}},
		{Name: SampleAPIServer, Files: []File{tmpDir(), {Path: "/sample-apiserver", Source: bin("sample-apiserver"), Mode: 0o755}}, Entrypoint: []string{"/sample-apiserver"}},
	}
}
