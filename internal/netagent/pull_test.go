package netagent

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The pull proxy denies every node's internal and external addresses and
// pod CIDRs, every ServiceCIDR, and every Service's external IPs and
// LoadBalancer addresses; hostnames and bad entries are left out.
func TestHostRangesAreTheNodesAndServiceCIDRs(t *testing.T) {
	nodes := []*corev1.Node{
		{ObjectMeta: metav1.ObjectMeta{Name: "a"}, Spec: corev1.NodeSpec{PodCIDRs: []string{"10.244.0.0/24", "fd00:10:244::/64"}},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
				{Type: corev1.NodeInternalIP, Address: "198.51.100.11"}, {Type: corev1.NodeExternalIP, Address: "2001:db8::11"},
				{Type: corev1.NodeHostName, Address: "a"}, {Type: corev1.NodeInternalIP, Address: "not-an-ip"},
			}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "b"}, Spec: corev1.NodeSpec{PodCIDRs: []string{"10.244.1.0/24"}},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "198.51.100.11"}}}},
	}
	cidrs := []*networkingv1.ServiceCIDR{{Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.96.0.0/16", "bad"}}}}
	services := []*corev1.Service{{Spec: corev1.ServiceSpec{ExternalIPs: []string{"203.0.113.7"}},
		Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "198.51.100.200"}, {Hostname: "lb.example"}}}}}}
	got := fmt.Sprint(hostRanges(nodes, cidrs, services))
	if want := "[10.96.0.0/16 10.244.0.0/24 10.244.1.0/24 198.51.100.11/32 198.51.100.200/32 203.0.113.7/32 2001:db8::11/128 fd00:10:244::/64]"; got != want {
		t.Errorf("hostRanges = %s, want %s", got, want)
	}
}
