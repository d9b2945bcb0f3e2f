package devcluster

import (
	"context"
	"embed"
	"fmt"
	"net/netip"
	"path"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/nestdev/nest/internal/addons"
	"github.com/nestdev/nest/internal/images"
	"github.com/nestdev/nest/internal/install"
	"github.com/nestdev/nest/internal/kube"
)

// The local host cluster's LoadBalancer implementation is MetalLB
// (go.universe.tf/metallb, pinned in k8s/metallb) in L2 mode, run as
// upstream runs it (addons.LoadBalancer) from an image of the binaries built
// here: its controller gives each LoadBalancer Service an address from the
// top of the node subnet (LoadBalancerRange), and a speaker on every node,
// on the node's network, answers ARP on the cluster's bridge for the
// addresses its node announces, so the machine reaches them as it reaches
// the nodes and the node's kube-proxy forwards them to the Service's
// endpoints.

// metallbCRDs are MetalLB's CustomResourceDefinitions, copied from the
// pinned module's config/crd/bases by `make generate`
// (TestMetalLBCRDsAreThePinnedModules catches drift).
//
//go:embed metallb/*.yaml
var metallbCRDs embed.FS

// LoadBalancerPool names the IPAddressPool and L2Advertisement.
const LoadBalancerPool = "nest-dev"

// LoadBalancerRange is the first and last address MetalLB gives
// LoadBalancer Services: hosts 200 to 249 of the node subnet, above every
// node (firstNodeHost + MaxNodes) and below its broadcast address.
func (a Addressing) LoadBalancerRange() (first, last netip.Addr) {
	return nthAddr(a.NodeSubnet.Addr(), 200), nthAddr(a.NodeSubnet.Addr(), 249)
}

// loadBalancerObjects are MetalLB's CRDs, then its namespace, RBAC,
// controller and speakers (addons.LoadBalancer), then the pool of
// LoadBalancerRange and its L2 advertisement.
func loadBalancerObjects(a Addressing) ([]*unstructured.Unstructured, error) {
	entries, err := metallbCRDs.ReadDir("metallb")
	if err != nil {
		return nil, err
	}
	var out []*unstructured.Unstructured
	for _, e := range entries {
		name := path.Join("metallb", e.Name())
		data, err := metallbCRDs.ReadFile(name)
		if err != nil {
			return nil, err
		}
		objs, err := install.Decode(name, data)
		if err != nil {
			return nil, err
		}
		out = append(out, objs...)
	}
	for _, o := range addons.LoadBalancer(images.MetalLB) {
		u, err := toUnstructured(o)
		if err != nil {
			return nil, err
		}
		out = append(out, u)
	}
	first, last := a.LoadBalancerRange()
	pool := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "metallb.io/v1beta1", "kind": "IPAddressPool",
		"metadata": map[string]any{"name": LoadBalancerPool, "namespace": addons.LoadBalancerNamespace},
		"spec":     map[string]any{"addresses": []any{first.String() + "-" + last.String()}},
	}}
	l2 := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "metallb.io/v1beta1", "kind": "L2Advertisement",
		"metadata": map[string]any{"name": LoadBalancerPool, "namespace": addons.LoadBalancerNamespace},
		"spec":     map[string]any{"ipAddressPools": []any{LoadBalancerPool}},
	}}
	return append(out, pool, l2), nil
}

// startLoadBalancer installs MetalLB's objects; waitLoadBalancer then
// waits for its pods.
func (u *upRun) startLoadBalancer(ctx context.Context) error {
	c, err := adminClient(u.l)
	if err != nil {
		return err
	}
	objs, err := loadBalancerObjects(u.o.Net)
	if err != nil {
		return err
	}
	return install.ApplyObjects(ctx, c, objs, time.Minute)
}

// waitLoadBalancer waits until MetalLB's controller and a speaker on every
// node are ready, so a LoadBalancer Service made next gets its address and
// is answered for.
func (u *upRun) waitLoadBalancer(ctx context.Context) error {
	c, err := adminClient(u.l)
	if err != nil {
		return err
	}
	return waitFor(ctx, 2*time.Minute, "MetalLB's controller and speakers ready", u.l, nil, func(ctx context.Context) bool {
		var d appsv1.Deployment
		var ds appsv1.DaemonSet
		if c.Get(ctx, types.NamespacedName{Namespace: addons.LoadBalancerNamespace, Name: addons.LoadBalancerController}, &d) != nil ||
			c.Get(ctx, types.NamespacedName{Namespace: addons.LoadBalancerNamespace, Name: addons.LoadBalancerSpeaker}, &ds) != nil {
			return false
		}
		return d.Status.ReadyReplicas >= 1 && ds.Status.NumberReady == int32(len(u.nodes)) && ds.Status.DesiredNumberScheduled == int32(len(u.nodes))
	})
}

// describeLoadBalancer is the status line of the load balancer.
func (a Addressing) describeLoadBalancer() string {
	first, last := a.LoadBalancerRange()
	return fmt.Sprintf("MetalLB (L2 on %s), LoadBalancer addresses %s-%s", a.Bridge, first, last)
}

// toUnstructured converts a typed object to the unstructured form that
// install.ApplyObjects applies, with its apiVersion and kind set.
func toUnstructured(o client.Object) (*unstructured.Unstructured, error) {
	gvk, err := apiutil.GVKForObject(o, kube.NewScheme())
	if err != nil {
		return nil, err
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetGroupVersionKind(gvk)
	return u, nil
}
