package devcluster

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/nestdev/nest/internal/addons"
	"github.com/nestdev/nest/internal/images"
)

// The embedded CRDs are the pinned MetalLB module's (`make generate` copies
// them), and the image is named for its version: a version bump in
// k8s/metallb without either fails here.
func TestMetalLBCRDsAreThePinnedModules(t *testing.T) {
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}} {{.Version}}", "go.universe.tf/metallb")
	cmd.Dir = filepath.Join("..", "..", "k8s", "metallb")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("find the pinned MetalLB module: %v", err)
	}
	modDir, version, _ := strings.Cut(strings.TrimSpace(string(out)), " ")
	if version != images.MetalLBVersion {
		t.Errorf("k8s/metallb pins MetalLB %s, images.MetalLBVersion is %s", version, images.MetalLBVersion)
	}
	dir := filepath.Join(modDir, "config", "crd", "bases")
	upstream, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(upstream) == 0 {
		t.Fatalf("no CRDs in %s: %v", dir, err)
	}
	ours, err := metallbCRDs.ReadDir("metallb")
	if err != nil {
		t.Fatal(err)
	}
	if len(ours) != len(upstream) {
		t.Errorf("%d embedded CRDs, the module has %d: run make generate", len(ours), len(upstream))
	}
	for _, p := range upstream {
		want, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		got, err := metallbCRDs.ReadFile("metallb/" + filepath.Base(p))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("metallb/%s differs from the module's (%v): run make generate", filepath.Base(p), err)
		}
	}
}

// The pool holds no node's, bridge's or broadcast address, and MetalLB's
// objects come after the CRDs that define them.
func TestLoadBalancerPoolIsAboveTheNodes(t *testing.T) {
	for _, a := range []Addressing{DefaultAddressing(), mustAddressing(t, "gpu", 1)} {
		first, last := a.LoadBalancerRange()
		lastNode := nthAddr(a.NodeSubnet.Addr(), firstNodeHost+MaxNodes-1)
		broadcast := nthAddr(a.NodeSubnet.Addr(), 255)
		if !a.NodeSubnet.Contains(first) || !a.NodeSubnet.Contains(last) || !lastNode.Less(first) || !last.Less(broadcast) || last.Less(first) {
			t.Errorf("%s: pool %s-%s is not above the last node %s within %s", a.NodeSubnet, first, last, lastNode, a.NodeSubnet)
		}
		objs, err := loadBalancerObjects(a)
		if err != nil {
			t.Fatal(err)
		}
		var crds int
		for i, o := range objs {
			switch o.GetKind() {
			case "CustomResourceDefinition":
				crds++
			case "IPAddressPool", "L2Advertisement":
				if crds < 8 || o.GetNamespace() != addons.LoadBalancerNamespace || i < len(objs)-2 {
					t.Errorf("%s %s at %d after %d CRDs, in %q", o.GetKind(), o.GetName(), i, crds, o.GetNamespace())
				}
			}
		}
		pool := objs[len(objs)-2]
		addrs, _, _ := unstructured.NestedStringSlice(pool.Object, "spec", "addresses")
		if want := first.String() + "-" + last.String(); len(addrs) != 1 || addrs[0] != want {
			t.Errorf("pool addresses %v, want [%s]", addrs, want)
		}
	}
}

func mustAddressing(t *testing.T, cluster string, slot int) Addressing {
	t.Helper()
	a, err := AddressingFor(cluster, slot)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// The registry image is named for the Distribution version k8s/registry
// pins: a bump there without images.RegistryVersion fails here.
func TestRegistryImageIsThePinnedModules(t *testing.T) {
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Version}}", "github.com/distribution/distribution/v3")
	cmd.Dir = filepath.Join("..", "..", "k8s", "registry")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("find the pinned registry module: %v", err)
	}
	if v := strings.TrimSpace(string(out)); v != images.RegistryVersion {
		t.Errorf("k8s/registry pins Distribution %s, images.RegistryVersion is %s", v, images.RegistryVersion)
	}
}
