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
	"k8s.io/utils/ptr"
)

// The host server a node joins: kubeadm's cluster-info endpoint first,
// else an API server's advertised address, never the Service's ClusterIP.
func TestDiscoverHostServer(t *testing.T) {
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "kubernetes", Namespace: "default", Labels: map[string]string{discoveryv1.LabelServiceName: "kubernetes"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{"198.51.100.12"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(false)}},
			{Addresses: []string{"198.51.100.11"}},
			{Addresses: []string{"198.51.100.13"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}},
		},
		Ports: []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To[int32](6443)}},
	}
	info := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cluster-info", Namespace: "kube-public"}, Data: map[string]string{"kubeconfig": `apiVersion: v1
kind: Config
clusters:
- name: ""
  cluster:
    server: https://lb.example.test:6443
`}}
	for _, tt := range []struct {
		name    string
		objects []runtime.Object
		want    string
	}{
		{"cluster-info first", []runtime.Object{info, slice}, "https://lb.example.test:6443"},
		{"else the lowest ready advertised address", []runtime.Object{slice}, "https://198.51.100.11:6443"},
		{"nothing", nil, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DiscoverHostServer(context.Background(), fake.NewClientset(tt.objects...))
			if got != tt.want || (tt.want == "") != (err != nil) {
				t.Errorf("DiscoverHostServer = %q, %v; want %q", got, err, tt.want)
			}
			if tt.want == "" && err != nil && !strings.Contains(err.Error(), "--host-api-server") {
				t.Errorf("error %q does not say what to set", err)
			}
		})
	}
}
