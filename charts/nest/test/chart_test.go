// Package test renders the Nest Helm chart with Helm's own engine and checks
// it against the manifests in config/, from which `make generate` derives it. It is a module of its own so Helm's
// dependencies stay out of Nest's main module.
package test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
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

const (
	chartDir  = ".."
	configDir = "../../../config"
)

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

// The chart's manager, RBAC and PriorityClass templates are generated from
// config/ by `make generate` (internal/install's TestChartIsGeneratedFromConfig
// catches stale copies). This checks the result through Helm's own engine: at
// default values the chart renders exactly config/'s objects, apart from what
// it adds on purpose: Helm's labels and the manager flags values.yaml drives.
func TestChartRendersWhatConfigInstalls(t *testing.T) {
	rendered := render(t, nil)
	var config []*unstructured.Unstructured
	err := filepath.WalkDir(configDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Ext(p) != ".yaml" {
			return err
		}
		// CRDs reach the chart as crds/ (which Helm does not template) and
		// the namespace through --create-namespace.
		if rel, _ := filepath.Rel(configDir, p); filepath.Dir(rel) == "crd" || rel == "00-namespace.yaml" {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		config = append(config, decode(t, p, string(data))...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(rendered) != len(config) {
		t.Errorf("the chart renders %d objects at default values, config/ has %d", len(rendered), len(config))
	}
	for _, want := range config {
		got := find(rendered, want.GetKind(), want.GetName())
		if got == nil {
			t.Errorf("the chart does not render %s %s from config/", want.GetKind(), want.GetName())
			continue
		}
		got, want = got.DeepCopy(), want.DeepCopy()
		for _, labels := range [][]string{{"metadata", "labels"}, {"spec", "template", "metadata", "labels"}} {
			g, _, _ := unstructured.NestedStringMap(got.Object, labels...)
			w, _, _ := unstructured.NestedStringMap(want.Object, labels...)
			for k, v := range w {
				if g[k] != v {
					t.Errorf("%s %s: %s[%s] = %q, config/ has %q", want.GetKind(), want.GetName(), strings.Join(labels, "."), k, g[k], v)
				}
			}
			unstructured.RemoveNestedField(got.Object, labels...)
			unstructured.RemoveNestedField(want.Object, labels...)
		}
		if want.GetKind() == "Deployment" {
			compareArgs(t, got, want)
		}
		if !reflect.DeepEqual(got.Object, want.Object) {
			g, _ := json.MarshalIndent(got.Object, "", "  ")
			w, _ := json.MarshalIndent(want.Object, "", "  ")
			t.Errorf("%s %s differs from config/:\nchart:\n%s\nconfig/:\n%s", want.GetKind(), want.GetName(), g, w)
		}
	}
}

// chartOnlyFlags are the manager flags nest.managerArgs (_helpers.tpl) adds
// from values.yaml; config/ leaves them to the manager's defaults.
var chartOnlyFlags = []string{
	"--kube-image-repository", "--coredns-image", "--syncer-image", "--image-pull-policy", "--default-service-type",
	"--host-cluster-domain", "--manager-namespace", "--node-network-agent",
	"--host-verifies-pull-credentials",
}

// compareArgs checks that the chart's manager args are config/'s, then only
// chart-only flags, and removes args from both so the rest can be compared.
func compareArgs(t *testing.T, got, want *unstructured.Unstructured) {
	t.Helper()
	args := func(u *unstructured.Unstructured) []string {
		containers, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
		var out []string
		for _, a := range containers[0].(map[string]any)["args"].([]any) {
			// --leader-elect is --leader-elect=true, which the chart spells out.
			out = append(out, strings.TrimSuffix(fmt.Sprint(a), "=true"))
		}
		delete(containers[0].(map[string]any), "args")
		_ = unstructured.SetNestedSlice(u.Object, containers, "spec", "template", "spec", "containers")
		return out
	}
	g, w := args(got), args(want)
	if len(g) < len(w) || !reflect.DeepEqual(g[:len(w)], w) {
		t.Errorf("%s args %v do not start with config/'s %v", want.GetName(), g, w)
		return
	}
	for _, a := range g[len(w):] {
		flag, _, _ := strings.Cut(a, "=")
		if !slices.Contains(chartOnlyFlags, flag) {
			t.Errorf("%s: the chart adds %s, which is neither in config/ nor a values.yaml flag", want.GetName(), a)
		}
	}
}

func managerArgs(t *testing.T, values map[string]any) []string {
	t.Helper()
	return containerArgs(t, values, "Deployment", "nest-manager")
}

// containerArgs are the args of the first container of the workload kind
// name rendered with values.
func containerArgs(t *testing.T, values map[string]any, kind, name string) []string {
	t.Helper()
	d := find(render(t, values), kind, name)
	if d == nil {
		t.Fatalf("no %s %s rendered", kind, name)
	}
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
	if v, _ := has(defaults, "--host-verifies-pull-credentials="); v != "true" {
		t.Errorf("--host-verifies-pull-credentials=%q by default, want true", v)
	}
	for _, flag := range []string{"--host-pod-cidrs=", "--host-service-cidrs=", "--host-node-cidrs=", "--host-label-allowlist=", "--host-annotation-allowlist=", "--image-registry-denylist="} {
		if v, ok := has(defaults, flag); ok {
			t.Errorf("default values render %s%s: the manager's default must apply", flag, v)
		}
	}
	set := managerArgs(t, map[string]any{
		"hostNetwork":  map[string]any{"podCIDRs": []any{"10.244.0.0/16", "fd00:10:244::/56"}, "serviceCIDRs": []any{"10.96.0.0/16"}, "nodeCIDRs": []any{"192.0.2.0/24"}},
		"hostMetadata": map[string]any{"labels": []any{"app", "example.com/*"}, "annotations": []any{}},
		"tenantImages": map[string]any{"registryDenylist": []any{"registry.internal", "10.0.0.0/8"}, "hostVerifiesPullCredentials": false},
	})
	for flag, want := range map[string]string{
		"--host-pod-cidrs=": "10.244.0.0/16,fd00:10:244::/56", "--host-service-cidrs=": "10.96.0.0/16", "--host-node-cidrs=": "192.0.2.0/24",
		"--host-label-allowlist=": "app,example.com/*", "--host-annotation-allowlist=": "",
		"--image-registry-denylist=": "registry.internal,10.0.0.0/8", "--host-verifies-pull-credentials=": "false",
	} {
		if v, ok := has(set, flag); !ok || v != want {
			t.Errorf("%s%q (present %v), want %q", flag, v, ok, want)
		}
	}
}

// The node network agent's pull proxy refuses the host ranges values.yaml
// names and the registry deny list's CIDRs (its names are nest-syncer's to
// refuse); with none, its args are config/'s.
func TestChartPassesHostRangesToThePullProxy(t *testing.T) {
	deny := func(args []string) []string {
		var out []string
		for _, a := range args {
			if v, ok := strings.CutPrefix(a, "--pull-proxy-deny="); ok {
				out = append(out, v)
			}
		}
		return out
	}
	if got := deny(containerArgs(t, nil, "DaemonSet", "nest-node-network")); got != nil {
		t.Errorf("default values render --pull-proxy-deny=%v; want none", got)
	}
	got := deny(containerArgs(t, map[string]any{
		"hostNetwork":  map[string]any{"podCIDRs": []any{"10.244.0.0/16", "fd00:10:244::/56"}, "serviceCIDRs": []any{"10.96.0.0/16"}, "nodeCIDRs": []any{"192.0.2.0/24"}},
		"tenantImages": map[string]any{"registryDenylist": []any{"registry.internal", "*.corp.example", "10.0.0.0/8", "registry.internal:5000"}},
	}, "DaemonSet", "nest-node-network"))
	if want := []string{"10.244.0.0/16,fd00:10:244::/56,10.96.0.0/16,192.0.2.0/24,10.0.0.0/8"}; !slices.Equal(got, want) {
		t.Errorf("--pull-proxy-deny=%v, want %v", got, want)
	}
	if got := deny(containerArgs(t, map[string]any{"tenantImages": map[string]any{"registryDenylist": []any{"registry.internal"}}}, "DaemonSet", "nest-node-network")); got != nil {
		t.Errorf("a deny list of names only renders --pull-proxy-deny=%v; want none", got)
	}
}

// nodeNetwork.enabled: false leaves the privileged agent out and tells the
// manager so, which then gives hostNetwork pods no helper that waits for it.
func TestChartNodeNetworkAgentCanBeLeftOut(t *testing.T) {
	for _, enabled := range []bool{true, false} {
		objs := render(t, map[string]any{"nodeNetwork": map[string]any{"enabled": enabled}})
		if got := find(objs, "DaemonSet", "nest-node-network") != nil; got != enabled {
			t.Errorf("nodeNetwork.enabled %v: DaemonSet rendered = %v", enabled, got)
		}
		if got := find(objs, "Namespace", "nest-node-network") != nil; got != enabled {
			t.Errorf("nodeNetwork.enabled %v: its namespace rendered = %v", enabled, got)
		}
		args := managerArgs(t, map[string]any{"nodeNetwork": map[string]any{"enabled": enabled}})
		if want := fmt.Sprintf("--node-network-agent=%v", enabled); !slices.Contains(args, want) {
			t.Errorf("nodeNetwork.enabled %v: manager args %v lack %s", enabled, args, want)
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
