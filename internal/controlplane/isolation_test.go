package controlplane

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/images"
	"github.com/nestdev/nest/internal/pki"
	"github.com/nestdev/nest/internal/syncer"
	"github.com/nestdev/nest/internal/syncer/contract"
)

// kubeletAPIAccepts reports whether the virtual node's kubelet API, trusting
// the PKI file clientCA, accepts the client certificate certPEM, as
// nest-syncer's TLS configuration and common-name check do.
func kubeletAPIAccepts(t *testing.T, data map[string][]byte, clientCA string, certPEM []byte) bool {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data[clientCA]) {
		t.Fatalf("%s holds no certificate", clientCA)
	}
	cert, err := pki.ParseCertificate(certPEM)
	if err != nil {
		t.Fatal(err)
	}
	_, err = cert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	return err == nil && cert.Subject.CommonName == contract.KubeletClientName
}

func syncerFlag(t *testing.T, pod corev1.PodSpec, flag string) string {
	t.Helper()
	for _, c := range pod.Containers {
		if c.Name != syncerName {
			continue
		}
		for _, a := range c.Args {
			if v, ok := strings.CutPrefix(a, "--"+flag+"="); ok {
				return v
			}
		}
	}
	t.Fatalf("nest-syncer has no --%s", flag)
	return ""
}

// A certificate the tenant mints through its own CSR API (signed by the
// controller-manager's cluster-signing CA) with the API server's kubelet
// client name is refused by the virtual node; the API server's own is taken.
func TestVirtualNodeTrustsOnlyTheKubeletClientCA(t *testing.T) {
	data, _, err := ReconcilePKI(nil, names, endpoints(), Renewal{})
	if err != nil {
		t.Fatal(err)
	}
	pod := StatefulSetFor(vc(nil), Options{}, ServiceIPs{}).Spec.Template.Spec
	clientCA := strings.TrimPrefix(syncerFlag(t, pod, "kubelet-client-ca"), PKIDir+"/")
	if clientCA != KubeletClientCACert {
		t.Fatalf("nest-syncer trusts %s, want %s", clientCA, KubeletClientCACert)
	}
	signer, signerKey := "", ""
	for _, a := range pod.Containers[0].Args {
		if v, ok := strings.CutPrefix(a, "--cluster-signing-cert-file="); ok {
			signer = strings.TrimPrefix(v, PKIDir+"/")
		}
		if v, ok := strings.CutPrefix(a, "--cluster-signing-key-file="); ok {
			signerKey = strings.TrimPrefix(v, PKIDir+"/")
		}
	}
	if pod.Containers[0].Name != controllerManagerName || signer == "" || signer == KubeletClientCACert || bytes.Equal(data[signer], data[KubeletClientCACert]) {
		t.Fatalf("the tenant's CSR signer is %q: it must not be the kubelet-client CA", signer)
	}
	if !kubeletAPIAccepts(t, data, clientCA, data[KubeletClientCert]) {
		t.Error("the virtual node refuses the tenant API server's kubelet client certificate")
	}
	if _, err := tls.X509KeyPair(data[KubeletClientCert], data[KubeletClientKey]); err != nil {
		t.Errorf("kubelet client pair: %v", err)
	}
	tenantSigner, err := pki.LoadCA(pki.KeyPair{CertPEM: data[signer], KeyPEM: data[signerKey]})
	if err != nil {
		t.Fatal(err)
	}
	minted, err := tenantSigner.Issue(pki.CertSpec{CommonName: contract.KubeletClientName, Organizations: []string{"system:masters"}, Usage: pki.ClientAuth})
	if err != nil {
		t.Fatal(err)
	}
	if kubeletAPIAccepts(t, data, clientCA, minted.CertPEM) {
		t.Error("the virtual node accepts a certificate the tenant's CSR signer minted")
	}
}

// A PKI Secret from before the kubelet-client CA gets it on the next
// reconcile, with the kubelet client certificate moved to it; nothing else changes.
func TestReconcilePKIAddsKubeletClientCA(t *testing.T) {
	current, _, err := ReconcilePKI(nil, names, endpoints(), Renewal{})
	if err != nil {
		t.Fatal(err)
	}
	old := map[string][]byte{}
	for k, v := range current {
		old[k] = v
	}
	delete(old, KubeletClientCACert)
	delete(old, KubeletClientCAKey)
	ca, _ := pki.LoadCA(pki.KeyPair{CertPEM: old[CACert], KeyPEM: old[CAKey]})
	legacy, _ := ca.Issue(pki.CertSpec{CommonName: contract.KubeletClientName, Organizations: []string{"system:masters"}, Usage: pki.ClientAuth})
	old[KubeletClientCert], old[KubeletClientKey] = legacy.CertPEM, legacy.KeyPEM

	migrated, changed, err := ReconcilePKI(old, names, endpoints(), Renewal{})
	if err != nil || !changed {
		t.Fatalf("changed=%v err=%v; want the kubelet-client CA added", changed, err)
	}
	if len(migrated[KubeletClientCACert]) == 0 || !SignedBy(migrated[KubeletClientCert], migrated[KubeletClientCACert]) {
		t.Fatal("the kubelet client certificate is not signed by a new kubelet-client CA")
	}
	if SignedBy(migrated[KubeletClientCert], migrated[CACert]) {
		t.Error("the kubelet client certificate is still signed by the cluster CA")
	}
	for _, k := range []string{CACert, CAKey, ServiceAccountKey, APIServerCert, EtcdServerCert, SyncerServingCert} {
		if !bytes.Equal(old[k], migrated[k]) {
			t.Errorf("%s changed", k)
		}
	}
	if _, changed, _ := ReconcilePKI(migrated, names, endpoints(), Renewal{}); changed {
		t.Error("a second reconcile changed the migrated PKI")
	}
}

// Servers that listen on loopback only are probed with nest-probe from
// their own image; the authenticated HTTPS servers keep HTTP probes.
func TestProbes(t *testing.T) {
	pod := StatefulSetFor(vc(nil), Options{KubeImageRepository: "kube", SyncerImage: "syncer", CoreDNSImage: "coredns"}, ServiceIPs{}).Spec.Template.Spec
	exec := map[string][]string{
		"etcd":        {"http://127.0.0.1:2381/health?serializable=true", "http://127.0.0.1:2381/health?serializable=true"},
		"etcd-member": {"http://127.0.0.1:2382/started", "http://127.0.0.1:2382/started"},
		"nest-syncer": {"http://127.0.0.1:10248/healthz"},
		"coredns":     {"http://127.0.0.1:8080/health"},
	}
	https := map[string]int{"kube-apiserver": Port, "kube-controller-manager": 10257, "kube-scheduler": 10259}
	for _, c := range append(pod.InitContainers, pod.Containers...) {
		var probes []*corev1.Probe
		for _, p := range []*corev1.Probe{c.LivenessProbe, c.StartupProbe, c.ReadinessProbe} {
			if p != nil {
				probes = append(probes, p)
			}
		}
		if urls, ok := exec[c.Name]; ok {
			var got []string
			for _, p := range probes {
				if p.Exec == nil || len(p.Exec.Command) != 3 || p.Exec.Command[0] != images.ProbePath || p.TimeoutSeconds <= 5 {
					t.Errorf("%s: probe %+v is not nest-probe with time to report", c.Name, p)
					continue
				}
				got = append(got, p.Exec.Command[2])
			}
			if !slices.Equal(got, urls) {
				t.Errorf("%s probes %v, want %v", c.Name, got, urls)
			}
			continue
		}
		for _, p := range probes {
			if p.HTTPGet == nil || p.HTTPGet.Scheme != corev1.URISchemeHTTPS || p.HTTPGet.Port.IntValue() != https[c.Name] {
				t.Errorf("%s: probe %+v, want HTTPS on %d", c.Name, p, https[c.Name])
			}
		}
	}
	etcd := strings.Join(pod.InitContainers[1].Args, " ")
	if pod.InitContainers[1].Name != "etcd" || !strings.Contains(etcd, "--listen-metrics-urls=http://127.0.0.1:2381") || len(pod.InitContainers[1].Ports) != 0 {
		t.Errorf("etcd metrics are not on loopback only: %s ports %v", etcd, pod.InitContainers[1].Ports)
	}
}

// The control-plane pod passes Pod Security at restricted, the strictest
// level its namespace can enforce.
func TestControlPlanePodIsRestricted(t *testing.T) {
	ps, err := syncer.NewPodSecurity(string(nestv1.PodSecurityRestricted))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := StatefulSetFor(vc(nil), Options{}, ServiceIPs{}).Spec.Template
	if err := ps.Check(&corev1.Pod{ObjectMeta: tmpl.ObjectMeta, Spec: tmpl.Spec}); err != nil {
		t.Error(err)
	}
	for level, want := range map[nestv1.PodSecurityLevel]string{"": "baseline", nestv1.PodSecurityRestricted: "restricted"} {
		got := NamespaceLabelsFor(vc(func(v *nestv1.VirtualCluster) { v.Spec.VirtualNode.PodSecurityLevel = level }))
		if got["pod-security.kubernetes.io/enforce"] != want || got["pod-security.kubernetes.io/enforce-version"] != "latest" || len(got) != 2 {
			t.Errorf("level %q: namespace labels %v", level, got)
		}
	}
}

func TestNamespaceHolder(t *testing.T) {
	at := func(name string, sec int) nestv1.VirtualCluster {
		return nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(time.Unix(int64(sec), 0))}}
	}
	tests := []struct {
		name    string
		claimed string
		vcs     []nestv1.VirtualCluster
		want    string
	}{
		{"none", "", nil, ""},
		{"claimed but none left", "b", nil, ""},
		{"alone", "", []nestv1.VirtualCluster{at("b", 5)}, "b"},
		{"oldest wins", "", []nestv1.VirtualCluster{at("a", 9), at("z", 3), at("m", 5)}, "z"},
		{"same second: first by name", "", []nestv1.VirtualCluster{at("b", 3), at("a", 3), at("d", 4)}, "a"},
		// The claim settles a race the order cannot: "b" claimed before
		// "a" was created in the same second.
		{"claimed wins over older and first by name", "b", []nestv1.VirtualCluster{at("b", 3), at("a", 3), at("c", 1)}, "b"},
		{"a claim by one that is gone falls back to the order", "gone", []nestv1.VirtualCluster{at("b", 3), at("a", 3)}, "a"},
	}
	for _, tt := range tests {
		if got := NamespaceHolder(tt.claimed, tt.vcs); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
	msg := NamespaceInUseMessage("team", "first", "second")
	for _, want := range []string{"team", "VirtualCluster first", "delete VirtualCluster second", "namespace of its own"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
}

func TestHostMetadataAndDefaults(t *testing.T) {
	defaults := Options{HostMetadata: contract.MetadataAllowList{Labels: []string{"app"}, Annotations: []string{"example.com/*"}}}
	tests := []struct {
		name                string
		meta                *nestv1.HostMetadataSpec
		labels, annotations string
	}{
		{"unset: the manager's", nil, "app", "example.com/*"},
		{"labels set", &nestv1.HostMetadataSpec{Labels: []string{"tier", "team"}}, "tier,team", "example.com/*"},
		{"empty lists copy nothing", &nestv1.HostMetadataSpec{Labels: []string{}, Annotations: []string{}}, "", ""},
	}
	for _, tt := range tests {
		pod := StatefulSetFor(vc(func(v *nestv1.VirtualCluster) { v.Spec.VirtualNode.HostMetadata = tt.meta }), defaults, ServiceIPs{}).Spec.Template.Spec
		if got := syncerFlag(t, pod, "host-labels"); got != tt.labels {
			t.Errorf("%s: --host-labels=%q, want %q", tt.name, got, tt.labels)
		}
		if got := syncerFlag(t, pod, "host-annotations"); got != tt.annotations {
			t.Errorf("%s: --host-annotations=%q, want %q", tt.name, got, tt.annotations)
		}
	}
}
