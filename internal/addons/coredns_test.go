package addons

import (
	"net/netip"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

func TestCorefileForwardsNowhere(t *testing.T) {
	cf := Corefile("tenant.local")
	if !strings.Contains(cf, "kubernetes tenant.local in-addr.arpa ip6.arpa") {
		t.Errorf("Corefile does not serve the cluster domain:\n%s", cf)
	}
	if strings.Contains(cf, "forward") {
		t.Errorf("Corefile forwards queries off the machine:\n%s", cf)
	}
}

func TestCoreDNSObjects(t *testing.T) {
	objs := CoreDNS(DNSOptions{Image: "img:1", ClusterDomain: "cluster.local", ServiceIP: netip.MustParseAddr("10.96.0.10"), Replicas: 2})
	var svc *corev1.Service
	var dep *appsv1.Deployment
	for _, o := range objs {
		switch v := o.(type) {
		case *corev1.Service:
			svc = v
		case *appsv1.Deployment:
			dep = v
		}
	}
	if svc == nil || svc.Spec.ClusterIP != "10.96.0.10" || svc.Name != "kube-dns" {
		t.Fatalf("service = %+v", svc)
	}
	if dep == nil || *dep.Spec.Replicas != 2 {
		t.Fatalf("deployment = %+v", dep)
	}
	c := dep.Spec.Template.Spec.Containers[0]
	if c.Image != "img:1" || c.ImagePullPolicy != corev1.PullNever {
		t.Errorf("container image %s policy %s", c.Image, c.ImagePullPolicy)
	}
	if dep.Spec.Template.Spec.DNSPolicy != corev1.DNSDefault {
		t.Error("CoreDNS must not resolve through itself")
	}
	for k, v := range dep.Spec.Selector.MatchLabels {
		if svc.Spec.Selector[k] != v {
			t.Errorf("service selector %v does not match pods %v", svc.Spec.Selector, dep.Spec.Selector.MatchLabels)
		}
	}
}
