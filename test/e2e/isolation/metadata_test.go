package isolation

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// Metadata: tenant labels and annotations reach the host pod only through
// the allow-list, and a tenant cannot forge Nest's own keys.
func (e *env) metadata() []testCase {
	return []testCase{
		{"add-on-annotations-stay-in-the-tenant", e.addOnAnnotations},
		{"reserved-label-values-are-not-copied", e.reservedLabels},
		{"etc-hosts-names-the-tenant-domain-not-the-host", e.etcHostsFQDN},
		{"forged-nest-labels-are-refused", func(t *testing.T) {
			e.refused(t, testPod("metadata-forged", func(p *corev1.Pod) { p.Labels["nest.dev/tenant-of"] = "beta" }), "reserved for Nest")
		}},
		{"forged-nest-annotations-are-refused", func(t *testing.T) {
			e.refused(t, testPod("metadata-forged-annotation", func(p *corev1.Pod) {
				p.Annotations = map[string]string{"nest.dev/tenant-name": "web"}
			}), "reserved for Nest")
		}},
	}
}

// etcHostsFQDN: a pod with a subdomain finds its tenant FQDN in /etc/hosts,
// as the tenant's kubelet would write it, and nothing of the host namespace
// or the host's cluster domain.
func (e *env) etcHostsFQDN(t *testing.T) {
	pod := e.runServer(t, e.alpha, "metadata-etc-hosts", func(p *corev1.Pod) { p.Spec.Hostname, p.Spec.Subdomain = "db-0", "db" })
	hosts := e.mustExec(t, e.alpha, pod.Name, "cat", "/etc/hosts")
	want := pod.Status.PodIP + "\tdb-0.db.default.svc.cluster.local\tdb-0"
	if pod.Status.PodIP == "" || !slices.Contains(strings.Split(hosts, "\n"), want) {
		t.Errorf("/etc/hosts lacks %q:\n%s", want, hosts)
	}
	hostNamespace := e.hostPod(t, e.alpha, "default", pod.Name).Namespace
	if strings.Contains(hosts, hostNamespace) {
		t.Errorf("/etc/hosts names the host namespace %s:\n%s", hostNamespace, hosts)
	}
	if s := e.tenantPod(t, e.alpha, "default", pod.Name).Status; len(s.InitContainerStatuses) != 0 {
		t.Errorf("the tenant pod shows init containers it does not have: %v", s.InitContainerStatuses)
	}
}

// hostAddOnKeys are keys that CNI plugins, runtimes and admission add-ons on a
// host act on.
var hostAddOnKeys = []string{
	"k8s.v1.cni.cncf.io/networks", "cni.projectcalico.org/ipAddrs", "vault.hashicorp.com/role",
	"io.kubernetes.cri-o.Devices", "sidecar.istio.io/inject", "kubernetes.io/ingress-bandwidth",
}

func (e *env) addOnAnnotations(t *testing.T) {
	e.runServer(t, e.alpha, "metadata-add-ons", func(p *corev1.Pod) {
		p.Annotations = map[string]string{}
		for _, k := range hostAddOnKeys {
			p.Annotations[k] = "injected"
			p.Labels[k] = "injected"
		}
		p.Labels["team"] = "checkout"
	})
	hp := e.hostPod(t, e.alpha, "default", "metadata-add-ons")
	for _, k := range hostAddOnKeys {
		if v, ok := hp.Annotations[k]; ok {
			t.Errorf("host pod annotation %s=%q", k, v)
		}
		if v, ok := hp.Labels[k]; ok {
			t.Errorf("host pod label %s=%q", k, v)
		}
	}
	// The allow-list is not deny-all: plain keys, such as app and team, reach the host.
	if hp.Labels["team"] != "checkout" || hp.Labels["app"] != "metadata-add-ons" {
		t.Errorf("allowed labels did not reach the host pod: %v", hp.Labels)
	}
}

// reservedLabels: labels that would make a tenant pod look like Nest's own
// control plane to host selectors (NetworkPolicies, monitoring).
func (e *env) reservedLabels(t *testing.T) {
	e.runServer(t, e.alpha, "metadata-reserved", func(p *corev1.Pod) {
		p.Labels["app.kubernetes.io/managed-by"] = "nest"
		p.Labels["app.kubernetes.io/component"] = "control-plane"
	})
	hp := e.hostPod(t, e.alpha, "default", "metadata-reserved")
	if hp.Labels["app.kubernetes.io/component"] == "control-plane" || hp.Labels["app.kubernetes.io/managed-by"] == "nest" {
		t.Errorf("host pod carries the tenant's forged labels: %v", hp.Labels)
	}
}
