package isolation

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	"github.com/nestdev/nest/internal/testutil"
)

// Controls: what tenants do every day keeps working under the isolation.
func (e *env) controls() []testCase {
	return []testCase{
		{"plain-pod", func(t *testing.T) { e.runServer(t, e.alpha, "control-plain") }},
		{"deployment-behind-cluster-ip-and-headless-services-by-dns", e.deploymentByDNS},
		{"restricted-pod", e.restrictedPod},
		{"valid-dns-config", e.validDNSConfig},
		{"long-names-in-a-long-namespace", e.longNames},
	}
}

func (e *env) deploymentByDNS(t *testing.T) {
	cs := e.alpha.Clientset(t)
	labels := map[string]string{"app": "shop"}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: testPod("shop").Spec},
		},
	}
	d.Spec.Template.Spec.NodeName = ""
	if _, err := cs.AppsV1().Deployments("default").Create(e.ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.AppsV1().Deployments("default").Delete(e.ctx, "shop", metav1.DeleteOptions{}) })
	e.alpha.Kubectl(t, e.ctx, "expose", "deployment", "shop", "--port=8080")
	e.alpha.Kubectl(t, e.ctx, "create", "service", "clusterip", "shop-headless", "--clusterip=None", "--tcp=8080:8080")
	e.alpha.Kubectl(t, e.ctx, "set", "selector", "service", "shop-headless", "app=shop")
	e.alpha.Kubectl(t, e.ctx, "rollout", "status", "deployment", "shop", "--timeout=2m")
	var names, ips []string
	testutil.Eventually(t, time.Minute, "two running shop pods", func() error {
		list, err := cs.CoreV1().Pods("default").List(e.ctx, metav1.ListOptions{LabelSelector: "app=shop"})
		if err != nil {
			return err
		}
		names, ips = nil, nil
		for _, p := range list.Items {
			if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" {
				names, ips = append(names, p.Name), append(ips, p.Status.PodIP)
			}
		}
		if len(ips) != 2 {
			return fmt.Errorf("running pods %v", names)
		}
		return nil
	})
	testutil.Eventually(t, time.Minute, "the ClusterIP Service answers by name", func() error {
		out, err := exec(e.ctx, e.alpha, "prober", "get", "http://shop.default.svc.cluster.local:8080/hostname")
		if got := strings.TrimSpace(out); err != nil || !slices.Contains(names, got) {
			return fmt.Errorf("got %q (%v), want one of %v", out, err, names)
		}
		return nil
	})
	testutil.Eventually(t, time.Minute, "the headless Service resolves to the pods", func() error {
		out, err := exec(e.ctx, e.alpha, "prober", "dns", "shop-headless.default.svc.cluster.local")
		if err != nil {
			return err
		}
		if got := strings.Fields(out); !sameSet(got, ips) {
			return fmt.Errorf("answer %v, want %v", got, ips)
		}
		return nil
	})
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

func (e *env) restrictedPod(t *testing.T) {
	e.runServer(t, e.alpha, "control-restricted", func(p *corev1.Pod) {
		p.Spec.SecurityContext = &corev1.PodSecurityContext{
			RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65534),
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		}
		p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{
			AllowPrivilegeEscalation: ptr.To(false),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		}
	})
	hp := e.hostPod(t, e.alpha, "default", "control-restricted")
	if sc := hp.Spec.Containers[0].SecurityContext; sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("host container security context %+v lost the tenant's settings", sc)
	}
}

// validDNSConfig: three nameservers and extra search domains are what the
// kubelet accepts; the pod runs with them merged into Nest's settings.
func (e *env) validDNSConfig(t *testing.T) {
	servers := []string{"127.0.0.1", "127.0.0.2", "127.0.0.3"}
	e.runServer(t, e.alpha, "control-dns-config", func(p *corev1.Pod) {
		p.Spec.DNSConfig = &corev1.PodDNSConfig{
			Nameservers: servers, Searches: []string{"corp.internal", "svc.corp.internal"},
			Options: []corev1.PodDNSConfigOption{{Name: "ndots", Value: ptr.To("2")}},
		}
	})
	resolv := e.mustExec(t, e.alpha, "control-dns-config", "cat", "/etc/resolv.conf")
	var nameservers int
	for _, line := range strings.Split(resolv, "\n") {
		if strings.HasPrefix(line, "nameserver") {
			nameservers++
		}
	}
	if nameservers == 0 || nameservers > 3 {
		t.Errorf("%d nameservers, want 1 to 3:\n%s", nameservers, resolv)
	}
	for _, want := range []string{"corp.internal", "default.svc.cluster.local", "ndots:2"} {
		if !strings.Contains(resolv, want) {
			t.Errorf("resolv.conf lacks %q:\n%s", want, resolv)
		}
	}
}

// longNames: a 63-character pod name in a 63-character namespace.
func (e *env) longNames(t *testing.T) {
	ns := "ns-" + strings.Repeat("n", 60)
	name := "pod-" + strings.Repeat("p", 59)
	if _, err := e.alpha.Clientset(t).CoreV1().Namespaces().Create(e.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.alpha.Clientset(t).CoreV1().Namespaces().Delete(e.ctx, ns, metav1.DeleteOptions{}) })
	testutil.Eventually(t, time.Minute, "default ServiceAccount in "+ns, func() error {
		_, err := e.alpha.Clientset(t).CoreV1().ServiceAccounts(ns).Get(e.ctx, "default", metav1.GetOptions{})
		return err
	})
	p := testPod(name)
	p.Namespace = ns
	e.create(t, e.alpha, p)
	e.waitRunning(t, e.alpha, ns, name)
	hp := e.hostPod(t, e.alpha, ns, name)
	if errs := validation.IsDNS1123Label(hp.Name); len(errs) > 0 {
		t.Errorf("host pod name %q: %v", hp.Name, errs)
	}
}
