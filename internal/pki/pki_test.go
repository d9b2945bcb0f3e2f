package pki

import (
	"crypto/x509"
	"net"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
)

func TestIssueVerifiesAgainstCA(t *testing.T) {
	ca, err := NewCA("test-ca")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		spec  CertSpec
		usage x509.ExtKeyUsage
	}{
		{"server", CertSpec{CommonName: "kube-apiserver", DNSNames: []string{"kubernetes.default.svc"}, IPs: []net.IP{net.IPv4(10, 96, 0, 1)}, Usage: ServerAuth}, x509.ExtKeyUsageServerAuth},
		{"client", CertSpec{CommonName: "system:node:n1", Organizations: []string{"system:nodes"}, Usage: ClientAuth}, x509.ExtKeyUsageClientAuth},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pair, err := ca.Issue(tt.spec)
			if err != nil {
				t.Fatal(err)
			}
			cert, err := ParseCertificate(pair.CertPEM)
			if err != nil {
				t.Fatal(err)
			}
			roots := x509.NewCertPool()
			roots.AddCert(ca.Certificate())
			opts := x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{tt.usage}}
			if len(tt.spec.DNSNames) > 0 {
				opts.DNSName = tt.spec.DNSNames[0]
			}
			if _, err := cert.Verify(opts); err != nil {
				t.Fatalf("verify: %v", err)
			}
			if cert.Subject.CommonName != tt.spec.CommonName {
				t.Errorf("CN = %q, want %q", cert.Subject.CommonName, tt.spec.CommonName)
			}
			if len(tt.spec.Organizations) > 0 && cert.Subject.Organization[0] != tt.spec.Organizations[0] {
				t.Errorf("O = %v, want %v", cert.Subject.Organization, tt.spec.Organizations)
			}
			for _, ip := range tt.spec.IPs {
				if err := cert.VerifyHostname(ip.String()); err != nil {
					t.Errorf("IP SAN %s: %v", ip, err)
				}
			}
			if got := cert.NotAfter.Sub(cert.NotBefore); got < LeafValidity || got > LeafValidity+time.Hour {
				t.Errorf("validity = %s, want about %s", got, LeafValidity)
			}
			if _, err := ParsePrivateKey(pair.KeyPEM); err != nil {
				t.Errorf("key: %v", err)
			}
		})
	}
}

func TestIssueRejectsBadSpecs(t *testing.T) {
	ca, err := NewCA("test-ca")
	if err != nil {
		t.Fatal(err)
	}
	for name, spec := range map[string]CertSpec{
		"no common name": {Usage: ClientAuth},
		"no usage":       {CommonName: "x"},
	} {
		if _, err := ca.Issue(spec); err == nil {
			t.Errorf("%s: Issue succeeded, want an error", name)
		}
	}
	if _, err := NewCA(""); err == nil {
		t.Error("NewCA with no name succeeded")
	}
}

func TestLoadCARoundTrip(t *testing.T) {
	ca, err := NewCA("round-trip")
	if err != nil {
		t.Fatal(err)
	}
	loaded, err := LoadCA(ca.KeyPair)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := loaded.Issue(CertSpec{CommonName: "leaf", Usage: ClientAuth})
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := ParseCertificate(pair.CertPEM)
	if err := cert.CheckSignatureFrom(ca.Certificate()); err != nil {
		t.Fatalf("leaf from the loaded CA does not verify against the original: %v", err)
	}
	leafAsCA := KeyPair{CertPEM: pair.CertPEM, KeyPEM: pair.KeyPEM}
	if _, err := LoadCA(leafAsCA); err == nil {
		t.Error("LoadCA accepted a leaf certificate")
	}
}

func TestServiceAccountKey(t *testing.T) {
	priv, pub, err := NewServiceAccountKey()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ParsePrivateKey(priv); err != nil {
		t.Fatal(err)
	}
	if len(pub) == 0 {
		t.Fatal("empty public key")
	}
}

func TestKubeconfigBytes(t *testing.T) {
	ca, _ := NewCA("ca")
	client, _ := ca.Issue(CertSpec{CommonName: "admin", Organizations: []string{"system:masters"}, Usage: ClientAuth})
	data, err := Kubeconfig{ClusterName: "c1", Server: "https://198.51.100.10:6443", CACertPEM: ca.CertPEM, User: "admin", Client: client}.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(data)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "https://198.51.100.10:6443" || string(cfg.CAData) != string(ca.CertPEM) || string(cfg.CertData) != string(client.CertPEM) {
		t.Fatalf("round trip lost fields: host %q", cfg.Host)
	}
	if _, err := (Kubeconfig{ClusterName: "c1", User: "admin"}).Bytes(); err == nil {
		t.Error("kubeconfig without server accepted")
	}
}

func TestIssueNeverOutlivesTheCA(t *testing.T) {
	ca, err := NewCA("test-ca")
	if err != nil {
		t.Fatal(err)
	}
	pair, err := ca.Issue(CertSpec{CommonName: "long", Usage: ClientAuth, Validity: 2 * CAValidity})
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ParseCertificate(pair.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	if !cert.NotAfter.Equal(ca.Certificate().NotAfter) {
		t.Errorf("leaf expires %s, CA %s: want the leaf cut to the CA's expiry", cert.NotAfter, ca.Certificate().NotAfter)
	}
}

// LoadCA finds the CA of a bundle by its key, in any order, and keeps the
// whole bundle; a bundle without the key's certificate is refused.
func TestLoadCAFromABundle(t *testing.T) {
	a, err := NewCA("a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewCAFor("b", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if life := b.Certificate().NotAfter.Sub(IssuedAt(b.Certificate())); life != time.Hour {
		t.Errorf("NewCAFor(1h) lives %s", life)
	}
	for _, bundle := range [][]byte{append(append([]byte{}, a.CertPEM...), b.CertPEM...), append(append([]byte{}, b.CertPEM...), a.CertPEM...)} {
		ca, err := LoadCA(KeyPair{CertPEM: bundle, KeyPEM: b.KeyPEM})
		if err != nil || ca.Certificate().Subject.CommonName != "b" || string(ca.CertPEM) != string(bundle) || string(ca.CertificatePEM()) != string(b.CertPEM) {
			t.Errorf("LoadCA of a bundle with b's key: %v", err)
		}
	}
	if _, err := LoadCA(KeyPair{CertPEM: a.CertPEM, KeyPEM: b.KeyPEM}); err == nil {
		t.Error("a bundle without the key's certificate was loaded")
	}
}

// A leaf of the new CA verifies for a client that trusts only the old CA
// through the new CA cross-signed by the old, and not without it.
func TestCrossSign(t *testing.T) {
	old, err := NewCA("old")
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := NewCA("new")
	if err != nil {
		t.Fatal(err)
	}
	cross, err := old.CrossSign(fresh.Certificate())
	if err != nil {
		t.Fatal(err)
	}
	pair, err := fresh.Issue(CertSpec{CommonName: "api", DNSNames: []string{"api"}, Usage: ServerAuth})
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := ParseCertificate(pair.CertPEM)
	roots := x509.NewCertPool()
	roots.AddCert(old.Certificate())
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "api"}); err == nil {
		t.Fatal("the old CA alone verified the new CA's leaf")
	}
	inter := x509.NewCertPool()
	crossCert, _ := ParseCertificate(cross)
	inter.AddCert(crossCert)
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, DNSName: "api"}); err != nil {
		t.Errorf("through the cross-signed CA: %v", err)
	}
	keys, err := ParsePublicKeys(nil)
	if err == nil || len(keys) != 0 {
		t.Errorf("no public key parsed from nothing: %v", err)
	}
}

func TestBundleHashIdentifiesTheCertificatesInOrder(t *testing.T) {
	a, err := NewCA("a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewCA("b")
	if err != nil {
		t.Fatal(err)
	}
	ab := append(a.CertificatePEM(), b.CertificatePEM()...)
	ba := append(b.CertificatePEM(), a.CertificatePEM()...)
	spaced := append(append([]byte("# the bundle\n"), a.CertificatePEM()...), append([]byte("\n\n"), b.CertificatePEM()...)...)
	if BundleHash(ab) == "" || BundleHash(ab) != BundleHash(spaced) {
		t.Errorf("the same certificates hash %q and %q; want one non-empty hash", BundleHash(ab), BundleHash(spaced))
	}
	if BundleHash(ab) == BundleHash(ba) || BundleHash(ab) == BundleHash(a.CertificatePEM()) {
		t.Error("a bundle hashes the same as its reverse or as its first certificate alone")
	}
	if h := BundleHash([]byte("not a certificate")); h != "" {
		t.Errorf("no certificate hashes to %q, want empty", h)
	}
}
