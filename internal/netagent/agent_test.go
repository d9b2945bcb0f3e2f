package netagent

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nestdev/nest/internal/nodenet"
	"github.com/nestdev/nest/internal/syncer/contract"
)

const network = `{"nodeIP":"10.0.0.9","mappings":[{"protocol":"TCP","hostIP":"0.0.0.0","hostPort":8080,"podIP":"10.1.0.5","podPort":80}]}`

func tenantHostPod(name, ip, annotation string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "vc-alpha", UID: types.UID("uid-" + name),
			Labels: map[string]string{contract.LabelTenantOf: "alpha"}, Annotations: map[string]string{contract.AnnotationTenantUID: "tenant-uid-" + name}},
		Spec:   corev1.PodSpec{NodeName: "worker-1"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip},
	}
	if annotation != "" {
		p.Annotations[nodenet.Annotation] = annotation
	}
	return p
}

func TestWantedSetsUpOnlyTenantPodNetworkNamespaces(t *testing.T) {
	for _, tt := range []struct {
		name    string
		mutate  func(*corev1.Pod)
		wantIP  string
		wantErr string
	}{
		{"a tenant hostNetwork pod", func(*corev1.Pod) {}, "10.1.0.20", ""},
		{"no annotation", func(p *corev1.Pod) { delete(p.Annotations, nodenet.Annotation) }, "", ""},
		{"not nest-syncer's pod", func(p *corev1.Pod) { delete(p.Labels, contract.LabelTenantOf) }, "", ""},
		{"no tenant pod UID", func(p *corev1.Pod) { delete(p.Annotations, contract.AnnotationTenantUID) }, "", ""},
		{"no IP yet", func(p *corev1.Pod) { p.Status.PodIP = "" }, "", ""},
		{"finished", func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }, "", ""},
		{"on the host node's network", func(p *corev1.Pod) { p.Spec.HostNetwork = true }, "", "spec.hostNetwork"},
		{"a bad annotation", func(p *corev1.Pod) { p.Annotations[nodenet.Annotation] = `{"nodeIP":"127.0.0.1"}` }, "", nodenet.Annotation},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := tenantHostPod("agent", "10.1.0.20", network)
			tt.mutate(p)
			ip, c, err := Wanted(p)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Wanted = %v, want an error naming %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := ""; ip.IsValid() {
				got = ip.String()
				if got != tt.wantIP || c.NodeIP != "10.0.0.9" || len(c.Mappings) != 1 {
					t.Errorf("Wanted = %s, %+v; want %s and the annotation's network", got, c, tt.wantIP)
				}
			} else if tt.wantIP != "" {
				t.Errorf("Wanted gave no IP, want %s", tt.wantIP)
			}
		})
	}
}

func TestForPodKeepsAPodsOwnLoopback(t *testing.T) {
	c := nodenet.Config{NodeIP: "10.0.0.9", Mappings: []nodenet.Mapping{
		{Protocol: "TCP", HostIP: "0.0.0.0", HostPort: 9100, PodIP: "10.1.0.20", PodPort: 9100},
		{Protocol: "TCP", HostIP: "127.0.0.1", HostPort: 9101, PodIP: "10.1.0.20", PodPort: 9101},
		{Protocol: "UDP", HostIP: "10.0.0.9", HostPort: 9102, PodIP: "10.1.0.20", PodPort: 9102},
		{Protocol: "TCP", HostIP: "0.0.0.0", HostPort: 8080, PodIP: "10.1.0.5", PodPort: 80},
	}}
	got := ForPod(c, "10.1.0.20")
	want := []nodenet.Mapping{
		{Protocol: "TCP", HostIP: "10.0.0.9", HostPort: 9100, PodIP: "10.1.0.20", PodPort: 9100},
		{Protocol: "UDP", HostIP: "10.0.0.9", HostPort: 9102, PodIP: "10.1.0.20", PodPort: 9102},
		{Protocol: "TCP", HostIP: "0.0.0.0", HostPort: 8080, PodIP: "10.1.0.5", PodPort: 80},
	}
	if !slices.Equal(got.Mappings, want) {
		t.Errorf("ForPod = %+v, want %+v", got.Mappings, want)
	}
}

// recorder stands in for the network namespaces: the namespace of each IP,
// and what was applied where.
type recorder struct {
	mu      sync.Mutex
	netns   map[netip.Addr]string
	applied []string
}

func (r *recorder) find(_ string, ip netip.Addr, _ types.UID) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p, ok := r.netns[ip]; ok {
		return p, nil
	}
	return "", errors.New("no network namespace holds " + ip.String())
}

func (r *recorder) apply(path string, c nodenet.Config) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.applied = append(r.applied, path+" "+c.NodeIP+" "+strings.Repeat("m", len(c.Mappings)))
	return nil
}

func (r *recorder) calls() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.applied...)
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func TestAgentSetsUpEachPodOnceAndAgainWhenItsNetworkChanges(t *testing.T) {
	pod := tenantHostPod("agent", "10.1.0.20", network)
	other := tenantHostPod("elsewhere", "10.1.0.21", network)
	other.Spec.NodeName = "worker-2"
	client := fake.NewClientset(pod, other)
	r := &recorder{netns: map[netip.Addr]string{
		netip.MustParseAddr("10.1.0.20"): "/var/run/netns/cni-a",
		netip.MustParseAddr("10.1.0.21"): "/var/run/netns/cni-b",
	}}
	a := &Agent{Client: client, NodeName: "worker-1", NetnsDir: DefaultNetnsDir, FindNetns: r.find, Apply: r.apply}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = a.Run(ctx) }()
	eventually(t, "the pod's namespace is set up", func() bool { return len(r.calls()) == 1 })
	if got := r.calls()[0]; got != "/var/run/netns/cni-a 10.0.0.9 m" {
		// cni-b is the pod of another node: never set up here.
		t.Errorf("applied %q, want the pod's namespace with the node IP and one mapping", got)
	}

	// A status change leaves the network as it was: not applied again.
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	if _, err := client.CoreV1().Pods("vc-alpha").UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod.Annotations[nodenet.Annotation] = `{"nodeIP":"10.0.0.9"}`
	if _, err := client.CoreV1().Pods("vc-alpha").Update(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the changed network is set up", func() bool { return len(r.calls()) == 2 })
	if got := r.calls(); got[1] != "/var/run/netns/cni-a 10.0.0.9 " {
		t.Errorf("applied %q after the change, want no mappings", got)
	}
}
