package nodepromotion

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"net"
	"net/url"
	"reflect"
	"runtime"
	"strings"
	"testing"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
)

func TestToEvictSkipsFinishedMirrorAndDaemonSetPods(t *testing.T) {
	pod := func(name string, phase corev1.PodPhase, mutate func(*corev1.Pod)) corev1.Pod {
		p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}, Status: corev1.PodStatus{Phase: phase}}
		if mutate != nil {
			mutate(&p)
		}
		return p
	}
	pods := []corev1.Pod{
		pod("web-b", corev1.PodRunning, nil),
		pod("web-a", corev1.PodPending, nil),
		pod("done", corev1.PodSucceeded, nil),
		pod("crashed", corev1.PodFailed, nil),
		pod("static", corev1.PodRunning, func(p *corev1.Pod) { p.Annotations = map[string]string{mirrorPodAnnotation: "x"} }),
		pod("agent", corev1.PodRunning, func(p *corev1.Pod) {
			p.OwnerReferences = []metav1.OwnerReference{{Kind: "DaemonSet", Name: "ds", Controller: ptr.To(true)}}
		}),
		pod("replica", corev1.PodRunning, func(p *corev1.Pod) {
			p.OwnerReferences = []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "rs", Controller: ptr.To(true)}}
		}),
	}
	var got []string
	for _, p := range toEvict(pods) {
		got = append(got, p.Name)
	}
	if want := []string{"replica", "web-a", "web-b"}; !reflect.DeepEqual(got, want) {
		t.Errorf("toEvict = %v, want %v", got, want)
	}
}

// servingCSR builds a kubelet serving CSR with mutate applied to its
// template before signing.
func servingCSR(t *testing.T, username string, mutate func(*x509.CertificateRequest)) *certificatesv1.CertificateSigningRequest {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.CertificateRequest{
		Subject:     pkix.Name{CommonName: "system:node:node-a", Organization: []string{"system:nodes"}},
		DNSNames:    []string{"node-a"},
		IPAddresses: []net.IP{net.ParseIP("198.51.100.12")},
	}
	if mutate != nil {
		mutate(tmpl)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	return &certificatesv1.CertificateSigningRequest{Spec: certificatesv1.CertificateSigningRequestSpec{
		Request:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
		SignerName: certificatesv1.KubeletServingSignerName,
		Username:   username,
		Groups:     []string{"system:nodes", "system:authenticated"},
		Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth},
	}}
}

func TestServingRequestProblem(t *testing.T) {
	const node, ip = "node-a", "198.51.100.12"
	for _, tc := range []struct {
		name string
		csr  *certificatesv1.CertificateSigningRequest
		want string // "" approves; otherwise a word of the reason
	}{
		{"the node's own name and address", servingCSR(t, "system:node:node-a", nil), ""},
		{"asked by another node", servingCSR(t, "system:node:node-b", nil), "asked by"},
		{"asked outside system:nodes", func() *certificatesv1.CertificateSigningRequest {
			c := servingCSR(t, "system:node:node-a", nil)
			c.Spec.Groups = []string{"system:authenticated"}
			return c
		}(), "asked by"},
		{"another subject", servingCSR(t, "system:node:node-a", func(r *x509.CertificateRequest) { r.Subject.CommonName = "system:node:node-b" }), "subject"},
		{"not in system:nodes", servingCSR(t, "system:node:node-a", func(r *x509.CertificateRequest) { r.Subject.Organization = []string{"system:masters"} }), "subject"},
		{"another DNS name", servingCSR(t, "system:node:node-a", func(r *x509.CertificateRequest) { r.DNSNames = append(r.DNSNames, "kubernetes.default") }), "DNS name"},
		{"another address", servingCSR(t, "system:node:node-a", func(r *x509.CertificateRequest) { r.IPAddresses = []net.IP{net.ParseIP("10.96.0.1")} }), "IP address"},
		{"a URI", servingCSR(t, "system:node:node-a", func(r *x509.CertificateRequest) { r.URIs = []*url.URL{{Scheme: "spiffe", Host: "x"}} }), "URI"},
		{"client auth usage", func() *certificatesv1.CertificateSigningRequest {
			c := servingCSR(t, "system:node:node-a", nil)
			c.Spec.Usages = append(c.Spec.Usages, certificatesv1.UsageClientAuth)
			return c
		}(), "usage"},
		{"another signer", func() *certificatesv1.CertificateSigningRequest {
			c := servingCSR(t, "system:node:node-a", nil)
			c.Spec.SignerName = certificatesv1.KubeAPIServerClientSignerName
			return c
		}(), "signer"},
		{"garbage", &certificatesv1.CertificateSigningRequest{Spec: certificatesv1.CertificateSigningRequestSpec{
			SignerName: certificatesv1.KubeletServingSignerName, Username: "system:node:node-a", Groups: []string{"system:nodes"}, Request: []byte("x")}}, "PEM"},
		{"an email name", servingCSR(t, "system:node:node-a", func(r *x509.CertificateRequest) { r.EmailAddresses = []string{"a@example.com"} }), "email"},
		{"key encipherment too", func() *certificatesv1.CertificateSigningRequest {
			c := servingCSR(t, "system:node:node-a", nil)
			c.Spec.Usages = append(c.Spec.Usages, certificatesv1.UsageKeyEncipherment)
			return c
		}(), ""},
		{"no names at all", servingCSR(t, "system:node:node-a", func(r *x509.CertificateRequest) { r.DNSNames, r.IPAddresses = nil, nil }), ""},
		{"not a certificate request", func() *certificatesv1.CertificateSigningRequest {
			c := servingCSR(t, "system:node:node-a", nil)
			c.Spec.Request = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("x")})
			return c
		}(), "PEM"},
		{"unparseable", func() *certificatesv1.CertificateSigningRequest {
			c := servingCSR(t, "system:node:node-a", nil)
			c.Spec.Request = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: []byte("x")})
			return c
		}(), "unparseable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := servingRequestProblem(tc.csr, node, ip)
			if tc.want == "" && got != "" {
				t.Errorf("refused: %s", got)
			}
			if tc.want != "" && !strings.Contains(got, tc.want) {
				t.Errorf("problem = %q, want one with %q", got, tc.want)
			}
		})
	}
}

func TestPhaseFuncPicksTheDirection(t *testing.T) {
	r := &Reconciler{}
	name := func(f phaseFunc) string {
		if f == nil {
			return "none"
		}
		full := runtime.FuncForPC(reflect.ValueOf(f).Pointer()).Name()
		full = strings.TrimSuffix(full, "-fm")
		return full[strings.LastIndex(full, ".")+1:]
	}
	gn := func(held bool, state nestv1.NodeState, phase nestv1.NodePhase) *nestv1.GlobalNode {
		g := &nestv1.GlobalNode{Spec: nestv1.GlobalNodeSpec{State: state}, Status: nestv1.GlobalNodeStatus{Phase: phase}}
		if held {
			g.Annotations = map[string]string{nestv1.AnnotationHeldBy: "vc-a/a"}
			g.Status.VirtualCluster = "vc-a/a"
		}
		return g
	}
	for _, tc := range []struct {
		gn   *nestv1.GlobalNode
		want string
	}{
		{gn(false, nestv1.NodeStateFree, nestv1.NodePhaseHost), "none"},
		{gn(false, nestv1.NodeStateFree, ""), "none"},
		{gn(true, nestv1.NodeStateReserved, ""), "none"},
		{gn(true, nestv1.NodeStateReserved, nestv1.NodePhaseHost), "startMove"},
		{gn(true, nestv1.NodeStateReserved, nestv1.NodePhaseDraining), "drainHost"},
		{gn(true, nestv1.NodeStateReserved, nestv1.NodePhaseLeaving), "leaveHost"},
		{gn(true, nestv1.NodeStateReserved, nestv1.NodePhaseJoining), "joinTenant"},
		{gn(true, nestv1.NodeStateOccupied, nestv1.NodePhaseTenant), "serveTenant"},
		{gn(true, nestv1.NodeStateReserved, nestv1.NodePhaseFailed), "none"},
		{gn(true, nestv1.NodeStateReserved, nestv1.NodePhaseReturning), "none"},
		{gn(false, nestv1.NodeStateReserved, nestv1.NodePhaseDraining), "uncordonHost"},
		{gn(false, nestv1.NodeStateReserved, nestv1.NodePhaseLeaving), "returnHome"},
		{gn(false, nestv1.NodeStateReserved, nestv1.NodePhaseJoining), "drainTenant"},
		{gn(false, nestv1.NodeStateOccupied, nestv1.NodePhaseTenant), "drainTenant"},
		{gn(false, nestv1.NodeStateOccupied, nestv1.NodePhaseReleasing), "drainTenant"},
		{gn(false, nestv1.NodeStateOccupied, nestv1.NodePhaseReturning), "returnHome"},
		{gn(false, nestv1.NodeStateOccupied, nestv1.NodePhaseFailed), "releaseFailed"},
	} {
		held := tc.gn.Annotations[nestv1.AnnotationHeldBy] != ""
		if got := name(r.phaseFunc(tc.gn)); got != tc.want {
			t.Errorf("held=%v state=%s phase=%q: %s, want %s", held, tc.gn.Spec.State, tc.gn.Status.Phase, got, tc.want)
		}
	}
}

// clientCSR builds a node client CSR asked with a bootstrap token.
func clientCSR(t *testing.T, username string, mutate func(*x509.CertificateRequest)) *certificatesv1.CertificateSigningRequest {
	t.Helper()
	c := servingCSR(t, username, func(r *x509.CertificateRequest) {
		r.DNSNames, r.IPAddresses = nil, nil
		if mutate != nil {
			mutate(r)
		}
	})
	c.Spec.SignerName = certificatesv1.KubeAPIServerClientKubeletSignerName
	c.Spec.Groups = []string{"system:bootstrappers", "system:authenticated"}
	c.Spec.Usages = []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth}
	return c
}

// The host approves a returning node's client certificate for its own name
// only, and only when asked with the token Nest gave it.
func TestNodeClientRequestProblem(t *testing.T) {
	for _, tc := range []struct {
		name string
		csr  *certificatesv1.CertificateSigningRequest
		want string
	}{
		{"the node's own name with its token", clientCSR(t, "system:bootstrap:abcdef", nil), ""},
		{"another node's name", clientCSR(t, "system:bootstrap:abcdef", func(r *x509.CertificateRequest) { r.Subject.CommonName = "system:node:nest-control-plane" }), "subject"},
		{"another token", clientCSR(t, "system:bootstrap:zzzzzz", nil), "asked by"},
		{"a node renewing", clientCSR(t, "system:node:node-a", nil), "asked by"},
		{"with names", clientCSR(t, "system:bootstrap:abcdef", func(r *x509.CertificateRequest) { r.DNSNames = []string{"node-a"} }), "names"},
		{"server auth", func() *certificatesv1.CertificateSigningRequest {
			c := clientCSR(t, "system:bootstrap:abcdef", nil)
			c.Spec.Usages = append(c.Spec.Usages, certificatesv1.UsageServerAuth)
			return c
		}(), "usage"},
		{"a serving request", servingCSR(t, "system:bootstrap:abcdef", nil), "signer"},
		{"not in system:nodes", clientCSR(t, "system:bootstrap:abcdef", func(r *x509.CertificateRequest) { r.Subject.Organization = []string{"system:masters"} }), "subject"},
		{"with an address", clientCSR(t, "system:bootstrap:abcdef", func(r *x509.CertificateRequest) { r.IPAddresses = []net.IP{net.ParseIP("198.51.100.12")} }), "names"},
		{"with a URI", clientCSR(t, "system:bootstrap:abcdef", func(r *x509.CertificateRequest) { r.URIs = []*url.URL{{Scheme: "spiffe", Host: "x"}} }), "names"},
		{"key encipherment too", func() *certificatesv1.CertificateSigningRequest {
			c := clientCSR(t, "system:bootstrap:abcdef", nil)
			c.Spec.Usages = append(c.Spec.Usages, certificatesv1.UsageKeyEncipherment)
			return c
		}(), ""},
		{"garbage", func() *certificatesv1.CertificateSigningRequest {
			c := clientCSR(t, "system:bootstrap:abcdef", nil)
			c.Spec.Request = []byte("x")
			return c
		}(), "PEM"},
		{"unparseable", func() *certificatesv1.CertificateSigningRequest {
			c := clientCSR(t, "system:bootstrap:abcdef", nil)
			c.Spec.Request = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: []byte("x")})
			return c
		}(), "unparseable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := nodeClientRequestProblem(tc.csr, "node-a", "abcdef")
			if tc.want == "" && got != "" {
				t.Errorf("refused: %s", got)
			}
			if tc.want != "" && !strings.Contains(got, tc.want) {
				t.Errorf("problem = %q, want one with %q", got, tc.want)
			}
		})
	}
}
