// Package chartgen derives the Helm chart's install manifests
// (charts/nest/crds and the generated files under charts/nest/templates) from
// config/, so the nest-manager Deployment, its RBAC, the PriorityClass and the
// CRDs are written once.
//
// config/ is the source, not the chart: controller-gen writes the CRDs and
// ClusterRole rules there, and `kubectl apply -R -f config/`, internal/install
// and `nest dev up --with-nest` apply those files as they are, so they must be
// plain manifests. The chart adds only what Helm needs: the release namespace
// in place of nest-system, its standard labels (nest.labels), and the few
// fields charts/nest/values.yaml exposes. values.yaml keeps its defaults (and
// their documentation); Generate fails when they disagree with config/, so the
// chart at its default values installs what config/ does. What only the chart
// has (the dashboard, the manager flags driven by values) stays hand-written in
// charts/nest/templates and _helpers.tpl.
package chartgen

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	yaml "go.yaml.in/yaml/v3"
	sigsyaml "sigs.k8s.io/yaml"
)

// Paths of the source and derived trees relative to the repository root.
const (
	// ConfigDir holds the plain manifests, the single source.
	ConfigDir = "config"
	// ChartDir is the Helm chart whose crds/ and generated templates Generate
	// writes.
	ChartDir = "charts/nest"
	// crdDir is the config/ folder copied verbatim into the chart's crds/:
	// Helm installs crds/ untemplated, before the templates that need them.
	crdDir = "crd"
	// valuesFile is the chart's values file, relative to ChartDir.
	valuesFile = "values.yaml"
	// releaseNamespace replaces namespace in the chart: config/ installs into
	// nest-system, the chart into whatever namespace the release is in.
	releaseNamespace = "nest-system"
)

// chartTemplate is one generated file under charts/nest/templates and the
// config/ files it is derived from, in order.
type chartTemplate struct {
	out  string
	from []string
	// verbatim copies the objects as they are (but for images), with no
	// chart labels: for objects that belong to Nest as a whole rather than
	// to a release.
	verbatim bool
	// when, if set, is the values.yaml switch (a Helm condition such as
	// ".Values.nodeNetwork.enabled") the whole template is rendered under.
	when string
	// images are containers whose image the chart takes from values.yaml,
	// verbatim or not: the one field of such objects a chart user must be
	// able to choose (a registry mirror, a release's tag).
	images []imageBinding
}

// imageBinding binds the image and imagePullPolicy of one container of a
// workload to values.yaml's <values>.repository, <values>.tag and
// <values>.pullPolicy, which must default to config/'s.
type imageBinding struct {
	kind, name, container string
	values                string
	// args, if set, names a _helpers.tpl template whose list items are
	// appended to the container's args: flags the chart derives from
	// values.yaml.
	args string
}

// templates lists every generated template. Each config/ file outside crd/
// must appear here or in notInChart, so a manifest added to config/ cannot be
// silently missing from the chart.
var templates = []chartTemplate{
	{out: "templates/manager.yaml", from: []string{"manager/manager.yaml"}},
	{out: "templates/rbac.yaml", from: []string{
		"rbac/service_account.yaml", "rbac/role.yaml", "rbac/role_binding.yaml",
		"rbac/leader_election.yaml", "syncer/role.yaml",
	}},
	// The tenant PriorityClass is cluster-scoped and its name is fixed
	// (nest-syncer sets it on every tenant pod), so it is not the release's.
	{out: "templates/priorityclass.yaml", from: []string{"scheduling/priorityclass.yaml"}, verbatim: true},
	// The node network agent lives in a namespace of its own, which admits
	// privileged pods, whatever the release namespace.
	{out: "templates/node-network.yaml", from: []string{"nodenetwork/node-network.yaml"}, verbatim: true, when: ".Values.nodeNetwork.enabled",
		images: []imageBinding{{kind: "DaemonSet", name: "nest-node-network", container: "agent", values: "nodeNetwork.image", args: "nest.nodeNetworkArgs"}}},
}

// notInChart lists the config/ files the chart leaves out on purpose, with why.
var notInChart = map[string]string{
	"00-namespace.yaml": "Helm installs into the release namespace, which `helm install --create-namespace` creates",
}

// Files maps a path relative to ChartDir to its generated content.
type Files map[string][]byte

// Generate reads config/ and the chart's values.yaml under root (the
// repository) and returns the chart files derived from config/. It fails,
// naming the file and field, when config/ has a manifest the chart does not
// account for or a default that values.yaml contradicts.
func Generate(root string) (Files, error) {
	values, err := readValues(filepath.Join(root, ChartDir, valuesFile))
	if err != nil {
		return nil, err
	}
	configDir := filepath.Join(root, ConfigDir)
	sources, err := configFiles(configDir)
	if err != nil {
		return nil, err
	}
	for _, tmpl := range templates {
		for _, src := range tmpl.from {
			if !slices.Contains(sources, src) {
				return nil, fmt.Errorf("hack/chartgen derives %s from %s/%s, which does not exist", tmpl.out, ConfigDir, src)
			}
		}
	}
	files := Files{}
	used := map[string]bool{}
	for _, src := range sources {
		if path.Dir(src) != crdDir {
			continue
		}
		data, err := os.ReadFile(filepath.Join(configDir, filepath.FromSlash(src)))
		if err != nil {
			return nil, err
		}
		files[path.Join("crds", path.Base(src))] = data
		used[src] = true
	}
	g := &generator{values: values}
	for _, tmpl := range templates {
		out, err := g.template(configDir, tmpl)
		if err != nil {
			return nil, err
		}
		files[tmpl.out] = out
		for _, src := range tmpl.from {
			used[src] = true
		}
	}
	for _, src := range sources {
		if _, skipped := notInChart[src]; !used[src] && !skipped {
			return nil, fmt.Errorf("%s/%s is not in the chart: add it to templates (or notInChart, saying why) in hack/chartgen", ConfigDir, src)
		}
	}
	return files, nil
}

// Write writes files under chartDir, and removes CRDs in its crds/ that are no
// longer generated: crds/ holds only copies of config/crd/.
func (f Files) Write(chartDir string) error {
	stale, err := filepath.Glob(filepath.Join(chartDir, "crds", "*.yaml"))
	if err != nil {
		return err
	}
	for _, p := range stale {
		rel, err := filepath.Rel(chartDir, p)
		if err != nil {
			return err
		}
		if _, ok := f[filepath.ToSlash(rel)]; !ok {
			if err := os.Remove(p); err != nil {
				return err
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(f)) {
		p := filepath.Join(chartDir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, f[name], 0o644); err != nil {
			return err
		}
	}
	return nil
}

// configFiles lists the .yaml files under dir, slash-separated and sorted.
func configFiles(dir string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Ext(p) != ".yaml" {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		out = append(out, filepath.ToSlash(rel))
		return err
	})
	slices.Sort(out)
	return out, err
}

func readValues(p string) (map[string]any, error) {
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	var v map[string]any
	if err := sigsyaml.Unmarshal(data, &v); err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	return v, nil
}

// generator turns config/ objects into template text. Rewritten fields are
// first set to placeholder scalars, because template actions are not YAML;
// after encoding, expand swaps each placeholder for its action.
type generator struct {
	values map[string]any
	subs   []substitution
}

// substitution is one template action standing in for a placeholder.
type substitution struct {
	kind substKind
	// action is the template text: the whole value for inline, or the
	// pipeline before `| nindent` for block and seqItems.
	action string
}

type substKind int

const (
	// inline replaces the placeholder within its line.
	inline substKind = iota
	// block makes the placeholder's key hold the action's YAML, indented one
	// level deeper: `labels:` then `{{- include "nest.labels" . | nindent 4 }}`.
	block
	// seqItems replaces a placeholder sequence item with the action's items.
	seqItems
)

var placeholderRE = regexp.MustCompile(`__chartgen_([0-9]+)__`)

func (g *generator) placeholder(kind substKind, action string) *yaml.Node {
	g.subs = append(g.subs, substitution{kind: kind, action: action})
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: fmt.Sprintf("__chartgen_%d__", len(g.subs)-1)}
}

func (g *generator) template(configDir string, tmpl chartTemplate) ([]byte, error) {
	g.subs = nil
	var out bytes.Buffer
	fmt.Fprintf(&out, "# Code generated by hack/chartgen from %s/; DO NOT EDIT.\n", ConfigDir)
	fmt.Fprintf(&out, "# Edit the file named above each object (or values.yaml and _helpers.tpl for\n# what only the chart has) and run `make generate`.\n")
	enc := yaml.NewEncoder(&out)
	enc.SetIndent(2)
	enc.CompactSeqIndent()
	bound := map[imageBinding]bool{}
	for _, src := range tmpl.from {
		name := ConfigDir + "/" + src
		docs, err := readDocs(filepath.Join(configDir, filepath.FromSlash(src)), name)
		if err != nil {
			return nil, err
		}
		for i, doc := range docs {
			if !tmpl.verbatim {
				if err := g.chartObject(name, doc.Content[0]); err != nil {
					return nil, err
				}
			}
			obj := doc.Content[0]
			where := fmt.Sprintf("%s: %s %s", name, scalar(obj, "kind"), scalar(lookup(obj, "metadata"), "name"))
			if err := g.images(where, tmpl.images, obj, bound); err != nil {
				return nil, err
			}
			if err := noHardcodedNamespace(where, obj, ""); err != nil {
				return nil, err
			}
			if i == 0 {
				// On the first key, not the document, so no blank line follows.
				first := doc.Content[0].Content[0]
				first.HeadComment = strings.TrimSpace("# From " + name + ".\n" + first.HeadComment)
			}
			if err := enc.Encode(doc); err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
		}
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	for _, b := range tmpl.images {
		if !bound[b] {
			return nil, fmt.Errorf("%s: hack/chartgen binds the image of container %s of %s %s to %s/%s's %s, but %s has no such container",
				tmpl.out, b.container, b.kind, b.name, ChartDir, valuesFile, b.values, strings.Join(prefixed(tmpl.from), ", "))
		}
	}
	text := out.String()
	if strings.Contains(text, "{{") || strings.Contains(text, "}}") {
		return nil, fmt.Errorf("%s: its sources (%s) contain %q or %q, which Helm would evaluate", tmpl.out, strings.Join(prefixed(tmpl.from), ", "), "{{", "}}")
	}
	expanded, err := g.expand(text)
	if err != nil || tmpl.when == "" {
		return expanded, err
	}
	return []byte("{{- if " + tmpl.when + " }}\n" + string(expanded) + "{{- end }}\n"), nil
}

func prefixed(srcs []string) []string {
	out := make([]string, len(srcs))
	for i, s := range srcs {
		out[i] = ConfigDir + "/" + s
	}
	return out
}

// readDocs decodes every non-empty YAML document of a file; name is the path
// errors report.
func readDocs(p, name string) ([]*yaml.Node, error) {
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var docs []*yaml.Node
	for {
		doc := &yaml.Node{}
		err := dec.Decode(doc)
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if len(doc.Content) == 0 {
			continue
		}
		if doc.Content[0].Kind != yaml.MappingNode {
			return nil, fmt.Errorf("%s: a document is not an object", name)
		}
		docs = append(docs, doc)
	}
}

// expand replaces the placeholders in encoded YAML with template actions.
func (g *generator) expand(text string) ([]byte, error) {
	var out strings.Builder
	for line := range strings.Lines(text) {
		m := placeholderRE.FindStringSubmatchIndex(line)
		if m == nil {
			out.WriteString(line)
			continue
		}
		i, _ := strconv.Atoi(line[m[2]:m[3]])
		s := g.subs[i]
		indent := len(line) - len(strings.TrimLeft(line, " "))
		switch s.kind {
		case inline:
			out.WriteString(line[:m[0]] + s.action + line[m[1]:])
		case block:
			// `key: __chartgen_N__` becomes `key:` and the action below it.
			fmt.Fprintf(&out, "%s\n%s{{- %s | nindent %d }}\n", strings.TrimRight(line[:m[0]], " "), strings.Repeat(" ", indent+2), s.action, indent+2)
		case seqItems:
			// `- __chartgen_N__` becomes the action's items at the same indent.
			fmt.Fprintf(&out, "%s{{- %s | nindent %d }}\n", strings.Repeat(" ", indent), s.action, indent)
		}
	}
	return []byte(out.String()), nil
}

// chartLabels is the only label config/ objects may carry: the chart's
// nest.labels (charts/nest/templates/_helpers.tpl) has it and adds Helm's.
var chartLabels = map[string]string{"app.kubernetes.io/name": "nest-manager"}

// chartObject rewrites one config/ object into its chart form.
func (g *generator) chartObject(file string, obj *yaml.Node) error {
	meta := lookup(obj, "metadata")
	if meta == nil {
		return fmt.Errorf("%s: an object has no metadata", file)
	}
	where := fmt.Sprintf("%s: %s %s", file, scalar(obj, "kind"), scalar(meta, "name"))
	if err := g.labels(where+": metadata.labels", meta); err != nil {
		return err
	}
	if err := g.namespace(where+": metadata.namespace", meta); err != nil {
		return err
	}
	if subjects := lookup(obj, "subjects"); subjects != nil {
		for i, s := range subjects.Content {
			if err := g.namespace(fmt.Sprintf("%s: subjects[%d].namespace", where, i), s); err != nil {
				return err
			}
		}
	}
	if scalar(obj, "kind") != "Deployment" {
		return nil
	}
	podMeta := lookup(obj, "spec", "template", "metadata")
	if podMeta == nil {
		return fmt.Errorf("%s: no spec.template.metadata", where)
	}
	if err := g.labels(where+": spec.template.metadata.labels", podMeta); err != nil {
		return err
	}
	if name := scalar(meta, "name"); name != "nest-manager" {
		return fmt.Errorf("%s: hack/chartgen knows which values.yaml fields set the nest-manager Deployment only: bind this one's there", where)
	}
	return g.manager(where, obj)
}

// labels replaces a labels map (absent, or exactly chartLabels) with the
// chart's nest.labels.
func (g *generator) labels(where string, meta *yaml.Node) error {
	ph := g.placeholder(block, `include "nest.labels" .`)
	labels := lookup(meta, "labels")
	if labels == nil {
		meta.Content = append(meta.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: "labels"}, ph)
		return nil
	}
	var got map[string]string
	if err := labels.Decode(&got); err != nil || !reflect.DeepEqual(got, chartLabels) {
		return fmt.Errorf("%s are %v, want %v: the chart replaces them with nest.labels from charts/nest/templates/_helpers.tpl, so add other labels there too", where, got, chartLabels)
	}
	*labels = *ph
	return nil
}

// namespace replaces an object's or subject's namespace, if it has one, with
// the release's.
func (g *generator) namespace(where string, m *yaml.Node) error {
	ns := lookup(m, "namespace")
	if ns == nil {
		return nil
	}
	if ns.Value != releaseNamespace {
		return fmt.Errorf("%s is %q: config/ installs everything into %s, which the chart replaces with the release namespace", where, ns.Value, releaseNamespace)
	}
	*ns = *g.placeholder(inline, "{{ .Release.Namespace }}")
	return nil
}

// manager binds the nest-manager Deployment's fields that values.yaml exposes,
// after checking that values.yaml's defaults are config/'s.
func (g *generator) manager(where string, deploy *yaml.Node) error {
	if err := g.bind(where, deploy, "spec.replicas", "replicas", inline, "{{ .Values.replicas }}"); err != nil {
		return err
	}
	c := container(deploy, "manager")
	if c == nil {
		return fmt.Errorf("%s: no container named manager", where)
	}
	where += ": container manager"
	// Comments in the container explain editing config/ by hand; the chart
	// documents its knobs in values.yaml instead.
	clearComments(c)
	if err := g.image(where, c, "image"); err != nil {
		return err
	}
	if err := g.bind(where, c, "resources", "resources", block, "toYaml .Values.resources"); err != nil {
		return err
	}
	return g.managerArgs(where, c)
}

// images binds the containers of obj that bindings name, and records them in
// bound.
func (g *generator) images(where string, bindings []imageBinding, obj *yaml.Node, bound map[imageBinding]bool) error {
	for _, b := range bindings {
		if scalar(obj, "kind") != b.kind || scalar(lookup(obj, "metadata"), "name") != b.name {
			continue
		}
		c := container(obj, b.container)
		if c == nil {
			return fmt.Errorf("%s: no container named %s", where, b.container)
		}
		if err := g.image(where+": container "+b.container, c, b.values); err != nil {
			return err
		}
		if b.args != "" {
			args := lookup(c, "args")
			if args == nil || args.Kind != yaml.SequenceNode {
				return fmt.Errorf("%s: container %s: no args to append %s to", where, b.container, b.args)
			}
			args.Content = append(args.Content, g.placeholder(seqItems, fmt.Sprintf("include %q .", b.args)))
		}
		bound[b] = true
	}
	return nil
}

// container is the container called name in a workload's pod template, or
// nil.
func container(workload *yaml.Node, name string) *yaml.Node {
	containers := lookup(workload, "spec", "template", "spec", "containers")
	if containers == nil {
		return nil
	}
	for _, c := range containers.Content {
		if scalar(c, "name") == name {
			return c
		}
	}
	return nil
}

// image binds container c's image to values.yaml's <values>.repository and
// <values>.tag and its imagePullPolicy to <values>.pullPolicy, after
// checking that those default to config/'s.
func (g *generator) image(where string, c *yaml.Node, values string) error {
	image := lookup(c, "image")
	repo := stringValue(g.values, strings.Split(values+".repository", ".")...)
	tag := stringValue(g.values, strings.Split(values+".tag", ".")...)
	if image == nil || image.Value != repo+":"+tag {
		return fmt.Errorf("%s: image is %v but %s/%s sets %s.repository:%s.tag %q: make them agree",
			where, nodeValue(image), ChartDir, valuesFile, values, values, repo+":"+tag)
	}
	*image = *g.placeholder(inline, fmt.Sprintf(`"{{ .Values.%s.repository }}:{{ .Values.%s.tag }}"`, values, values))
	return g.bind(where, c, "imagePullPolicy", values+".pullPolicy", inline, fmt.Sprintf("{{ .Values.%s.pullPolicy }}", values))
}

// managerArgs binds --leader-elect to values.yaml's leaderElect and appends
// the chart's values-driven flags (nest.managerArgs in _helpers.tpl).
func (g *generator) managerArgs(where string, c *yaml.Node) error {
	args := lookup(c, "args")
	if args == nil || args.Kind != yaml.SequenceNode {
		return fmt.Errorf("%s: no args", where)
	}
	found := false
	for _, a := range args.Content {
		flag, val, hasVal := strings.Cut(a.Value, "=")
		if flag != "--leader-elect" {
			continue
		}
		on := true
		if hasVal {
			var err error
			if on, err = strconv.ParseBool(val); err != nil {
				return fmt.Errorf("%s: args: %s: %w", where, a.Value, err)
			}
		}
		if want, ok := lookupValue(g.values, "leaderElect"); !ok || want != on {
			return fmt.Errorf("%s: args set --leader-elect=%t but %s/%s sets leaderElect: %v: make them agree", where, on, ChartDir, valuesFile, want)
		}
		*a = *g.placeholder(inline, "--leader-elect={{ .Values.leaderElect }}")
		found = true
	}
	if !found {
		return fmt.Errorf("%s: args lack --leader-elect, which %s/%s sets through leaderElect", where, ChartDir, valuesFile)
	}
	args.Content = append(args.Content, g.placeholder(seqItems, `include "nest.managerArgs" .`))
	return nil
}

// bind replaces the field at dotted path field of m with a template action,
// after checking that its value equals values.yaml's at valuesPath.
func (g *generator) bind(where string, m *yaml.Node, field, valuesPath string, kind substKind, action string) error {
	keys := strings.Split(field, ".")
	n := lookup(m, keys...)
	want, ok := lookupValue(g.values, strings.Split(valuesPath, ".")...)
	var got any
	if n != nil {
		if err := n.Decode(&got); err != nil {
			return fmt.Errorf("%s: %s: %w", where, field, err)
		}
	}
	if n == nil || !ok || !sameJSON(got, want) {
		return fmt.Errorf("%s: %s is %s but %s/%s sets %s: %s: make them agree", where, field, asJSON(got), ChartDir, valuesFile, valuesPath, asJSON(want))
	}
	*n = *g.placeholder(kind, action)
	return nil
}

// noHardcodedNamespace fails on any nest-system left in a chart object: the
// chart installs into the release namespace, whatever it is called.
func noHardcodedNamespace(where string, n *yaml.Node, at string) error {
	switch n.Kind {
	case yaml.ScalarNode:
		if strings.Contains(n.Value, releaseNamespace) {
			return fmt.Errorf("%s: %s is %q: the chart cannot name %s, it installs into the release namespace", where, strings.TrimPrefix(at, "."), n.Value, releaseNamespace)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			if err := noHardcodedNamespace(where, n.Content[i+1], at+"."+n.Content[i].Value); err != nil {
				return err
			}
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			if err := noHardcodedNamespace(where, c, fmt.Sprintf("%s[%d]", at, i)); err != nil {
				return err
			}
		}
	}
	return nil
}

// lookup follows mapping keys from n and returns the value node, or nil.
func lookup(n *yaml.Node, keys ...string) *yaml.Node {
	for _, k := range keys {
		if n == nil || n.Kind != yaml.MappingNode {
			return nil
		}
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == k {
				next = n.Content[i+1]
			}
		}
		n = next
	}
	return n
}

func scalar(n *yaml.Node, key string) string {
	if v := lookup(n, key); v != nil {
		return v.Value
	}
	return ""
}

func nodeValue(n *yaml.Node) any {
	if n == nil {
		return "unset"
	}
	return strconv.Quote(n.Value)
}

func clearComments(n *yaml.Node) {
	n.HeadComment, n.LineComment, n.FootComment = "", "", ""
	for _, c := range n.Content {
		clearComments(c)
	}
}

func lookupValue(values map[string]any, keys ...string) (any, bool) {
	var v any = values
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		if v, ok = m[k]; !ok {
			return nil, false
		}
	}
	return v, true
}

func stringValue(values map[string]any, keys ...string) string {
	v, _ := lookupValue(values, keys...)
	s, _ := v.(string)
	return s
}

// asJSON shows a value in errors the same way whichever file it came from.
func asJSON(v any) string {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(data)
}

// sameJSON compares two decoded YAML values as JSON, so 1 (int, from a YAML
// node) equals 1 (float64, from values.yaml).
func sameJSON(a, b any) bool {
	norm := func(v any) (any, error) {
		data, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		var out any
		return out, json.Unmarshal(data, &out)
	}
	na, errA := norm(a)
	nb, errB := norm(b)
	return errA == nil && errB == nil && reflect.DeepEqual(na, nb)
}
