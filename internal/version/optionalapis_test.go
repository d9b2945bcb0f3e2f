package version_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/discovery"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/nestdev/nest/internal/version"
)

// Each supported version's API server, every optional group version of
// every version turned on, serves resources of exactly those its own
// OptionalAPIs list names: the lists are what the versions serve, not a
// guess. It runs our own builds of
// each version (envtest, KUBEBUILDER_ASSETS; the other versions' kube
// binaries beside the host's).
func TestOptionalAPIsAreWhatEachVersionServes(t *testing.T) {
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		t.Fatal("KUBEBUILDER_ASSETS is not set: run the tests with `make unit`, which points it at our kube-apiserver builds")
	}
	host, err := filepath.EvalSymlinks(filepath.Join(assets, "kube-apiserver"))
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range version.Supported {
		t.Run(v, func(t *testing.T) {
			served := servedGroupVersions(t, filepath.Join(filepath.Dir(host), "kube-"+v), v, version.AllOptionalAPIs())
			for _, gv := range version.AllOptionalAPIs() {
				if want := version.ServesOptionalAPI(v, gv); served[gv] != want {
					t.Errorf("%s turned on: serves resources %t, OptionalAPIs[%s] says %t", gv, served[gv], v, want)
				}
			}
		})
	}
}

// servedGroupVersions starts the kube-apiserver of the multi-call kube
// binary of version v with gvs turned on and says which of them serve a
// resource.
func servedGroupVersions(t *testing.T, kube, v string, gvs []string) map[string]bool {
	t.Helper()
	dir := t.TempDir()
	for _, c := range []string{"kube-apiserver", "etcd", "kubectl"} {
		if err := os.Symlink(kube, filepath.Join(dir, c)); err != nil {
			t.Fatal(err)
		}
	}
	// Named paths: KUBEBUILDER_ASSETS would win over an assets directory.
	env := &envtest.Environment{}
	env.ControlPlane.GetAPIServer().Path = filepath.Join(dir, "kube-apiserver")
	env.ControlPlane.Etcd = &envtest.Etcd{Path: filepath.Join(dir, "etcd")}
	env.ControlPlane.GetAPIServer().Configure().Append("runtime-config", strings.Join(gvs, "=true,")+"=true")
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("%s with --runtime-config for %v: %v", kube, gvs, err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	dc := discovery.NewDiscoveryClientForConfigOrDie(cfg)
	if info, err := dc.ServerVersion(); err != nil || info.GitVersion != v {
		t.Fatalf("the API server started from %s is %v (%v), want %s", kube, info, err, v)
	}
	served := map[string]bool{}
	for _, gv := range gvs {
		list, err := dc.ServerResourcesForGroupVersion(gv)
		if err != nil {
			continue
		}
		for _, r := range list.APIResources {
			if !strings.Contains(r.Name, "/") {
				served[gv] = true
			}
		}
	}
	return served
}
