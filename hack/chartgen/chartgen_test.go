package chartgen

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// repoRoot is the repository, whose config/ and chart the tests start from.
const repoRoot = "../.."

func TestGenerateIsDeterministic(t *testing.T) {
	a, err := Generate(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Generate(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, b) {
		t.Error("two runs over the same config/ differ")
	}
	for _, want := range []string{"crds/nest.dev_virtualclusters.yaml", "crds/nest.dev_globalnodes.yaml", "templates/manager.yaml", "templates/rbac.yaml", "templates/priorityclass.yaml"} {
		if _, ok := a[want]; !ok {
			t.Errorf("Generate does not write %s", want)
		}
	}
}

func TestTemplatesUseReleaseNamespaceLabelsAndValues(t *testing.T) {
	files, err := Generate(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	manager := string(files["templates/manager.yaml"])
	for _, want := range []string{
		"namespace: {{ .Release.Namespace }}\n",
		"labels:\n    {{- include \"nest.labels\" . | nindent 4 }}\n",
		"replicas: {{ .Values.replicas }}\n",
		"image: \"{{ .Values.image.repository }}:{{ .Values.image.tag }}\"\n",
		"imagePullPolicy: {{ .Values.image.pullPolicy }}\n",
		"- --leader-elect={{ .Values.leaderElect }}\n",
		"        {{- include \"nest.managerArgs\" . | nindent 8 }}\n",
		"resources:\n          {{- toYaml .Values.resources | nindent 10 }}\n",
	} {
		if !strings.Contains(manager, want) {
			t.Errorf("templates/manager.yaml lacks %q:\n%s", want, manager)
		}
	}
	if strings.Contains(manager, "nest-system") || strings.Contains(manager, "Set them for your cluster") {
		t.Errorf("templates/manager.yaml keeps config/'s namespace or its hand-editing comment:\n%s", manager)
	}
	agent := string(files["templates/node-network.yaml"])
	if !strings.HasPrefix(agent, "{{- if .Values.nodeNetwork.enabled }}\n") || !strings.HasSuffix(agent, "{{- end }}\n") ||
		!strings.Contains(agent, "kind: DaemonSet") || !strings.Contains(agent, "namespace: nest-node-network") {
		t.Errorf("templates/node-network.yaml is not config/'s node network agent under nodeNetwork.enabled:\n%s", agent)
	}
	for _, want := range []string{
		"        image: \"{{ .Values.nodeNetwork.image.repository }}:{{ .Values.nodeNetwork.image.tag }}\"\n",
		"        imagePullPolicy: {{ .Values.nodeNetwork.image.pullPolicy }}\n",
	} {
		if !strings.Contains(agent, want) {
			t.Errorf("templates/node-network.yaml lacks %q:\n%s", want, agent)
		}
	}
	if strings.Contains(agent, "nest.local/nest:dev") {
		t.Errorf("templates/node-network.yaml keeps config/'s agent image:\n%s", agent)
	}
	crd, err := os.ReadFile(filepath.Join(repoRoot, "config/crd/nest.dev_virtualclusters.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(files["crds/nest.dev_virtualclusters.yaml"], crd) {
		t.Error("crds/ is not a verbatim copy of config/crd")
	}
}

// fixture copies config/ and the chart's values.yaml into a temporary root,
// then applies edit to the copy of file (relative to the root).
func fixture(t *testing.T, file string, edit func(string) string) string {
	t.Helper()
	root := t.TempDir()
	src := filepath.Join(repoRoot, ConfigDir)
	err := filepath.Walk(src, func(p string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(repoRoot, p)
		return copyFile(p, filepath.Join(root, rel))
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := copyFile(filepath.Join(repoRoot, ChartDir, valuesFile), filepath.Join(root, ChartDir, valuesFile)); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(root, filepath.FromSlash(file))
	data, _ := os.ReadFile(p)
	edited := edit(string(data))
	if edited == string(data) {
		t.Fatalf("the edit of %s changed nothing", file)
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

func copyFile(from, to string) error {
	data, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		return err
	}
	return os.WriteFile(to, data, 0o644)
}

func replace(old, new string) func(string) string {
	return func(s string) string { return strings.Replace(s, old, new, 1) }
}

// Each error names the file and the field to fix, so `make generate` tells
// the author what disagrees rather than writing a chart that differs from
// config/.
func TestGenerateRefusesWhatTheChartCannotCarry(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		edit       func(string) string
		want       []string
	}{
		{"image", "charts/nest/values.yaml", replace("tag: dev", "tag: v9"),
			[]string{"config/manager/manager.yaml", "container manager: image", "charts/nest/values.yaml", "image.repository:image.tag"}},
		{"replicas", "charts/nest/values.yaml", replace("replicas: 1", "replicas: 2"),
			[]string{"config/manager/manager.yaml", "spec.replicas", "charts/nest/values.yaml sets replicas"}},
		{"pull policy", "config/manager/manager.yaml", replace("imagePullPolicy: IfNotPresent", "imagePullPolicy: Always"),
			[]string{"config/manager/manager.yaml", "imagePullPolicy", "image.pullPolicy"}},
		{"resources", "config/manager/manager.yaml", replace("memory: 256Mi", "memory: 512Mi"),
			[]string{"config/manager/manager.yaml", "resources", "charts/nest/values.yaml sets resources"}},
		{"agent image", "charts/nest/values.yaml", replace("node-network-agent`).\n  image:\n    repository: nest.local/nest\n    tag: dev", "node-network-agent`).\n  image:\n    repository: nest.local/nest\n    tag: v9"),
			[]string{"config/nodenetwork/node-network.yaml", "DaemonSet nest-node-network: container agent: image", "charts/nest/values.yaml", "nodeNetwork.image.repository:nodeNetwork.image.tag"}},
		{"agent pull policy", "config/nodenetwork/node-network.yaml", replace("imagePullPolicy: IfNotPresent", "imagePullPolicy: Always"),
			[]string{"config/nodenetwork/node-network.yaml", "container agent: imagePullPolicy", "charts/nest/values.yaml sets nodeNetwork.image.pullPolicy"}},
		{"agent renamed", "config/nodenetwork/node-network.yaml", replace("- name: agent", "- name: helper"),
			[]string{"config/nodenetwork/node-network.yaml", "DaemonSet nest-node-network", "no container named agent"}},
		{"agent DaemonSet renamed", "config/nodenetwork/node-network.yaml", replace("kind: DaemonSet\nmetadata:\n  name: nest-node-network", "kind: DaemonSet\nmetadata:\n  name: nest-agent"),
			[]string{"templates/node-network.yaml", "container agent of DaemonSet nest-node-network", "nodeNetwork.image", "config/nodenetwork/node-network.yaml has no such container"}},
		{"leader election", "charts/nest/values.yaml", replace("leaderElect: true", "leaderElect: false"),
			[]string{"config/manager/manager.yaml", "--leader-elect=true", "leaderElect: false"}},
		{"file not in the chart", "config/extra/configmap.yaml", func(string) string { return "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n" },
			[]string{"config/extra/configmap.yaml is not in the chart"}},
		{"other namespace", "config/rbac/service_account.yaml", replace("namespace: nest-system", "namespace: kube-system"),
			[]string{"config/rbac/service_account.yaml: ServiceAccount nest-manager: metadata.namespace", "kube-system"}},
		{"nest-system in a field", "config/manager/manager.yaml", replace("- --leader-elect\n", "- --leader-elect\n        - --lease-namespace=nest-system\n"),
			[]string{"config/manager/manager.yaml: Deployment nest-manager: spec.template.spec.containers[0].args[1]", "release namespace"}},
		{"other labels", "config/rbac/service_account.yaml", replace("app.kubernetes.io/name: nest-manager", "app.kubernetes.io/name: nest-manager\n    team: a"),
			[]string{"config/rbac/service_account.yaml: ServiceAccount nest-manager: metadata.labels", "_helpers.tpl"}},
		{"template delimiters", "config/manager/manager.yaml", replace("- --leader-elect\n", "- --leader-elect\n        - --greeting={{ hi }}\n"),
			[]string{"templates/manager.yaml", "config/manager/manager.yaml", "Helm would evaluate"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Generate(fixture(t, tc.file, tc.edit))
			if err == nil {
				t.Fatal("Generate succeeded")
			}
			for _, want := range tc.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
		})
	}
}
