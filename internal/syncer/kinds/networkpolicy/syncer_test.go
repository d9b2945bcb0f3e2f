package networkpolicy

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	networkinglisters "k8s.io/client-go/listers/networking/v1"
	"k8s.io/client-go/tools/record"

	"github.com/nestdev/nest/internal/kindsync"
	"github.com/nestdev/nest/internal/syncer/contract"
	"github.com/nestdev/nest/internal/testutil"
)

// newSyncer is a Syncer over a fake host API server holding host, whose
// listers hold the same, and tenant listers holding tenant.
func newSyncer(t *testing.T, tenant, host []runtime.Object) (*Syncer, *fake.Clientset, *record.FakeRecorder) {
	t.Helper()
	var policies, namespaces, pods, hostPolicies, hostPods []runtime.Object
	for _, o := range tenant {
		switch o.(type) {
		case *networkingv1.NetworkPolicy:
			policies = append(policies, o)
		case *corev1.Namespace:
			namespaces = append(namespaces, o)
		case *corev1.Pod:
			pods = append(pods, o)
		}
	}
	for _, o := range host {
		switch o.(type) {
		case *networkingv1.NetworkPolicy:
			hostPolicies = append(hostPolicies, o)
		case *corev1.Pod:
			hostPods = append(hostPods, o)
		}
	}
	client := fake.NewClientset(host...)
	rec := record.NewFakeRecorder(20)
	return &Syncer{
		Translator: tr, Host: client, Recorder: rec,
		TenantPolicies:   networkinglisters.NewNetworkPolicyLister(testutil.Indexer(t, policies...)),
		TenantNamespaces: corelisters.NewNamespaceLister(testutil.Indexer(t, namespaces...)),
		TenantPods:       corelisters.NewPodLister(testutil.Indexer(t, pods...)),
		HostPolicies:     networkinglisters.NewNetworkPolicyLister(testutil.Indexer(t, hostPolicies...)).NetworkPolicies("vc-alpha"),
		HostPods:         corelisters.NewPodLister(testutil.Indexer(t, hostPods...)).Pods("vc-alpha"),
	}, client, rec
}

func denyAll() *networkingv1.NetworkPolicy {
	return policy(networkingv1.NetworkPolicySpec{PolicyTypes: ingress})
}

func TestSyncWritesAndDeletesOnlyItsCopy(t *testing.T) {
	ctx := context.Background()
	hostName := contract.HostName("alpha", "shop", "p")
	get := func(c *fake.Clientset) (*networkingv1.NetworkPolicy, error) {
		return c.NetworkingV1().NetworkPolicies("vc-alpha").Get(ctx, hostName, metav1.GetOptions{})
	}

	s, client, _ := newSyncer(t, []runtime.Object{denyAll()}, nil)
	if _, err := s.Sync(ctx, "shop/p"); err != nil {
		t.Fatal(err)
	}
	copied, err := get(client)
	if err != nil || !contract.IsCopyOf(copied, "alpha", "shop", "p") {
		t.Fatalf("host copy %+v, %v", copied, err)
	}

	// The tenant policy gone: the copy goes.
	s, client, _ = newSyncer(t, nil, []runtime.Object{copied})
	if _, err := s.Sync(ctx, "shop/p"); err != nil {
		t.Fatal(err)
	}
	if _, err := get(client); !apierrors.IsNotFound(err) {
		t.Errorf("the copy of a deleted policy is still there: %v", err)
	}

	// A host policy under the name that is not the copy is left alone.
	foreign := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: hostName, Namespace: "vc-alpha"}}
	s, client, _ = newSyncer(t, nil, []runtime.Object{foreign})
	if _, err := s.Sync(ctx, "shop/p"); !kindsync.IsTerminal(err) {
		t.Errorf("Sync over a foreign policy = %v, want a terminal refusal", err)
	}
	if _, err := get(client); err != nil {
		t.Errorf("the foreign policy was deleted: %v", err)
	}
}

// A policy too large for the host is not copied; the tenant is told, and
// the pods it selects stay isolated (their labels do not depend on it).
func TestSyncRefusesAPolicyAboveTheSizeBound(t *testing.T) {
	big := denyAll()
	for i := range 2000 {
		big.Spec.Ingress = append(big.Spec.Ingress, networkingv1.NetworkPolicyIngressRule{From: []networkingv1.NetworkPolicyPeer{
			{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": strings.Repeat("x", 20) + string(rune('a'+i%26))}}},
		}})
	}
	// An earlier copy, from before the policy grew, must not go on
	// allowing what it allowed.
	earlier, _, err := tr.Translate(denyAll(), tenantNamespaces)
	if err != nil {
		t.Fatal(err)
	}
	s, client, rec := newSyncer(t, []runtime.Object{big}, []runtime.Object{earlier})
	if _, err := s.Sync(context.Background(), "shop/p"); !kindsync.IsTerminal(err) {
		t.Fatalf("Sync = %v, want a terminal refusal", err)
	}
	if _, err := client.NetworkingV1().NetworkPolicies("vc-alpha").Get(context.Background(), earlier.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the earlier copy is still there: %v", err)
	}
	for _, a := range client.Actions() {
		if a.GetVerb() == "create" || a.GetVerb() == "update" {
			t.Errorf("the host was written: %v", a)
		}
	}
	if ev := <-rec.Events; !strings.Contains(ev, ReasonNotEnforced) || !strings.Contains(ev, "bytes") {
		t.Errorf("event %q", ev)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"}}
	if s.View().PodLabels(pod)[contract.LabelIngressIsolated] != "true" {
		t.Error("the pods of an unenforced policy are not isolated")
	}
}

// SyncPodLabels gives a host pod the policy labels the policies call for,
// and takes away the ones they no longer do.
func TestSyncPodLabels(t *testing.T) {
	ctx := context.Background()
	tenantPod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: "uid-web", Labels: map[string]string{"app": "web"}}}
	hostPod := func(extra map[string]string) *corev1.Pod {
		l := contract.HostLabels("alpha", "shop")
		for k, v := range extra {
			l[k] = v
		}
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "vc-alpha", Name: contract.HostName("alpha", "shop", "web"),
			Labels: l, Annotations: contract.HostAnnotations("shop", "web", "uid-web")}}
	}
	read := func(c *fake.Clientset) map[string]string {
		p, err := c.CoreV1().Pods("vc-alpha").Get(ctx, contract.HostName("alpha", "shop", "web"), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p.Labels
	}
	s, client, _ := newSyncer(t, []runtime.Object{tenantPod, denyAll()}, []runtime.Object{hostPod(nil)})
	if _, err := s.SyncPodLabels(ctx, "shop/web"); err != nil {
		t.Fatal(err)
	}
	if l := read(client); l[contract.LabelIngressIsolated] != "true" || l[contract.LabelTenantOf] != "alpha" {
		t.Errorf("labels %v, want the pod isolated and its own labels kept", l)
	}
	s, client, _ = newSyncer(t, []runtime.Object{tenantPod}, []runtime.Object{hostPod(map[string]string{contract.LabelIngressIsolated: "true", LabelKey("app"): "web"})})
	if _, err := s.SyncPodLabels(ctx, "shop/web"); err != nil {
		t.Fatal(err)
	}
	if l := read(client); l[contract.LabelIngressIsolated] != "" || l[LabelKey("app")] != "" {
		t.Errorf("labels %v, want the stale policy labels gone", l)
	}
}

// SyncPodLabels leaves alone a host pod that is not the copy of this very
// tenant pod (one made for an earlier pod of the name), and does nothing
// while there is no host pod.
func TestSyncPodLabelsOnlyLabelsTheCopyOfThisPod(t *testing.T) {
	ctx := context.Background()
	tenantPod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: "uid-web", Labels: map[string]string{"app": "web"}}}
	earlier := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "vc-alpha", Name: contract.HostName("alpha", "shop", "web"),
		Labels: contract.HostLabels("alpha", "shop"), Annotations: contract.HostAnnotations("shop", "web", "uid-earlier")}}
	for name, host := range map[string][]runtime.Object{"an earlier pod's copy": {earlier}, "no host pod": nil} {
		s, client, _ := newSyncer(t, []runtime.Object{tenantPod, denyAll()}, host)
		if _, err := s.SyncPodLabels(ctx, "shop/web"); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, a := range client.Actions() {
			if a.GetVerb() == "create" || a.GetVerb() == "update" || a.GetVerb() == "patch" {
				t.Errorf("%s: the host was written: %v", name, a)
			}
		}
	}
}

// An ipBlock over a pod's address marks the host pod by the host's own
// status, never by the tenant pod's, which the tenant may write.
func TestSyncPodLabelsMarksTheHostPodsAddressInABlock(t *testing.T) {
	ctx := context.Background()
	admit := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "by-address"},
		Spec: networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{
				{IPBlock: &networkingv1.IPBlock{CIDR: "10.244.1.0/24", Except: []string{"10.244.1.128/25"}}}}}}}}
	key := BlockLabelKey(netip.MustParsePrefix("10.244.1.0/24"), []netip.Prefix{netip.MustParsePrefix("10.244.1.128/25")})
	for _, tt := range []struct {
		name, hostIP, tenantIP string
		in                     bool
	}{
		{"in the block", "10.244.1.5", "203.0.113.9", true},
		{"in its exception", "10.244.1.200", "10.244.1.5", false},
		{"outside it, whatever the tenant pod's status says", "10.244.2.5", "10.244.1.5", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tenantPod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: "uid-web"},
				Status: corev1.PodStatus{PodIP: tt.tenantIP, PodIPs: []corev1.PodIP{{IP: tt.tenantIP}}}}
			host := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "vc-alpha", Name: contract.HostName("alpha", "shop", "web"),
				Labels: contract.HostLabels("alpha", "shop"), Annotations: contract.HostAnnotations("shop", "web", "uid-web")},
				Status: corev1.PodStatus{PodIP: tt.hostIP, PodIPs: []corev1.PodIP{{IP: tt.hostIP}}}}
			s, client, _ := newSyncer(t, []runtime.Object{tenantPod, admit}, []runtime.Object{host})
			if _, err := s.SyncPodLabels(ctx, "shop/web"); err != nil {
				t.Fatal(err)
			}
			p, err := client.CoreV1().Pods("vc-alpha").Get(ctx, host.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got := p.Labels[key] == "in"; got != tt.in {
				t.Errorf("host pod at %s marked in the block = %v, want %v (labels %v)", tt.hostIP, got, tt.in, p.Labels)
			}
		})
	}
}
