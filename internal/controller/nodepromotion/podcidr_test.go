package nodepromotion

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/agent"
	"github.com/nestdev/nest/internal/syncer/contract"
)

// statusAgent answers Status with a pod CIDR; nothing else is called.
type statusAgent struct {
	Agent
	podCIDR string
}

func (a statusAgent) Status(context.Context) (agent.Status, error) {
	return agent.Status{PodCIDR: a.podCIDR}, nil
}

func hostPod(name, node, ip string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec:       corev1.PodSpec{NodeName: node},
		Status:     corev1.PodStatus{PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}},
	}
}

// A node's pod CIDR is what its agent reports, unless a pod on another
// node has an address in it: then the node's CNI configuration is not its
// own, and the range would admit other pods to the tenant.
func TestOwnPodCIDR(t *testing.T) {
	pods := []runtime.Object{
		hostPod("mine", "w1", "10.244.1.5"),
		hostPod("other", "w2", "10.244.2.5"),
		func() *corev1.Pod {
			p := hostPod("hostnet", "w2", "198.51.100.12")
			p.Spec.HostNetwork = true
			return p
		}(),
	}
	tests := []struct {
		name, reported, want, err string
	}{
		{"the node's own range", "10.244.1.0/24", "10.244.1.0/24", ""},
		{"unmasked", "10.244.1.9/24", "10.244.1.0/24", ""},
		{"no CNI configuration", "", "", ""},
		{"another node's pods inside", "10.244.0.0/16", "", "holds 10.244.2.5 of pod default/other on node w2"},
		{"everything", "0.0.0.0/0", "", "not its own"},
		{"not a CIDR", "10.244.1.0", "", "reports pod CIDR"},
		{"a host-network pod's node address does not count", "198.51.100.0/24", "198.51.100.0/24", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &Reconciler{HostClient: fake.NewClientset(pods...)}
			got, err := r.ownPodCIDR(context.Background(), statusAgent{podCIDR: tt.reported}, "w1")
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("ownPodCIDR(%q) = %q, %v; want an error with %q", tt.reported, got, err, tt.err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ownPodCIDR(%q) = %q, %v; want %q", tt.reported, got, err, tt.want)
			}
		})
	}
}

// A returning node waits until its holder's ConfigMap and nest-syncer's
// host EndpointSlices no longer admit its pod CIDR.
func TestRangeInUse(t *testing.T) {
	gn := &nestv1.GlobalNode{
		ObjectMeta: metav1.ObjectMeta{Name: "w1"},
		Status:     nestv1.GlobalNodeStatus{VirtualCluster: "vc-a/a", Phase: nestv1.NodePhaseReturning, PodCIDR: "10.244.1.0/24"},
	}
	configMap := func(cidrs string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: contract.DedicatedNodesConfigMap("a"), Namespace: "vc-a"},
			Data: map[string]string{contract.DedicatedPodCIDRsKey: cidrs}}
	}
	slice := func(manager, ip string) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: "s-" + manager, Namespace: "vc-a", Labels: map[string]string{discoveryv1.LabelManagedBy: manager}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{ip}}},
		}
	}
	tests := []struct {
		name    string
		objects []runtime.Object
		want    string
	}{
		{"the ConfigMap still lists it", []runtime.Object{configMap("10.244.1.0/24\n10.244.3.0/24")}, "ConfigMap a-dedicated-nodes"},
		{"a syncer slice still names an address in it", []runtime.Object{configMap("10.244.3.0/24"), slice(contract.EndpointSliceManager, "10.244.1.7")}, "host EndpointSlice s-nest-syncer.nest.dev"},
		{"withdrawn everywhere", []runtime.Object{configMap(""), slice(contract.EndpointSliceManager, "10.244.3.7"), slice("endpointslice-controller.k8s.io", "10.244.1.7")}, ""},
		{"the holder's namespace is gone", nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &Reconciler{HostClient: fake.NewClientset(tt.objects...)}
			got, err := r.rangeInUse(context.Background(), gn)
			if err != nil {
				t.Fatal(err)
			}
			if (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
				t.Errorf("rangeInUse = %q, want %q", got, tt.want)
			}
		})
	}
}
