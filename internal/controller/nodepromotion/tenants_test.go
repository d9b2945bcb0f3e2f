package nodepromotion

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/agent"
	"github.com/nestdev/nest/internal/pki"
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

// Nodes join a tenant whose cluster CA rotates only with the bundle its
// control plane rolled out in the phase: never the Secret's next shape.
func TestClusterCARollingOut(t *testing.T) {
	ca, err := pki.NewCA("cluster")
	if err != nil {
		t.Fatal(err)
	}
	bundle := ca.CertificatePEM()
	rotating := func(authorities []nestv1.CAName, rolledOut string) *nestv1.VirtualCluster {
		return &nestv1.VirtualCluster{Status: nestv1.VirtualClusterStatus{Certificates: &nestv1.CertificatesStatus{CARotation: &nestv1.CARotation{
			Request: "r1", Authorities: authorities, Phase: nestv1.CAPhaseReissue, RolledOutCAHash: rolledOut}}}}
	}
	tests := []struct {
		name    string
		vc      *nestv1.VirtualCluster
		joining bool
	}{
		{"no rotation", &nestv1.VirtualCluster{}, true},
		{"a rotation of other authorities", rotating([]nestv1.CAName{nestv1.CAEtcd, nestv1.CAServiceAccount}, ""), true},
		{"the cluster CA, not yet rolled out", rotating([]nestv1.CAName{nestv1.CACluster}, ""), false},
		{"the cluster CA, another bundle rolled out", rotating([]nestv1.CAName{nestv1.CACluster}, pki.BundleHash(append(bytes.Clone(bundle), bundle...))), false},
		{"the cluster CA, this bundle rolled out", rotating([]nestv1.CAName{nestv1.CACluster}, pki.BundleHash(bundle)), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := clusterCARollingOut(tt.vc, bundle)
			if tt.joining && err != nil {
				t.Errorf("nodes may not join: %v", err)
			}
			if !tt.joining && (err == nil || !strings.Contains(err.Error(), "r1") || !strings.Contains(err.Error(), "Reissue")) {
				t.Errorf("error %v, want one naming the rotation r1 and its phase Reissue", err)
			}
		})
	}
}

// A node rejoins in place only when its agent reports the kubelet joined
// to the same server with another bundle; an agent that reports no bundle
// (older than nest-manager) is never restarted in a loop: its trust is
// unknown, which serveTenant names.
func TestRejoinsInPlace(t *testing.T) {
	bundle := newCAPEM("cluster")
	req := agent.JoinRequest{Server: tenantServer, CACertPEM: bundle}
	joined := agent.Status{Server: tenantServer, Bootstrapped: true, CAHash: pki.BundleHash(newCAPEM("old"))}
	tests := []struct {
		name string
		st   agent.Status
		want bool
	}{
		{"another bundle", joined, true},
		{"the same bundle", agent.Status{Server: tenantServer, Bootstrapped: true, CAHash: pki.BundleHash(bundle)}, false},
		{"another server", agent.Status{Server: hostServer, Bootstrapped: true, CAHash: joined.CAHash}, false},
		{"not bootstrapped", agent.Status{Server: tenantServer, CAHash: joined.CAHash}, false},
		{"an agent that reports no bundle", agent.Status{Server: tenantServer, Bootstrapped: true}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := rejoinsInPlace(tt.st, req); got != tt.want {
				t.Errorf("rejoinsInPlace = %v, want %v", got, tt.want)
			}
		})
	}
	for _, tt := range []struct {
		name string
		st   agent.Status
		want trust
	}{
		{"bootstrapped with the bundle", agent.Status{Server: tenantServer, Bootstrapped: true, CAHash: pki.BundleHash(bundle)}, trustsThis},
		{"bootstrapped with another", joined, trustsOther},
		{"not bootstrapped", agent.Status{Server: tenantServer}, trustsOther},
		{"an agent that reports no bundle", agent.Status{Server: tenantServer, Bootstrapped: true}, trustUnknown},
	} {
		if got, err := bundleTrust(context.Background(), statusOnly{st: tt.st}, bundle); err != nil || got != tt.want {
			t.Errorf("%s: bundleTrust = %v, %v; want %v", tt.name, got, err, tt.want)
		}
	}
}

// statusOnly is an Agent whose Status is st; it does nothing else.
type statusOnly struct {
	st agent.Status
	Agent
}

func (s statusOnly) Status(context.Context) (agent.Status, error) { return s.st, nil }
