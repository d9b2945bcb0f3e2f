package nodepromotion

import (
	"context"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
)

// A dedicated node's kubelet gives its pods the ClusterIP of the tenant's
// kube-system/kube-dns; without one, no node can join.
func TestClusterDNS(t *testing.T) {
	kubeDNS := func(namespace, clusterIP string) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "kube-dns", Namespace: namespace}, Spec: corev1.ServiceSpec{ClusterIP: clusterIP}}
	}
	tests := []struct {
		name    string
		objs    []runtime.Object
		want    []string
		wantErr string
	}{
		{"the Service's ClusterIP", []runtime.Object{kubeDNS("kube-system", "10.96.0.10")}, []string{"10.96.0.10"}, ""},
		{"an IPv6 ClusterIP", []runtime.Object{kubeDNS("kube-system", "fd00:10:96::a")}, []string{"fd00:10:96::a"}, ""},
		{"no Service", nil, nil, "not found"},
		{"a kube-dns elsewhere is not the cluster DNS", []runtime.Object{kubeDNS("default", "10.96.0.10")}, nil, "not found"},
		{"no ClusterIP", []runtime.Object{kubeDNS("kube-system", "")}, nil, "no ClusterIP"},
		{"headless", []runtime.Object{kubeDNS("kube-system", corev1.ClusterIPNone)}, nil, "no ClusterIP"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := clusterDNS(context.Background(), fake.NewClientset(tt.objs...))
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got, tt.want) {
					t.Errorf("clusterDNS = %q, want %q", got, tt.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("clusterDNS = %q, want an error", got)
			}
			if !strings.Contains(err.Error(), "kube-system/kube-dns") || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("error %q, want it to name kube-system/kube-dns and say %q", err, tt.wantErr)
			}
			if got != nil {
				t.Errorf("clusterDNS = %q with its error, want no address", got)
			}
		})
	}
}
