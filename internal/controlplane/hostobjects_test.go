package controlplane

import (
	"reflect"
	"slices"
	"testing"
)

// The registry is what watches, the cache and deletion derive from: each
// kind once, with names, a deletion step that runs, and only owned kinds
// watched.
func TestHostObjectsAreWellFormed(t *testing.T) {
	if len(HostObjects) == 0 {
		t.Fatal("HostObjects is empty")
	}
	n := NamesOf(vc(nil))
	kinds := map[string]bool{}
	for _, h := range HostObjects {
		kind := h.Kind()
		if kinds[kind] {
			t.Errorf("%s is listed twice", kind)
		}
		kinds[kind] = true
		names := h.Names(n)
		if len(names) == 0 {
			t.Errorf("%s names no object", kind)
		}
		for i, name := range names {
			if name == "" || slices.Contains(names[:i], name) {
				t.Errorf("%s names %q: empty or twice", kind, names)
			}
		}
		if !slices.Contains(DeletionSteps, h.Deletion) {
			t.Errorf("%s is deleted in step %d, which DeletionSteps never runs", kind, h.Deletion)
		}
		if h.Watched && h.MadeBy != MadeByNest {
			t.Errorf("%s is watched as owned, but Nest does not make it, so it carries no controller reference", kind)
		}
	}
}

// What each builder makes is the registry's kind and names, in the
// VirtualCluster's namespace, and labelled for the cache when it is cached
// by label: deletion finds objects by those names, and the cache sees only
// labelled ones.
func TestHostObjectBuildersMatchTheRegistry(t *testing.T) {
	v := vc(nil)
	n := NamesOf(v)
	built := 0
	for _, h := range HostObjects {
		if h.Build == nil {
			continue
		}
		objs, err := h.Build(v, Options{HostNetwork: devNetwork}, ServiceIPs{APIServer: "10.96.0.5", DNS: "10.96.0.6"})
		if err != nil {
			t.Fatalf("%s: %v", h.Kind(), err)
		}
		var names []string
		for _, obj := range objs {
			if reflect.TypeOf(obj) != reflect.TypeOf(h.New()) {
				t.Errorf("%s builder made a %T", h.Kind(), obj)
			}
			if obj.GetNamespace() != n.Namespace {
				t.Errorf("%s %s is in namespace %q, want %q", h.Kind(), obj.GetName(), obj.GetNamespace(), n.Namespace)
			}
			if h.CachedByLabel && obj.GetLabels()[LabelVirtualCluster] != n.VirtualCluster {
				t.Errorf("%s %s lacks label %s=%s: the cache would never see it", h.Kind(), obj.GetName(), LabelVirtualCluster, n.VirtualCluster)
			}
			names = append(names, obj.GetName())
		}
		if !slices.Equal(names, h.Names(n)) {
			t.Errorf("%s builder made %q, the registry names %q", h.Kind(), names, h.Names(n))
		}
		built++
	}
	if built == 0 {
		t.Fatal("no HostObject has a builder")
	}
}

// The StatefulSet controller names the etcd claim after the claim template
// and gives it the template's labels, which the registry relies on.
func TestEtcdClaimFollowsTheTemplate(t *testing.T) {
	v := vc(nil)
	n := NamesOf(v)
	sts := StatefulSetFor(v, Options{}, ServiceIPs{})
	if len(sts.Spec.VolumeClaimTemplates) != 1 {
		t.Fatalf("claim templates = %d, want 1", len(sts.Spec.VolumeClaimTemplates))
	}
	tmpl := sts.Spec.VolumeClaimTemplates[0]
	if got := tmpl.Name + "-" + sts.Name + "-0"; got != n.EtcdClaim() {
		t.Errorf("replica 0's claim is %s, the registry names %s", got, n.EtcdClaim())
	}
	if tmpl.Labels[LabelVirtualCluster] != n.VirtualCluster {
		t.Errorf("claim template lacks label %s: the cache would never see the claim", LabelVirtualCluster)
	}
}
