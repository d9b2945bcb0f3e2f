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

// Each supported version's API server, every optional group version turned
// on, serves resources of each: the list is what the versions serve, not a
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
			served := servedGroupVersions(t, filepath.Join(filepath.Dir(host), "kube-"+v), version.OptionalAPIs)
			for _, gv := range version.OptionalAPIs {
				if !served[gv] {
					t.Errorf("%s turned on serves no resource in %s: drop it from OptionalAPIs, or give %s a list of its own", gv, v, v)
				}
			}
		})
	}
}

// servedGroupVersions starts the kube-apiserver of the multi-call kube
// binary with gvs turned on and says which of them serve a resource.
func servedGroupVersions(t *testing.T, kube string, gvs []string) map[string]bool {
	t.Helper()
	dir := t.TempDir()
	for _, c := range []string{"kube-apiserver", "etcd", "kubectl"} {
		if err := os.Symlink(kube, filepath.Join(dir, c)); err != nil {
			t.Fatal(err)
		}
	}
	env := &envtest.Environment{BinaryAssetsDirectory: dir}
	env.ControlPlane.GetAPIServer().Configure().Append("runtime-config", strings.Join(gvs, "=true,")+"=true")
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("%s with --runtime-config for %v: %v", kube, gvs, err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	dc := discovery.NewDiscoveryClientForConfigOrDie(cfg)
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
