package cli

import (
	"bytes"
	"context"
	"io"
	"k8s.io/utils/ptr"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/kube"
	"github.com/nestdev/nest/internal/vcops"
	"github.com/nestdev/nest/internal/version"
)

func TestCreateMakesNamespaceAndIsRepeatable(t *testing.T) {
	c := fake.NewClientBuilder().WithScheme(kube.NewScheme()).Build()
	ctx := context.Background()
	key := types.NamespacedName{Namespace: resolveNamespace("", "demo"), Name: "demo"}
	var out bytes.Buffer
	if err := create(ctx, c, key, nestv1.VirtualClusterSpec{}, false, &out); err != nil {
		t.Fatal(err)
	}
	var ns corev1.Namespace
	if err := c.Get(ctx, types.NamespacedName{Name: "vc-demo"}, &ns); err != nil || ns.Labels[vcops.CreatedByLabel] != "nest-cli" {
		t.Fatalf("namespace vc-demo: %v %v", ns.Labels, err)
	}
	if err := create(ctx, c, key, nestv1.VirtualClusterSpec{}, false, &out); err != nil {
		t.Fatalf("second create: %v", err)
	}
	if !strings.Contains(out.String(), "already exists") {
		t.Errorf("output %q does not say it already exists", out.String())
	}
}

func TestRemoveDeletesOnlyNamespacesNestMade(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		labels  map[string]string
		removed bool
	}{{map[string]string{vcops.CreatedByLabel: "nest-cli"}, true}, {nil, false}} {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team", Labels: tc.labels}}
		vc := &nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: "team"}}
		c := fake.NewClientBuilder().WithScheme(kube.NewScheme()).WithObjects(ns, vc).Build()
		if err := remove(ctx, c, client.ObjectKeyFromObject(vc), true, &bytes.Buffer{}); err != nil {
			t.Fatal(err)
		}
		err := c.Get(ctx, types.NamespacedName{Name: "team"}, &corev1.Namespace{})
		if apierrors.IsNotFound(err) != tc.removed {
			t.Errorf("labels %v: namespace removed = %v, want %v", tc.labels, apierrors.IsNotFound(err), tc.removed)
		}
	}
}

func TestShareFlags(t *testing.T) {
	spec, err := (&shareFlags{cpu: "4", memory: "8Gi", pods: 20, podSecurity: "restricted", containerLimits: "none", privileged: "confine", virtualNodes: 2}).spec()
	if err != nil {
		t.Fatal(err)
	}
	r := spec.PromoteResources.Resources
	if r.Cpu().String() != "4" || r.Memory().String() != "8Gi" || r.Pods().Value() != 20 || spec.VirtualNode.PodSecurityLevel != "restricted" ||
		spec.VirtualNode.ContainerLimits != nestv1.ContainerLimitsNone || spec.VirtualNode.PrivilegedContainers != nestv1.PrivilegedContainersConfine ||
		ptr.Deref(spec.VirtualNode.Count, 0) != 2 {
		t.Errorf("spec = %+v", spec)
	}
	for _, bad := range []shareFlags{{cpu: "four"}, {memory: "-1Gi"}, {pods: -3}, {containerLimits: "unlimited"}, {containerLimits: "default", virtualNodes: 17}} {
		if _, err := bad.spec(); err == nil {
			t.Errorf("%+v: want an error naming the flag", bad)
		}
	}
	if _, err := (&shareFlags{containerLimits: "unlimited"}).spec(); err == nil || !strings.Contains(err.Error(), "--container-limits") {
		t.Errorf("error %v does not name --container-limits", err)
	}
	if _, err := (&shareFlags{privileged: "allow"}).spec(); err == nil || !strings.Contains(err.Error(), "--privileged-containers") {
		t.Errorf("error %v does not name --privileged-containers", err)
	}
	if spec, err := (&shareFlags{}).spec(); err != nil || spec.VirtualNode.PrivilegedContainers != nestv1.PrivilegedContainersRefuse {
		t.Errorf("default privileged containers %q (%v), want Refuse", spec.VirtualNode.PrivilegedContainers, err)
	}
}

func TestNodeDiskFlag(t *testing.T) {
	spec, err := (&shareFlags{podSecurity: "baseline", nodeDisk: "2Gi"}).spec()
	if err != nil {
		t.Fatal(err)
	}
	if d := spec.VirtualNode.NodeDisk; d == nil || d.Size.String() != "2Gi" || d.StorageClassName != nil {
		t.Errorf("nodeDisk = %+v, want 2Gi of the default class", d)
	}
	for _, bad := range []shareFlags{{podSecurity: "baseline", nodeDisk: "big"}, {podSecurity: "baseline", nodeDisk: "0"}, {podSecurity: "restricted", nodeDisk: "1Gi"}} {
		if _, err := bad.spec(); err == nil || !strings.Contains(err.Error(), "--node-disk") {
			t.Errorf("%+v: error %v, want one naming --node-disk", bad, err)
		}
	}
}

func TestStorageFlags(t *testing.T) {
	spec, err := (&shareFlags{storage: "50Gi", storageClaims: 5}).spec()
	if err != nil {
		t.Fatal(err)
	}
	if s := spec.VirtualNode.Storage; s.Requests == nil || s.Requests.String() != "50Gi" || ptr.Deref(s.Claims, 0) != 5 {
		t.Errorf("storage = %+v, want 50Gi in 5 claims", s)
	}
	for flag, bad := range map[string]shareFlags{"--storage": {storage: "lots"}, "--storage-claims": {storageClaims: -1}} {
		if _, err := bad.spec(); err == nil || !strings.Contains(err.Error(), flag) {
			t.Errorf("%+v: error %v, want one naming %s", bad, err, flag)
		}
	}
}

func TestNodeFlags(t *testing.T) {
	spec, err := (&shareFlags{nodes: nodes{count: 2, selector: "gpu=true"}}).spec()
	if err != nil {
		t.Fatal(err)
	}
	if p := spec.PromotePolicies; len(p) != 1 || p[0].NodeCount != 2 || p[0].LabelSelector.MatchLabels["gpu"] != "true" {
		t.Errorf("promote policies %+v", p)
	}
	if spec, err := (&shareFlags{}).spec(); err != nil || spec.PromotePolicies != nil {
		t.Errorf("no --nodes: %+v, %v; want no promote policy", spec.PromotePolicies, err)
	}
	for flags, flag := range map[nodes]string{{count: -1}: "--nodes", {count: 1, selector: "a in (b)"}: "--node-selector", {selector: "gpu=true"}: "--node-selector"} {
		if _, err := (&shareFlags{nodes: flags}).spec(); err == nil || !strings.Contains(err.Error(), flag) {
			t.Errorf("%+v: error %v does not name %s", flags, err, flag)
		}
	}
}

func TestCreateRefusesAnOccupiedNamespace(t *testing.T) {
	held := &nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: "first", Namespace: "team"}}
	c := fake.NewClientBuilder().WithScheme(kube.NewScheme()).WithObjects(held).Build()
	ctx := context.Background()
	err := create(ctx, c, types.NamespacedName{Namespace: "team", Name: "second"}, nestv1.VirtualClusterSpec{}, false, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "VirtualCluster first") || !strings.Contains(err.Error(), "namespace of its own") {
		t.Fatalf("error %v: want one naming the holder and the fix", err)
	}
	if err := c.Get(ctx, types.NamespacedName{Namespace: "team", Name: "second"}, &nestv1.VirtualCluster{}); !apierrors.IsNotFound(err) {
		t.Errorf("the second VirtualCluster was created (%v)", err)
	}
	if err := create(ctx, c, client.ObjectKeyFromObject(held), nestv1.VirtualClusterSpec{}, false, &bytes.Buffer{}); err != nil {
		t.Errorf("creating the holder again: %v, want the already-exists path", err)
	}
}

func TestScaleNeedsNodes(t *testing.T) {
	root := NewRootCommand()
	root.SetArgs([]string{"scale", "demo"})
	root.SetOut(io.Discard)
	root.SetErr(io.Discard)
	if err := root.Execute(); err == nil || !strings.Contains(err.Error(), "--nodes is required") {
		t.Errorf("nest scale without --nodes: %v", err)
	}
	root.SetArgs([]string{"scale", "demo", "--nodes", "1", "--node-selector", "a in (b)"})
	if err := root.Execute(); err == nil || !strings.Contains(err.Error(), "--node-selector") {
		t.Errorf("nest scale with a set-based selector: %v", err)
	}
}

// --service-type sets the spec in any case, leaves it unset (the host's
// default) when not given, and names its choices when wrong.
func TestServiceTypeFlag(t *testing.T) {
	if spec, err := (&shareFlags{serviceType: "loadbalancer"}).spec(); err != nil || spec.ControlPlane.Service.Type != "LoadBalancer" {
		t.Errorf("--service-type loadbalancer: %q, %v", spec.ControlPlane.Service.Type, err)
	}
	if spec, err := (&shareFlags{}).spec(); err != nil || spec.ControlPlane.Service.Type != "" {
		t.Errorf("no --service-type: %q, %v; want it unset", spec.ControlPlane.Service.Type, err)
	}
	if _, err := (&shareFlags{serviceType: "Ingress"}).spec(); err == nil || !strings.Contains(err.Error(), "--service-type") || !strings.Contains(err.Error(), "loadbalancer") {
		t.Errorf("--service-type Ingress: %v", err)
	}
}

// --kubernetes-version sets a supported version, leaves the default when
// not given, and refuses another naming the flag and the supported ones.
func TestKubernetesVersionFlag(t *testing.T) {
	newest := version.Supported[len(version.Supported)-1]
	if spec, err := (&shareFlags{kubernetesVersion: newest}).spec(); err != nil || spec.KubernetesVersion != newest {
		t.Errorf("--kubernetes-version %s: %q, %v", newest, spec.KubernetesVersion, err)
	}
	if spec, err := (&shareFlags{}).spec(); err != nil || spec.KubernetesVersion != "" {
		t.Errorf("no --kubernetes-version: %q, %v; want it unset (the CRD's default)", spec.KubernetesVersion, err)
	}
	_, err := (&shareFlags{kubernetesVersion: "v1.35.0"}).spec()
	if err == nil || !strings.Contains(err.Error(), "--kubernetes-version") || !strings.Contains(err.Error(), newest) {
		t.Errorf("--kubernetes-version v1.35.0: %v, want the flag and the supported versions named", err)
	}
}

// --runtime-config turns group versions on in spec.controlPlane.runtimeConfig,
// sets nothing when not given, and refuses another naming the flag.
func TestRuntimeConfigFlag(t *testing.T) {
	spec, err := (&shareFlags{kubernetesVersion: version.Kubernetes, runtimeConfig: []string{"networking.k8s.io/v1beta1"}}).spec()
	if err != nil || spec.ControlPlane.RuntimeConfig["networking.k8s.io/v1beta1"] != "true" || len(spec.ControlPlane.RuntimeConfig) != 1 {
		t.Errorf("--runtime-config networking.k8s.io/v1beta1: %v, %v", spec.ControlPlane.RuntimeConfig, err)
	}
	if spec, err := (&shareFlags{}).spec(); err != nil || spec.ControlPlane.RuntimeConfig != nil {
		t.Errorf("no --runtime-config: %v, %v; want none", spec.ControlPlane.RuntimeConfig, err)
	}
	if _, err := (&shareFlags{runtimeConfig: []string{"apps/v1"}}).spec(); err == nil || !strings.Contains(err.Error(), "--runtime-config") {
		t.Errorf("--runtime-config apps/v1: %v, want the flag named", err)
	}
	// The default version is the newest, which serves nothing of it.
	if _, err := (&shareFlags{runtimeConfig: []string{"networking.k8s.io/v1beta1"}}).spec(); err == nil || !strings.Contains(err.Error(), version.Newest()) {
		t.Errorf("--runtime-config networking.k8s.io/v1beta1 at the default version: %v, want it refused naming %s", err, version.Newest())
	}
}
