// Package test renders the Nest Helm chart with Helm's own engine and checks
// it against the manifests in config/. It is a module of its own so Helm's
// dependencies stay out of Nest's main module.
package test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

const chartDir = ".."

func render(t *testing.T, values map[string]any) []*unstructured.Unstructured {
	t.Helper()
	chrt, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	vals, err := util.ToRenderValues(chrt, values, common.ReleaseOptions{Name: "nest", Namespace: "nest-system", IsInstall: true}, common.DefaultCapabilities)
	if err != nil {
		t.Fatal(err)
	}
	files, err := engine.Render(chrt, vals)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	var objs []*unstructured.Unstructured
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if !strings.HasSuffix(name, ".yaml") {
			continue
		}
		objs = append(objs, decode(t, name, files[name])...)
	}
	return objs
}

func decode(t *testing.T, name, data string) []*unstructured.Unstructured {
	t.Helper()
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(data), 4096)
	var out []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		err := dec.Decode(&u.Object)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("%s is not valid YAML: %v\n%s", name, err, data)
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
}

func find(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}

func TestChartRendersTheManagerAndItsRBAC(t *testing.T) {
	objs := render(t, nil)
	for _, want := range [][2]string{
		{"ServiceAccount", "nest-manager"}, {"ClusterRole", "nest-manager"}, {"ClusterRoleBinding", "nest-manager"},
		{"Role", "nest-manager-leader-election"}, {"RoleBinding", "nest-manager-leader-election"},
		{"Deployment", "nest-manager"}, {"Service", "nest-manager-metrics"},
	} {
		if find(objs, want[0], want[1]) == nil {
			t.Errorf("chart does not render %s %s", want[0], want[1])
		}
	}
	role := find(objs, "ClusterRole", "nest-manager")
	rules, _, _ := unstructured.NestedSlice(role.Object, "rules")
	if len(rules) == 0 {
		t.Fatal("ClusterRole has no rules")
	}
}

func TestChartValuesReachTheDeployment(t *testing.T) {
	objs := render(t, map[string]any{"image": map[string]any{"repository": "example.com/nest-manager", "tag": "v9"}, "replicas": 2})
	d := find(objs, "Deployment", "nest-manager")
	containers, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
	if img := containers[0].(map[string]any)["image"]; img != "example.com/nest-manager:v9" {
		t.Errorf("image = %v", img)
	}
	if r, _, _ := unstructured.NestedFieldNoCopy(d.Object, "spec", "replicas"); fmt.Sprint(r) != "2" {
		t.Errorf("replicas = %v", r)
	}
	if ns := d.GetNamespace(); ns != "nest-system" {
		t.Errorf("namespace = %s, want the release namespace", ns)
	}
}

// The chart's CRDs and ClusterRole rules are copies of config/ made by
// `make generate`; this fails when someone forgot to run it.
func TestChartCopiesMatchGeneratedConfig(t *testing.T) {
	crds, err := filepath.Glob("../../../config/crd/*.yaml")
	if err != nil || len(crds) == 0 {
		t.Fatalf("no CRDs in config/crd: %v", err)
	}
	for _, src := range crds {
		assertSame(t, src, filepath.Join(chartDir, "crds", filepath.Base(src)))
	}
	role, err := os.ReadFile("../../../config/rbac/role.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, rules, ok := bytes.Cut(role, []byte("rules:\n"))
	if !ok {
		t.Fatal("config/rbac/role.yaml has no rules")
	}
	copied, err := os.ReadFile(filepath.Join(chartDir, "files", "clusterrole-rules.yaml"))
	if err != nil || !bytes.Equal(rules, copied) {
		t.Errorf("charts/nest/files/clusterrole-rules.yaml differs from config/rbac/role.yaml: run `make generate` (%v)", err)
	}
}

func assertSame(t *testing.T, a, b string) {
	t.Helper()
	da, err := os.ReadFile(a)
	if err != nil {
		t.Fatal(err)
	}
	db, err := os.ReadFile(b)
	if err != nil || !bytes.Equal(da, db) {
		t.Errorf("%s differs from %s: run `make generate` (%v)", b, a, err)
	}
}

func managerArgs(t *testing.T, values map[string]any) []string {
	t.Helper()
	d := find(render(t, values), "Deployment", "nest-manager")
	containers, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
	var args []string
	for _, a := range containers[0].(map[string]any)["args"].([]any) {
		args = append(args, fmt.Sprint(a))
	}
	return args
}

func TestChartPassesHostNetworkAndMetadata(t *testing.T) {
	has := func(args []string, prefix string) (string, bool) {
		for _, a := range args {
			if v, ok := strings.CutPrefix(a, prefix); ok {
				return v, true
			}
		}
		return "", false
	}
	defaults := managerArgs(t, nil)
	if ns, _ := has(defaults, "--manager-namespace="); ns != "nest-system" {
		t.Errorf("--manager-namespace=%q, want the release namespace", ns)
	}
	for _, flag := range []string{"--host-pod-cidrs=", "--host-service-cidrs=", "--host-node-cidrs=", "--host-label-allowlist=", "--host-annotation-allowlist="} {
		if v, ok := has(defaults, flag); ok {
			t.Errorf("default values render %s%s: the manager's default must apply", flag, v)
		}
	}
	set := managerArgs(t, map[string]any{
		"hostNetwork":  map[string]any{"podCIDRs": []any{"10.244.0.0/16", "fd00:10:244::/56"}, "serviceCIDRs": []any{"10.96.0.0/16"}, "nodeCIDRs": []any{"192.0.2.0/24"}},
		"hostMetadata": map[string]any{"labels": []any{"app", "example.com/*"}, "annotations": []any{}},
	})
	for flag, want := range map[string]string{
		"--host-pod-cidrs=": "10.244.0.0/16,fd00:10:244::/56", "--host-service-cidrs=": "10.96.0.0/16", "--host-node-cidrs=": "192.0.2.0/24",
		"--host-label-allowlist=": "app,example.com/*", "--host-annotation-allowlist=": "",
	} {
		if v, ok := has(set, flag); !ok || v != want {
			t.Errorf("%s%q (present %v), want %q", flag, v, ok, want)
		}
	}
}

func TestChartLeavesTheDashboardOffByDefault(t *testing.T) {
	if d := find(render(t, nil), "Deployment", "nest-dashboard"); d != nil {
		t.Error("the dashboard is rendered with default values; it must be opt-in")
	}
}

// The dashboard holds no credentials of its own: every call uses the signed-in
// user's token. Without TLS it listens on loopback only.
func TestChartDashboardActsOnlyWithUsersTokens(t *testing.T) {
	for _, tc := range []struct {
		tls         string
		wantAddress string
		wantService bool
	}{{"", "--address=127.0.0.1:8080", false}, {"dashboard-tls", "--address=:8443", true}} {
		objs := render(t, map[string]any{"dashboard": map[string]any{"enabled": true, "tls": map[string]any{"secretName": tc.tls}}})
		d := find(objs, "Deployment", "nest-dashboard")
		if d == nil {
			t.Fatal("dashboard.enabled renders no Deployment nest-dashboard")
		}
		if v, _, _ := unstructured.NestedBool(d.Object, "spec", "template", "spec", "automountServiceAccountToken"); v {
			t.Error("the dashboard pod mounts a ServiceAccount token")
		}
		sa := find(objs, "ServiceAccount", "nest-dashboard")
		if v, found, _ := unstructured.NestedBool(sa.Object, "automountServiceAccountToken"); !found || v {
			t.Error("the dashboard ServiceAccount does not turn token automount off")
		}
		for _, o := range objs {
			if k := o.GetKind(); (k == "RoleBinding" || k == "ClusterRoleBinding") && strings.Contains(fmt.Sprint(o.Object["subjects"]), "nest-dashboard") {
				t.Errorf("%s %s grants the dashboard rights", k, o.GetName())
			}
		}
		containers, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
		args := fmt.Sprint(containers[0].(map[string]any)["args"])
		for _, want := range []string{"dashboard", "--auth=token", tc.wantAddress} {
			if !strings.Contains(args, want) {
				t.Errorf("tls %q: args %s lack %s", tc.tls, args, want)
			}
		}
		if got := find(objs, "Service", "nest-dashboard") != nil; got != tc.wantService {
			t.Errorf("tls %q: Service rendered = %v, want %v", tc.tls, got, tc.wantService)
		}
	}
}
