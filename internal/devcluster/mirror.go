package devcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Mirror is an OCI registry (go-containerregistry's) that stands in for a
// public registry on the nodes of a local host cluster: their containerds
// resolve and pull every image of that registry from it, and from nowhere
// else. This machine reaches no registry, so an image pulled with pull
// policy Always (which the kubelet pulls even when the node has it) can only
// come from here.
//
// It listens on the cluster's bridge IP, which the nodes reach and nothing
// outside the machine does, and keeps blobs on disk.
type Mirror struct {
	// Registry is the name of the registry it stands in for, such as
	// "registry.k8s.io".
	Registry string
	// Addr is host:port where it serves.
	Addr string

	srv     *http.Server
	unroute func() error
}

// containerdCertsDir is where a node's containerd reads per-registry hosts
// configuration (hosts.toml), relative to the node's directory. It is read
// on every pull, so a Mirror needs no containerd restart.
const containerdCertsDir = "containerd/certs.d"

// StartMirror serves a registry for registryName to the nodes of the local
// host cluster in stateDir, with blobs under blobDir and a line per request
// in log, and points every node's containerd at it. Close undoes both.
func StartMirror(stateDir, registryName, blobDir string, log io.Writer) (*Mirror, error) {
	_, nodes, err := running(stateDir)
	if err != nil {
		return nil, err
	}
	if len(nodes) == 0 {
		return nil, fmt.Errorf("no nodes in %s", stateDir)
	}
	if err := os.MkdirAll(blobDir, 0o700); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(nodes[0].Net.BridgeIP().String(), "0"))
	if err != nil {
		return nil, fmt.Errorf("mirror of %s: %w", registryName, err)
	}
	m := serveMirror(ln, registryName, blobDir, log)
	m.unroute, err = routeRegistry(nodes, registryName, m.Addr)
	if err != nil {
		return nil, errors.Join(err, m.Close())
	}
	return m, nil
}

// RouteRegistry makes every node of the local host cluster in stateDir pull
// images of registryName from addr, over plain HTTP, whatever the name
// resolves to; undo stops it. Tests use it to stand for a registry name
// that resolves to an address of their choosing.
func RouteRegistry(stateDir, registryName, addr string) (undo func() error, err error) {
	_, nodes, err := running(stateDir)
	if err != nil {
		return nil, err
	}
	return routeRegistry(nodes, registryName, addr)
}

// RegistryListenIP is the address on this machine that the nodes of the
// local host cluster in stateDir reach: the cluster's bridge.
func RegistryListenIP(stateDir string) (netip.Addr, error) {
	_, nodes, err := running(stateDir)
	if err != nil {
		return netip.Addr{}, err
	}
	if len(nodes) == 0 {
		return netip.Addr{}, fmt.Errorf("no nodes in %s", stateDir)
	}
	return nodes[0].Net.BridgeIP(), nil
}

func routeRegistry(nodes []Node, registryName, addr string) (undo func() error, err error) {
	var files []string
	undo = func() error {
		var errs []error
		for _, p := range files {
			if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	}
	for _, n := range nodes {
		p := filepath.Join(n.Dir, containerdCertsDir, registryName, "hosts.toml")
		files = append(files, p)
		if err := writeFileAtomic(p, MirrorHostsTOML(addr), 0o644); err != nil {
			return nil, errors.Join(err, undo())
		}
	}
	return undo, nil
}

// serveMirror serves a registry for registryName on ln, with blobs under
// blobDir, logging requests to logTo.
func serveMirror(ln net.Listener, registryName, blobDir string, logTo io.Writer) *Mirror {
	reg := registry.New(registry.WithBlobHandler(registry.NewDiskBlobHandler(blobDir)),
		registry.Logger(log.New(logTo, "", log.LstdFlags)))
	m := &Mirror{
		Registry: registryName,
		Addr:     ln.Addr().String(),
		srv:      &http.Server{Handler: pullOnlyFromAfar(reg, ln.Addr()), ReadHeaderTimeout: 10 * time.Second},
	}
	go func() { _ = m.srv.Serve(ln) }()
	return m
}

// pullOnlyFromAfar lets only this machine (loopback, or the address the
// mirror listens on, from which Push dials) write to the registry: the
// nodes, and the pods on them, may only read.
func pullOnlyFromAfar(h http.Handler, listen net.Addr) http.Handler {
	self := ""
	if a, ok := listen.(*net.TCPAddr); ok {
		self = a.IP.String()
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			host, _, _ := net.SplitHostPort(r.RemoteAddr)
			if ip := net.ParseIP(host); ip == nil || (!ip.IsLoopback() && host != self) {
				http.Error(w, "the mirror takes pushes from this machine only", http.StatusForbidden)
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

// MirrorHostsTOML is the containerd hosts.toml that sends every request for
// a registry to the mirror at addr over plain HTTP. The mirror is both the
// registry's server, so containerd never falls back to the real registry,
// and its one host: containerd 1.6 (Debian 12's) refuses a file without a
// host table ("invalid `host` tree").
func MirrorHostsTOML(addr string) []byte {
	return hostsTOML("the local host cluster's mirror (devcluster.Mirror)", addr)
}

// hostsTOML makes http://addr the one server and host, for pull and
// resolve, of a hosts.toml, with a comment saying what addr is.
func hostsTOML(what, addr string) []byte {
	url := "http://" + addr
	return fmt.Appendf(nil, "# Generated by nest: %s.\nserver = %q\n\n[host.%q]\n  capabilities = [\"pull\", \"resolve\"]\n", what, url, url)
}

// PullProxyHostsTOML is the hosts.toml (in certs.d/_default) that makes a
// node's containerd pull every registry without a hosts.toml of its own
// through the node's pull proxy at addr (package pullproxy, served by the
// nest-node-network DaemonSet), with the proxy as the only server: a
// refusal is not retried at the registry itself. With no proxy listening,
// such pulls fail: the node fails closed.
func PullProxyHostsTOML(addr string) []byte {
	return hostsTOML("every registry through the node's pull proxy (docs/isolation.md, Image registries)", addr)
}

// Push stores img in the mirror under ref, a reference in the mirror's
// registry ("registry.k8s.io/e2e-test-images/kitten:1.8").
func (m *Mirror) Push(ctx context.Context, ref string, img v1.Image) error {
	repo, ok := strings.CutPrefix(ref, m.Registry+"/")
	if !ok {
		return fmt.Errorf("image %s is not in registry %s", ref, m.Registry)
	}
	local, err := name.ParseReference(m.Addr+"/"+repo, name.Insecure)
	if err != nil {
		return err
	}
	if err := remote.Write(local, img, remote.WithContext(ctx)); err != nil {
		return fmt.Errorf("push %s to the mirror: %w", ref, err)
	}
	return nil
}

// Close stops pointing the nodes at the mirror, then stops it.
func (m *Mirror) Close() error {
	var errs []error
	if m.unroute != nil {
		errs = append(errs, m.unroute())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return errors.Join(append(errs, m.srv.Shutdown(ctx))...)
}
