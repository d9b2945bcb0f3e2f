package version_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
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
// api, ...) that go with Kubernetes v: v1.36.3 -> v0.36.3.
func stagingVersion(v string) string {
	return "v0." + strings.SplitN(strings.TrimPrefix(v, "v"), ".", 2)[1]
}

// pinned returns the version file requires of module, or, with replaced,
// the version its replace line points module at; "" when it has neither.
func pinned(t *testing.T, file, module string, replaced bool) string {
	t.Helper()
	line := `(?m)^\s+` + regexp.QuoteMeta(module) + ` (v\S+)`
	if replaced {
		line = `(?m)^\s+` + regexp.QuoteMeta(module) + ` => \S+ (v\S+)`
	}
	m := regexp.MustCompile(line).FindStringSubmatch(read(t, file))
	if m == nil {
		return ""
	}
	return m[1]
}

func TestGoModulesPinKubernetes(t *testing.T) {
	type pin struct {
		file, module, want string
		replaced           bool
	}
	cases := []pin{
		{"go.mod", "k8s.io/client-go", stagingVersion(version.Kubernetes), false},
		{"go.mod", "k8s.io/api", stagingVersion(version.Kubernetes), false},
		{"go.mod", "k8s.io/kubelet", stagingVersion(version.Kubernetes), false},
	}
	// Every supported version's own module pins it, staging modules
	// included (k8s.io/kubernetes requires them at v0.0.0 and replaces).
	for _, v := range version.Supported {
		mod := version.Module(v) + "/go.mod"
		cases = append(cases, pin{mod, "k8s.io/kubernetes", v, false}, pin{mod, "k8s.io/component-base", stagingVersion(v), false},
			pin{mod, "k8s.io/client-go", stagingVersion(v), true})
	}
	for _, c := range cases {
		got := pinned(t, c.file, c.module, c.replaced)
		if got != c.want {
			t.Errorf("%s pins %s %q, want %q (internal/version: host %s, supported %v)", c.file, c.module, got, c.want, version.Kubernetes, version.Supported)
		}
	}
}

func TestModulesAndMinors(t *testing.T) {
	for v, want := range map[string]string{version.Kubernetes: "k8s", "v1.37.2": "k8s/v1.37", "v1.38.0": "k8s/v1.38"} {
		if got := version.Module(v); got != want {
			t.Errorf("Module(%s) = %s, want %s", v, got, want)
		}
	}
	if !version.IsSupported(version.Kubernetes) || version.IsSupported("v1.35.0") {
		t.Error("IsSupported does not follow Supported")
	}
	if !slices.IsSortedFunc(version.Supported, compareVersions) || version.Supported[0] != version.Kubernetes {
		t.Errorf("Supported = %v, want oldest first, starting with the host's %s", version.Supported, version.Kubernetes)
	}
}

// compareVersions orders vMAJOR.MINOR.PATCH by number.
func compareVersions(a, b string) int {
	pa, pb := strings.Split(strings.TrimPrefix(a, "v"), "."), strings.Split(strings.TrimPrefix(b, "v"), ".")
	for i := range min(len(pa), len(pb)) {
		x, _ := strconv.Atoi(pa[i])
		y, _ := strconv.Atoi(pb[i])
		if x != y {
			return x - y
		}
	}
	return len(pa) - len(pb)
}

func TestMakefileReadsTheVersionsFromThisPackage(t *testing.T) {
	mk := read(t, "Makefile")
	if !strings.Contains(mk, "internal/version/version.go") {
		t.Error("the Makefile must take K8S_VERSION and the other versions from internal/version/version.go, not a copy")
	}
	if strings.Contains(mk, "v1.3") {
		t.Error("the Makefile names a Kubernetes version: read it from internal/version/version.go")
	}
}

func TestAPIAndCRDsOfferTheSupportedVersions(t *testing.T) {
	if !slices.Equal(nestv1.SupportedVersions, version.Supported) {
		t.Errorf("api SupportedVersions = %v, want %v", nestv1.SupportedVersions, version.Supported)
	}
	allowed := "self in ['" + strings.Join(version.Supported, "', '") + "']"
	for _, f := range []string{"api/v1alpha1/virtualcluster_types.go", "config/crd/nest.dev_virtualclusters.yaml", "charts/nest/crds/nest.dev_virtualclusters.yaml"} {
		text := read(t, f)
		for _, v := range regexp.MustCompile(`v1\.\d+\.\d+`).FindAllString(text, -1) {
			if !version.IsSupported(v) {
				t.Errorf("%s names Kubernetes %s, not one of %v: change the kubebuilder markers and run make generate", f, v, version.Supported)
			}
		}
		if !strings.Contains(text, allowed) {
			t.Errorf("%s lacks the rule %s: change the kubebuilder markers and run make generate", f, allowed)
		}
		if !strings.Contains(text, "default: "+version.Newest()) && !strings.Contains(text, `default="`+version.Newest()+`"`) {
			t.Errorf("%s does not default to the newest supported version, %s", f, version.Newest())
		}
	}
}

func TestChartRunsTheSupportedVersions(t *testing.T) {
	var values struct {
		ControlPlane struct {
			KubeImageRepository string `json:"kubeImageRepository"`
		} `json:"controlPlane"`
	}
	if err := yaml.Unmarshal([]byte(read(t, "charts/nest/values.yaml")), &values); err != nil {
		t.Fatal(err)
	}
	// The tag is each tenant's version: the repository has none.
	if r := values.ControlPlane.KubeImageRepository; r == "" || strings.Contains(r[strings.LastIndex(r, "/")+1:], ":") {
		t.Errorf("charts/nest/values.yaml controlPlane.kubeImageRepository = %q, want a repository without a tag", r)
	}
}

func TestCheckUpgradeAllowsOneMinorUpAtATime(t *testing.T) {
	for _, tc := range []struct {
		from, to string
		want     string // "" allowed, else a part of the error
	}{
		{version.Kubernetes, version.Kubernetes, ""},
		{version.Kubernetes, "v1.37.2", ""},
		{"v1.36.1", version.Kubernetes, ""},
		{"v1.37.2", version.Kubernetes, "downgrades are refused"},
		{"v1.35.0", "v1.37.2", "skips a minor version after the running v1.35.0: upgrade to v1.36 first"},
		{version.Kubernetes, "v1.38.0", "unsupported Kubernetes version"},
		{version.Kubernetes, "latest", "unsupported Kubernetes version"},
	} {
		err := version.CheckUpgrade(tc.from, tc.to)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("CheckUpgrade(%s, %s) = %v, want it allowed", tc.from, tc.to, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("CheckUpgrade(%s, %s) = %v, want an error with %q", tc.from, tc.to, err, tc.want)
		case err != nil && !strings.Contains(err.Error(), "spec.kubernetesVersion"):
			t.Errorf("CheckUpgrade(%s, %s) = %v, want it to name spec.kubernetesVersion", tc.from, tc.to, err)
		}
	}
}

func TestEtcdVersionsAreTheModulesPins(t *testing.T) {
	for _, v := range version.Supported {
		mod := version.Module(v) + "/go.mod"
		if got, want := pinned(t, mod, "go.etcd.io/etcd/server/v3", false), version.Etcd[v]; got != want {
			t.Errorf("%s pins etcd %q, internal/version.Etcd[%s] says %q", mod, got, v, want)
		}
	}
	if len(version.Etcd) != len(version.Supported) {
		t.Errorf("version.Etcd has %d versions, Supported %d", len(version.Etcd), len(version.Supported))
	}
}

func TestCRDsAcceptTheOptionalAPIs(t *testing.T) {
	for _, f := range []string{"api/v1alpha1/virtualcluster_types.go", "config/crd/nest.dev_virtualclusters.yaml", "charts/nest/crds/nest.dev_virtualclusters.yaml"} {
		// YAML folds a long rule over lines: one space each, unfolded.
		text := strings.Join(strings.Fields(read(t, f)), " ")
		if !strings.Contains(text, version.OptionalAPIsRule()) {
			t.Errorf("%s lacks the rule %s on spec.controlPlane.runtimeConfig: change the kubebuilder marker and run make generate", f, version.OptionalAPIsRule())
		}
	}
	doc := read(t, "api/v1alpha1/virtualcluster_types.go")
	for _, gv := range version.AllOptionalAPIs() {
		if strings.Count(doc, gv) < 3 {
			t.Errorf("api/v1alpha1: runtimeConfig's description and message name %s fewer than twice besides the rule", gv)
		}
	}
}

func TestParseRuntimeConfigNamesTheBadEntry(t *testing.T) {
	got, err := version.ParseRuntimeConfig(version.Kubernetes, []string{"storage.k8s.io/v1beta1", "networking.k8s.io/v1beta1=true"})
	if err != nil || len(got) != 2 || got["storage.k8s.io/v1beta1"] != "true" || got["networking.k8s.io/v1beta1"] != "true" {
		t.Errorf("got %v, %v; want both on", got, err)
	}
	for entry, want := range map[string]string{
		"apps/v1":                         `"apps/v1": not a group version off by default`,
		"networking.k8s.io/v1beta1=false": "only turning a group version on is supported",
	} {
		if _, err := version.ParseRuntimeConfig(version.Kubernetes, []string{entry}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err %v, want %q", entry, err, want)
		}
	}
	if _, err := version.ParseRuntimeConfig("v1.37.2", []string{"networking.k8s.io/v1beta1"}); err == nil || !strings.Contains(err.Error(), "v1.37.2 serves") {
		t.Errorf("networking.k8s.io/v1beta1 on v1.37.2: err %v, want it refused", err)
	}
}
