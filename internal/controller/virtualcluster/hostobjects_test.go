package virtualcluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/yaml"

	"github.com/nestdev/nest/internal/controlplane"
	"github.com/nestdev/nest/internal/kube"
)

// The phases create exactly the host objects the registry lists as Nest's,
// each owned by the VirtualCluster and labelled for the cache: an object
// the registry lacks would survive deletion and escape the cache, and one
// no phase creates would never exist.
func TestPhasesCreateEveryHostObject(t *testing.T) {
	n := newCluster(t, "registry")
	ctx := context.Background()
	eventually(t, "admin kubeconfig written, the last object a phase creates", func() error {
		if getVC(t, n.Namespace, "registry").Status.KubeconfigSecretRef == nil {
			return fmt.Errorf("no kubeconfigSecretRef yet")
		}
		return nil
	})
	vc := getVC(t, n.Namespace, "registry")
	var want []string
	for _, h := range controlplane.HostObjects {
		if h.MadeBy != controlplane.MadeByNest {
			continue
		}
		for _, obj := range h.Objects(n) {
			want = append(want, h.Kind()+"/"+obj.GetName())
			if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
				t.Errorf("%s %s: %v", h.Kind(), obj.GetName(), err)
				continue
			}
			if !metav1.IsControlledBy(obj, vc) {
				t.Errorf("%s %s is not owned by the VirtualCluster", h.Kind(), obj.GetName())
			}
			if h.CachedByLabel && obj.GetLabels()[controlplane.LabelVirtualCluster] != vc.Name {
				t.Errorf("%s %s lacks label %s: the cache never sees it", h.Kind(), obj.GetName(), controlplane.LabelVirtualCluster)
			}
		}
	}
	slices.Sort(want)
	got := createdIn(n.Namespace)
	for _, o := range got {
		if !slices.Contains(want, o) {
			t.Errorf("a phase creates %s, which controlplane.HostObjects lacks", o)
		}
	}
	for _, o := range want {
		if !slices.Contains(got, o) {
			t.Errorf("controlplane.HostObjects lists %s, which no phase created", o)
		}
	}
}

// verbsFor are the verbs the controller needs on a kind of host object:
// it reads every kind (the cache lists and watches, deletion gets) and
// deletes it, and creates, updates and patches the kinds it makes.
func verbsFor(h controlplane.HostObject) []string {
	verbs := []string{"get", "list", "watch", "delete"}
	if h.MadeBy == controlplane.MadeByNest {
		verbs = append(verbs, "create", "update", "patch")
	}
	return verbs
}

// The RBAC markers, and the ClusterRole generated from them, grant every
// verb the controller needs on each kind of host object.
func TestRBACCoversHostObjects(t *testing.T) {
	for _, source := range []struct {
		name  string
		rules func(*testing.T) []rbacv1.PolicyRule
	}{
		{"markers in reconciler.go", func(t *testing.T) []rbacv1.PolicyRule { return rbacMarkers(t, "reconciler.go") }},
		{"config/rbac/role.yaml", func(t *testing.T) []rbacv1.PolicyRule {
			return clusterRoleRules(t, filepath.Join("..", "..", "..", "config", "rbac", "role.yaml"))
		}},
	} {
		t.Run(source.name, func(t *testing.T) {
			rules := source.rules(t)
			if len(controlplane.HostObjects) == 0 {
				t.Fatal("controlplane.HostObjects is empty")
			}
			scheme := kube.NewScheme()
			for _, h := range controlplane.HostObjects {
				gvk, err := apiutil.GVKForObject(h.New(), scheme)
				if err != nil {
					t.Fatal(err)
				}
				plural, _ := meta.UnsafeGuessKindToResource(gvk)
				resource := plural.Resource
				if missing := missingVerbs(rules, gvk.Group, resource, verbsFor(h)); len(missing) > 0 {
					t.Errorf("%s grants no %v on %s (group %q)", source.name, missing, resource, gvk.Group)
				}
			}
		})
	}
}

// missingVerbs returns the verbs rules do not grant on every object of the
// resource. Rules limited to named objects grant nothing here.
func missingVerbs(rules []rbacv1.PolicyRule, group, resource string, verbs []string) []string {
	matches := func(values []string, v string) bool {
		return slices.Contains(values, v) || slices.Contains(values, rbacv1.ResourceAll)
	}
	var missing []string
	for _, verb := range verbs {
		if !slices.ContainsFunc(rules, func(r rbacv1.PolicyRule) bool {
			return len(r.ResourceNames) == 0 && matches(r.APIGroups, group) && matches(r.Resources, resource) && matches(r.Verbs, verb)
		}) {
			missing = append(missing, verb)
		}
	}
	return missing
}

// rbacMarkers parses the +kubebuilder:rbac markers of a Go file into the
// rules controller-gen makes of them. It fails on a missing file, on a file
// without markers and on a marker key it does not know, rather than check
// less than it claims.
func rbacMarkers(t *testing.T, path string) []rbacv1.PolicyRule {
	t.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rules []rbacv1.PolicyRule
	for _, line := range strings.Split(string(src), "\n") {
		comment, ok := strings.CutPrefix(strings.TrimSpace(line), "//")
		if !ok {
			continue
		}
		marker, ok := strings.CutPrefix(strings.TrimSpace(comment), "+kubebuilder:rbac:")
		if !ok {
			continue
		}
		var rule rbacv1.PolicyRule
		for _, field := range strings.Split(marker, ",") {
			key, value, _ := strings.Cut(field, "=")
			values := strings.Split(strings.Trim(value, `"`), ";")
			switch key {
			case "groups":
				rule.APIGroups = values
			case "resources":
				rule.Resources = values
			case "verbs":
				rule.Verbs = values
			case "resourceNames":
				rule.ResourceNames = values
			default:
				t.Fatalf("%s: marker %q has key %q, which this test does not read", path, marker, key)
			}
		}
		rules = append(rules, rule)
	}
	if len(rules) == 0 {
		t.Fatalf("%s has no +kubebuilder:rbac markers", path)
	}
	return rules
}

// clusterRoleRules reads the rules of a ClusterRole manifest and fails when
// the file is missing or holds none.
func clusterRoleRules(t *testing.T, path string) []rbacv1.PolicyRule {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var role rbacv1.ClusterRole
	if err := yaml.Unmarshal(data, &role); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if role.Kind != "ClusterRole" || len(role.Rules) == 0 {
		t.Fatalf("%s holds no ClusterRole rules (kind %q)", path, role.Kind)
	}
	return role.Rules
}
