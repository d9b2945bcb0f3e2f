package addons

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

var testRules = NodeEndpointsRules{Owner: "nest:syncer", VirtualNode: "nest-virtual-node", MemberNodePrefix: "nest-member-"}

// startWithStaticAdmission starts a real API server that loads
// StaticAdmission's files, as a tenant's does, and returns its admin config.
func startWithStaticAdmission(t *testing.T) *rest.Config {
	t.Helper()
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Fatal("KUBEBUILDER_ASSETS is not set: run with `make unit`, which points it at our kube-apiserver and etcd builds")
	}
	dir := t.TempDir()
	files, err := StaticAdmission(dir, testRules)
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	env := &envtest.Environment{}
	args := env.ControlPlane.GetAPIServer().Configure()
	args.Append("feature-gates", NodeEndpointsFeatureGate+"=true")
	args.Append("admission-control-config-file", filepath.Join(dir, AdmissionConfigFile))
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("the API server refuses the static admission files: %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	return cfg
}

func as(t *testing.T, cfg *rest.Config, user string, groups ...string) client.Client {
	t.Helper()
	cfg = rest.CopyConfig(cfg)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: append(groups, "system:authenticated")}
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// On a real API server, no one but nest-syncer points a Node at an
// address, while the tenant keeps writing the rest of its Nodes and a
// kubelet its own dedicated Node's endpoints.
func TestOnlyNestSyncerWritesNodeEndpoints(t *testing.T) {
	cfg := startWithStaticAdmission(t)
	ctx := context.Background()
	admin, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// The tenant's admin is not the owner: it is another system:masters user.
	tenant := as(t, cfg, "nest-admin", "system:masters")
	syncer := as(t, cfg, testRules.Owner, "system:masters")
	letKubeletsWriteNodes(t, admin)
	hostKubelet := []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "198.51.100.11"}}

	// The policy is there from the API server's first request, and no
	// request of the tenant's removes it.
	err = tenant.Delete(ctx, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: NodeEndpointsName}})
	if !apierrors.IsNotFound(err) {
		t.Errorf("the tenant deletes the static binding: %v, want NotFound (it is not an API object)", err)
	}

	virtual := withEndpoints(node(testRules.VirtualNode), []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.244.1.5"}}, 10250)
	if err := syncer.Create(ctx, virtual); err != nil {
		t.Fatalf("nest-syncer creates its virtual node with its address: %v", err)
	}
	if err := syncer.Status().Update(ctx, virtual); err != nil {
		t.Fatalf("nest-syncer writes its virtual node's status: %v", err)
	}

	for _, tc := range []struct {
		name string
		c    client.Client
		edit func(n *corev1.Node)
	}{
		{"the tenant's admin moves the virtual node's address to a host kubelet", tenant, func(n *corev1.Node) { n.Status.Addresses = hostKubelet }},
		{"the tenant's admin moves the virtual node's kubelet port", tenant, func(n *corev1.Node) { n.Status.DaemonEndpoints.KubeletEndpoint.Port = 6443 }},
		{"the tenant's admin removes the virtual node's addresses", tenant, func(n *corev1.Node) { n.Status.Addresses = nil }},
		{"a kubelet named for the virtual node moves its address", as(t, cfg, "system:node:"+testRules.VirtualNode, "system:nodes"), func(n *corev1.Node) { n.Status.Addresses = hostKubelet }},
	} {
		n := node(testRules.VirtualNode)
		if err := tc.c.Get(ctx, client.ObjectKeyFromObject(n), n); err != nil {
			t.Fatal(err)
		}
		tc.edit(n)
		if err := requireEndpointsRefusal(tc.c.Status().Update(ctx, n)); err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
	if err := requireEndpointsRefusal(tenant.Create(ctx, withEndpoints(node("forged"), hostKubelet, 10250))); err != nil {
		t.Errorf("the tenant's admin creates a Node pointing at a host kubelet: %v", err)
	}
	if err := requireEndpointsRefusal(tenant.Create(ctx, withEndpoints(node(testRules.MemberNodePrefix+"gpus"), nil, 10250))); err != nil {
		t.Errorf("the tenant's admin creates a member node with a kubelet port: %v", err)
	}

	// What stays the tenant's: labels, taints, conditions and extended
	// resources of the virtual node, and Nodes with no endpoints, such as
	// the conformance suite's fake node.
	n := node(testRules.VirtualNode)
	if err := tenant.Get(ctx, client.ObjectKeyFromObject(n), n); err != nil {
		t.Fatal(err)
	}
	n.Labels = map[string]string{"team": "a"}
	n.Spec.Taints = []corev1.Taint{{Key: "dedicated", Value: "a", Effect: corev1.TaintEffectNoSchedule}}
	if err := tenant.Update(ctx, n); err != nil {
		t.Errorf("the tenant labels and taints the virtual node: %v", err)
	}
	n.Status.Capacity = corev1.ResourceList{"example.com/fakecpu": resource.MustParse("1k")}
	n.Status.Conditions = []corev1.NodeCondition{{Type: "Example", Status: corev1.ConditionTrue}}
	if err := tenant.Status().Update(ctx, n); err != nil {
		t.Errorf("the tenant adds an extended resource and a condition to the virtual node: %v", err)
	}
	fake := node("e2e-fake-node")
	fake.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	if err := tenant.Create(ctx, fake); err != nil {
		t.Errorf("the tenant creates a Node without endpoints: %v", err)
	}

	// A dedicated node's kubelet registers with its own address, and
	// changes it.
	w1 := as(t, cfg, "system:node:w1", "system:nodes")
	dedicated := withEndpoints(node("w1"), hostKubelet, 10250)
	if err := w1.Create(ctx, dedicated); err != nil {
		t.Fatalf("kubelet w1 registers with its address: %v", err)
	}
	dedicated.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "198.51.100.12"}}
	if err := w1.Status().Update(ctx, dedicated); err != nil {
		t.Errorf("kubelet w1 changes its own address: %v", err)
	}
	if err := tenant.Get(ctx, client.ObjectKeyFromObject(dedicated), dedicated); err != nil {
		t.Fatal(err)
	}
	dedicated.Status.Addresses = hostKubelet
	if err := requireEndpointsRefusal(tenant.Status().Update(ctx, dedicated)); err != nil {
		t.Errorf("the tenant's admin changes a dedicated node's address: %v", err)
	}
}

func withEndpoints(n *corev1.Node, addresses []corev1.NodeAddress, port int32) *corev1.Node {
	n.Status.Addresses = addresses
	n.Status.DaemonEndpoints.KubeletEndpoint.Port = port
	return n
}

// requireEndpointsRefusal checks that err is NodeEndpoints' refusal, saying
// what stays the tenant's.
func requireEndpointsRefusal(err error) error {
	if err == nil {
		return errors.New("allowed")
	}
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), NodeEndpointsName) || !strings.Contains(err.Error(), "labels, taints, conditions and capacity are yours") {
		return fmt.Errorf("refused with %v; want the policy's Forbidden and what stays the tenant's", err)
	}
	return nil
}
