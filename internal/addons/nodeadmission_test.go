package addons

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/nestdev/nest/internal/testutil"
)

// On a real API server, a kubelet registers and writes only the Nodes the
// parameter lists, while the admin still writes any Node.
func TestKubeletsRegisterOnlyTheNodesNestAssigned(t *testing.T) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Fatal("KUBEBUILDER_ASSETS is not set: run with `make unit`, which points it at our kube-apiserver and etcd builds")
	}
	env := &envtest.Environment{}
	cfg, err := env.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	ctx := context.Background()
	admin, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	letKubeletsWriteNodes(t, admin)
	if err := Apply(ctx, admin, NodeAdmission()); err != nil {
		t.Fatal(err)
	}
	w1 := kubelet(t, cfg, "w1")

	// The API server's policy cache takes a moment to see the policy: until
	// then a create gets through, and is undone.
	eventually(t, "w1 refused while not listed", func() error { return refused(ctx, admin, w1, "w1") })
	if err := AssignNode(ctx, admin, "w1", "198.51.100.1"); err != nil {
		t.Fatal(err)
	}
	if err := AssignNode(ctx, admin, "w1", "198.51.100.1"); err != nil {
		t.Fatalf("AssignNode again: %v", err)
	}
	requireListed(t, admin, map[string]string{"w1": "198.51.100.1"})
	eventually(t, "w1 registers once listed", func() error { return w1.Create(ctx, node("w1")) })
	registered := node("w1")
	if err := w1.Get(ctx, client.ObjectKeyFromObject(registered), registered); err != nil {
		t.Fatal(err)
	}
	registered.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady"}}
	if err := w1.Status().Update(ctx, registered); err != nil {
		t.Errorf("w1 updates its own status: %v", err)
	}
	if err := refused(ctx, admin, w1, "w2"); err != nil {
		t.Error(err)
	}

	// A Node someone else made, such as nest-syncer's virtual node, is not
	// a kubelet's to write under that name.
	if err := admin.Create(ctx, node("virtual")); err != nil {
		t.Fatalf("the admin creates a Node no one assigned: %v", err)
	}
	virtual := node("virtual")
	if err := admin.Get(ctx, client.ObjectKeyFromObject(virtual), virtual); err != nil {
		t.Fatal(err)
	}
	virtual.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "203.0.113.9"}}
	err = kubelet(t, cfg, "virtual").Status().Update(ctx, virtual)
	if err := requireRefusal(err, "virtual"); err != nil {
		t.Errorf("kubelet virtual updates the status of Node virtual: %v", err)
	}

	if err := UnassignNode(ctx, admin, "w1"); err != nil {
		t.Fatal(err)
	}
	if err := UnassignNode(ctx, admin, "w1"); err != nil {
		t.Fatalf("UnassignNode again: %v", err)
	}
	requireListed(t, admin, map[string]string{})
	if err := admin.Delete(ctx, node("w1")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "w1 refused once removed", func() error { return refused(ctx, admin, w1, "w1") })

	// Without its parameter the binding refuses every kubelet, even one
	// that was listed; AssignNode makes the ConfigMap again.
	if err := AssignNode(ctx, admin, "w1", ""); err != nil {
		t.Fatal(err)
	}
	if err := admin.Delete(ctx, &corev1.ConfigMap{ObjectMeta: assignedNodesMeta()}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "w1 refused without the ConfigMap", func() error {
		err := w1.Create(ctx, node("w1"))
		if err == nil {
			if err := admin.Delete(ctx, node("w1")); err != nil {
				return fmt.Errorf("delete Node w1 the kubelet created: %w", err)
			}
			return errors.New("kubelet created Node w1")
		}
		// Not the policy's message: the binding finds no parameter.
		if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) {
			return fmt.Errorf("refused with %v; want Forbidden", err)
		}
		return nil
	})
	if err := UnassignNode(ctx, admin, "w1"); err != nil {
		t.Fatalf("UnassignNode without the ConfigMap: %v", err)
	}
	if err := AssignNode(ctx, admin, "w1", ""); err != nil {
		t.Fatalf("AssignNode without the ConfigMap: %v", err)
	}
	requireListed(t, admin, map[string]string{"w1": ""})
	eventually(t, "w1 registers once listed again", func() error { return w1.Create(ctx, node("w1")) })
}

// kubelet is a client that is name's kubelet, as its client certificate
// makes it.
func kubelet(t *testing.T, cfg *rest.Config, name string) client.Client {
	t.Helper()
	cfg = rest.CopyConfig(cfg)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:node:" + name, Groups: []string{"system:nodes", "system:authenticated"}}
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func node(name string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

// refused checks that kubelet may not create Node name; a Node that it
// created is deleted, for the next try.
func refused(ctx context.Context, admin, kubelet client.Client, name string) error {
	err := kubelet.Create(ctx, node(name))
	if err == nil {
		if err := admin.Delete(ctx, node(name)); err != nil {
			return fmt.Errorf("delete Node %s the kubelet created: %w", name, err)
		}
		return fmt.Errorf("kubelet created Node %s", name)
	}
	return requireRefusal(err, name)
}

// requireRefusal checks that err is the policy's refusal, naming node and
// saying what to do.
func requireRefusal(err error, node string) error {
	if err == nil {
		return errors.New("allowed")
	}
	want := "node " + node + " is not assigned to this cluster by Nest"
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "spec.promoteResources") {
		return fmt.Errorf("refused with %v; want %q and what to do", err, want)
	}
	return nil
}

func requireListed(t *testing.T, c client.Client, want map[string]string) {
	t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: assignedNodesMeta()}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(cm), cm); err != nil {
		t.Fatal(err)
	}
	if len(cm.Data) != len(want) {
		t.Fatalf("ConfigMap data %v, want %v", cm.Data, want)
	}
	for k, v := range want {
		if got, ok := cm.Data[k]; !ok || got != v {
			t.Fatalf("ConfigMap data %v, want %v", cm.Data, want)
		}
	}
}

func eventually(t *testing.T, what string, check func() error) {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, what, check)
}

// letKubeletsWriteNodes binds the system:node role to the kubelets' group:
// envtest authorizes with RBAC alone, where a real API server's Node
// authorizer lets kubelets write their Node.
func letKubeletsWriteNodes(t *testing.T, admin client.Client) {
	t.Helper()
	if err := admin.Create(context.Background(), &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "test:nodes"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:node"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: "system:nodes"}},
	}); err != nil {
		t.Fatal(err)
	}
}
