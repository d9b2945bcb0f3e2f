package install

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// The README's install, `kubectl apply -R -f config/`, works on a fresh API
// server: kubectl walks the folder in lexical order, so the namespace must
// come before what lives in it.
func TestDocumentedKubectlApplyInstallsOnAFreshAPIServer(t *testing.T) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Fatal("KUBEBUILDER_ASSETS is not set: run with `make unit`, which points it at our kube-apiserver, etcd and kubectl builds")
	}
	env := &envtest.Environment{}
	if _, err := env.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	admin, err := env.AddUser(envtest.User{Name: "admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kubectl, err := admin.Kubectl()
	if err != nil {
		t.Fatal(err)
	}
	stdout, stderr, err := kubectl.Run("apply", "-R", "-f", filepath.Join("..", "..", "config"))
	out := readAll(t, stdout) + readAll(t, stderr)
	if err != nil {
		t.Fatalf("kubectl apply -R -f config/: %v\n%s", err, out)
	}
	for _, want := range []string{"namespace/nest-system", "customresourcedefinition.apiextensions.k8s.io/virtualclusters.nest.dev",
		"customresourcedefinition.apiextensions.k8s.io/globalnodes.nest.dev", "deployment.apps/nest-manager", "daemonset.apps/nest-node-network"} {
		if !strings.Contains(out, want) {
			t.Errorf("kubectl did not apply %s:\n%s", want, out)
		}
	}
}

func readAll(t *testing.T, r io.Reader) string {
	t.Helper()
	data, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}
