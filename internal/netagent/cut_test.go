package netagent

import (
	"context"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nestdev/nest/internal/syncer/contract"
)

// forgotten records the addresses each Forget was called with.
type forgotten struct {
	mu    sync.Mutex
	calls []string
}

func (f *forgotten) forget(ips []netip.Addr) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, ip := range ips {
		f.calls = append(f.calls, ip.String())
	}
	return len(ips), nil
}

func (f *forgotten) count(ip string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.calls {
		if c == ip {
			n++
		}
	}
	return n
}

func (f *forgotten) all() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

func tenantPolicy(name string, selector map[string]string) *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "vc-alpha", Generation: 1, Labels: map[string]string{contract.LabelTenantOf: "alpha"}},
		Spec:       networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: selector}, PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}},
	}
}

func TestConnectionCutterCutsTheNodesSelectedPodsWhenPoliciesOrLabelsChange(t *testing.T) {
	server := tenantHostPod("server", "10.1.0.30", "")
	server.Labels["app"] = "server"
	client := tenantHostPod("client", "10.1.0.31", "")
	client.Labels["app"] = "client"
	elsewhere := tenantHostPod("elsewhere", "10.1.0.32", "")
	elsewhere.Labels["app"] = "server"
	elsewhere.Spec.NodeName = "worker-2"
	cs := fake.NewClientset(server, client, elsewhere)
	f := &forgotten{}
	c := &ConnectionCutter{Client: cs, NodeName: "worker-1", Forget: f.forget, Again: []time.Duration{50 * time.Millisecond}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = c.Run(ctx) }()
	eventually(t, "the cutter's informers", func() bool { return c.syncs != nil && c.pods != nil })

	// A new policy selecting the server: its connections are cut, and cut
	// again once the enforcer has surely caught up.
	p := tenantPolicy("deny", map[string]string{"app": "server"})
	if _, err := cs.NetworkingV1().NetworkPolicies("vc-alpha").Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the server cut twice", func() bool { return f.count("10.1.0.30") == 2 })
	if n := f.count("10.1.0.31"); n != 0 {
		t.Errorf("the client, which the policy does not select, was cut %d times", n)
	}
	if n := f.count("10.1.0.32"); n != 0 {
		t.Errorf("a pod of another node was cut %d times", n)
	}

	// A label change on the policy (no new generation) cuts nothing; a
	// spec change does.
	p.Labels["x"] = "y"
	if _, err := cs.NetworkingV1().NetworkPolicies("vc-alpha").Update(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	p.Generation = 2
	p.Spec.PodSelector = metav1.LabelSelector{MatchLabels: map[string]string{"app": "client"}}
	if _, err := cs.NetworkingV1().NetworkPolicies("vc-alpha").Update(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The old selector's pods and the new one's: the server may have lost
	// what admitted it, the client is newly selected.
	eventually(t, "the client and the server cut for the new spec", func() bool {
		return f.count("10.1.0.31") == 2 && f.count("10.1.0.30") == 4
	})

	// A pod's label change cuts it; a status change does not.
	client.Labels["role"] = "other"
	if _, err := cs.CoreV1().Pods("vc-alpha").Update(ctx, client, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the relabelled client cut", func() bool { return f.count("10.1.0.31") == 4 })
	server.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	if _, err := cs.CoreV1().Pods("vc-alpha").UpdateStatus(ctx, server, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	// Deleting the policy cuts whom it selected: it may have admitted them.
	if err := cs.NetworkingV1().NetworkPolicies("vc-alpha").Delete(ctx, "deny", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the client cut for the deletion", func() bool { return f.count("10.1.0.31") == 6 })
	if n := f.count("10.1.0.30"); n != 4 {
		t.Errorf("the server was cut %d times, want 4: its status change cut it (calls %v)", n, f.all())
	}
}

func TestConnectionCutterCutsAtStartForPoliciesMadeWhileItWasDown(t *testing.T) {
	server := tenantHostPod("server", "10.1.0.40", "")
	server.Labels["app"] = "server"
	cs := fake.NewClientset(server, tenantPolicy("deny", map[string]string{"app": "server"}))
	f := &forgotten{}
	c := &ConnectionCutter{Client: cs, NodeName: "worker-1", Forget: f.forget}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = c.Run(ctx) }()
	eventually(t, "the server cut at start", func() bool { return f.count("10.1.0.40") == 1 })
}
