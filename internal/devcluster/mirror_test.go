package devcluster

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/nestdev/nest/internal/pullproxy"
)

func TestMirrorServesWhatIsPushedUnderTheRegistrysName(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := serveMirror(ln, "registry.k8s.io", t.TempDir(), io.Discard)
	defer m.Close()
	img, err := random.Image(1024, 1)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := m.Push(ctx, "registry.k8s.io/e2e-test-images/kitten:1.8", img); err != nil {
		t.Fatal(err)
	}
	// What containerd asks for: the repository without the registry's name.
	ref, err := name.ParseReference(m.Addr+"/e2e-test-images/kitten:1.8", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	got, err := remote.Image(ref, remote.WithContext(ctx))
	if err != nil {
		t.Fatalf("pull from the mirror: %v", err)
	}
	want, _ := img.Digest()
	if d, _ := got.Digest(); d != want {
		t.Errorf("pulled digest %s, pushed %s", d, want)
	}
	// containerd names the registry it mirrors in a query parameter.
	req, _ := http.NewRequestWithContext(ctx, http.MethodHead, "http://"+m.Addr+"/v2/e2e-test-images/kitten/manifests/1.8?ns=registry.k8s.io", nil)
	req.Header.Set("Accept", string(types.DockerManifestSchema2))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("HEAD of the manifest as containerd asks for it: %s", resp.Status)
	}
	if err := m.Push(ctx, "docker.io/library/busybox:1", img); err == nil || !strings.Contains(err.Error(), "not in registry registry.k8s.io") {
		t.Errorf("push of another registry's image: err = %v, want one naming the registry", err)
	}
}

func TestMirrorTakesPushesFromThisMachineOnly(t *testing.T) {
	reached := 0
	h := pullOnlyFromAfar(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached++ }), &net.TCPAddr{IP: net.ParseIP("198.51.100.1"), Port: 5000})
	for _, c := range []struct {
		method, from string
		allowed      bool
	}{
		{http.MethodGet, "198.51.100.7:4000", true},
		{http.MethodHead, "10.244.1.5:4000", true},
		{http.MethodPut, "10.244.1.5:4000", false},
		{http.MethodPost, "198.51.100.7:4000", false},
		{http.MethodPut, "198.51.100.1:4000", true},
		{http.MethodPatch, "127.0.0.1:4000", true},
	} {
		before := reached
		req := httptest.NewRequest(c.method, "http://198.51.100.1:5000/v2/", nil)
		req.RemoteAddr = c.from
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if got := reached > before; got != c.allowed {
			t.Errorf("%s from %s: reached the registry %v, want %v (status %d)", c.method, c.from, got, c.allowed, rec.Code)
		}
	}
}

func TestMirrorHostsTOMLMakesTheMirrorTheOnlyServer(t *testing.T) {
	got := string(MirrorHostsTOML("10.0.0.1:5000"))
	if !strings.Contains(got, "\nserver = \"http://10.0.0.1:5000\"\n") {
		t.Errorf("hosts.toml = %q, want the mirror as server", got)
	}
	if !strings.Contains(got, "\n[host.\"http://10.0.0.1:5000\"]\n") || strings.Count(got, "[host.") != 1 {
		t.Errorf("hosts.toml = %q, want the mirror as the one host (containerd 1.6 needs a host table)", got)
	}
}

func TestContainerdReadsHostsFromTheNodesCertsDir(t *testing.T) {
	cfg, err := ContainerdConfig(Node{Name: "n1", Dir: "/state/nodes/n1"}, "/usr/lib/cni")
	if err != nil {
		t.Fatal(err)
	}
	if want := `config_path = "/state/nodes/n1/containerd/certs.d"`; !strings.Contains(string(cfg), want) {
		t.Errorf("containerd config lacks %s:\n%s", want, cfg)
	}
}

// Every node's containerd pulls registries without a hosts.toml of their
// own through the pull proxy, at the address the node network agent
// listens on by default, and through nothing else.
func TestNodesPullThroughThePullProxyByDefault(t *testing.T) {
	dir := t.TempDir()
	l := Layout{Root: dir}
	nodes, err := Topology(dir, 2)
	if err != nil {
		t.Fatal(err)
	}
	n := nodes[1]
	if err := os.MkdirAll(filepath.Dir(l.Kubeconfig("kubelet-"+n.Name)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(l.Kubeconfig("kubelet-"+n.Name), []byte("kubeconfig"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := writeNodeFiles(l, n, "/usr/lib/cni"); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(n.Dir, containerdCertsDir, "_default", "hosts.toml"))
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + pullproxy.DefaultAddress
	if !strings.Contains(string(got), fmt.Sprintf("server = %q", url)) || strings.Count(string(got), "[host.") != 1 || !strings.Contains(string(got), fmt.Sprintf("[host.%q]", url)) {
		t.Errorf("_default/hosts.toml = %q, want the pull proxy %s as the one server and host", got, url)
	}
}
