package version_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/version"
)

// root is the repository root, from this package's directory.
const root = "../.."

func read(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatalf("read %s: %v", rel, err)
	}
	return string(b)
}

// stagingVersion is the version of the k8s.io staging modules (client-go,
// api, ...) that go with Kubernetes: v1.36.3 -> v0.36.3.
func stagingVersion() string {
	return "v0." + strings.SplitN(strings.TrimPrefix(version.Kubernetes, "v"), ".", 2)[1]
}

func TestGoModulesPinKubernetes(t *testing.T) {
	cases := []struct{ file, module, want string }{
		{"go.mod", "k8s.io/client-go", stagingVersion()},
		{"go.mod", "k8s.io/api", stagingVersion()},
		{"go.mod", "k8s.io/kubelet", stagingVersion()},
		{"k8s/go.mod", "k8s.io/kubernetes", version.Kubernetes},
		{"k8s/go.mod", "k8s.io/component-base", stagingVersion()},
	}
	for _, c := range cases {
		re := regexp.MustCompile(`(?m)^\s+` + regexp.QuoteMeta(c.module) + ` (v\S+)`)
		m := re.FindStringSubmatch(read(t, c.file))
		if m == nil {
			t.Errorf("%s does not require %s", c.file, c.module)
			continue
		}
		if m[1] != c.want {
			t.Errorf("%s pins %s %s, want %s (internal/version.Kubernetes is %s)", c.file, c.module, m[1], c.want, version.Kubernetes)
		}
	}
}

func TestMakefileReadsTheVersionFromThisPackage(t *testing.T) {
	if !strings.Contains(read(t, "Makefile"), "internal/version/version.go") {
		t.Error("the Makefile must take K8S_VERSION from internal/version/version.go, not a copy")
	}
}

func TestAPIAndCRDsOfferOnlyThisVersion(t *testing.T) {
	if len(nestv1.SupportedVersions) != 1 || nestv1.SupportedVersions[0] != version.Kubernetes {
		t.Errorf("api SupportedVersions = %v, want [%s]", nestv1.SupportedVersions, version.Kubernetes)
	}
	for _, f := range []string{"api/v1alpha1/virtualcluster_types.go", "config/crd/nest.dev_virtualclusters.yaml", "charts/nest/crds/nest.dev_virtualclusters.yaml"} {
		text := read(t, f)
		for _, v := range regexp.MustCompile(`v1\.\d+\.\d+`).FindAllString(text, -1) {
			if v != version.Kubernetes {
				t.Errorf("%s names Kubernetes %s, want %s: change the kubebuilder markers and run make generate", f, v, version.Kubernetes)
			}
		}
		if !strings.Contains(text, version.Kubernetes) {
			t.Errorf("%s does not name %s as the default and allowed version", f, version.Kubernetes)
		}
	}
}

func TestChartRunsThisVersion(t *testing.T) {
	var values struct {
		ControlPlane struct {
			KubeImage string `json:"kubeImage"`
		} `json:"controlPlane"`
	}
	if err := yaml.Unmarshal([]byte(read(t, "charts/nest/values.yaml")), &values); err != nil {
		t.Fatal(err)
	}
	if want := ":" + version.Kubernetes; !strings.HasSuffix(values.ControlPlane.KubeImage, want) {
		t.Errorf("charts/nest/values.yaml controlPlane.kubeImage = %q, want a tag %s", values.ControlPlane.KubeImage, want)
	}
}
