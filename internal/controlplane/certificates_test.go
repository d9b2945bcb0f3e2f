package controlplane

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nestdev/nest/internal/pki"
)

// tenantSecrets are the PKI and admin kubeconfig Secrets of a new tenant.
func tenantSecrets(t *testing.T) (pkiData map[string][]byte, secrets []corev1.Secret) {
	t.Helper()
	pkiData, _, err := ReconcilePKI(nil, names, endpoints(), Renewal{})
	if err != nil {
		t.Fatal(err)
	}
	kubeconfigs, _, err := ReconcileAdminKubeconfig(nil, pkiData, names, "https://198.51.100.10:31443", Renewal{})
	if err != nil {
		t.Fatal(err)
	}
	return pkiData, []corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Name: names.PKISecret(), Namespace: names.Namespace}, Data: pkiData},
		{ObjectMeta: metav1.ObjectMeta{Name: names.KubeconfigSecret(), Namespace: names.Namespace}, Data: kubeconfigs},
	}
}

func TestCertificatesListsEveryCertificateAndKubeconfig(t *testing.T) {
	pkiData, secrets := tenantSecrets(t)
	certs, err := Certificates(secrets, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	wantCRTs := 0
	for key := range pkiData {
		if strings.HasSuffix(key, ".crt") {
			wantCRTs++
		}
	}
	// Every .crt of the PKI Secret, and the admin client certificate of each
	// of the two kubeconfigs.
	if len(certs) != wantCRTs+2 {
		t.Fatalf("%d certificates, want %d: %+v", len(certs), wantCRTs+2, certs)
	}
	seen := map[string]Certificate{}
	for i, c := range certs {
		seen[c.Secret+"/"+c.Key] = c
		if i > 0 && c.NotAfter.Before(certs[i-1].NotAfter) {
			t.Errorf("not sorted by expiry at %d", i)
		}
		if c.Expiring || c.OutlivesIssuer {
			t.Errorf("a new tenant's %s/%s is marked expiring %v, outliving its CA %v", c.Secret, c.Key, c.Expiring, c.OutlivesIssuer)
		}
	}
	if ca := seen[names.PKISecret()+"/"+CACert]; !ca.CA || ca.Subject == "" {
		t.Errorf("cluster CA %+v", ca)
	}
	if admin := seen[names.KubeconfigSecret()+"/"+KubeconfigKey+"/"+AdminUser]; admin.Subject != AdminUser || admin.CA {
		t.Errorf("admin client certificate %+v (have %v)", admin, certs)
	}
}

func TestCertificatesMarksExpiringLeaves(t *testing.T) {
	pkiData, secrets := tenantSecrets(t)
	etcdCA, err := pki.LoadCA(pki.KeyPair{CertPEM: pkiData[EtcdCACert], KeyPEM: pkiData[EtcdCAKey]})
	if err != nil {
		t.Fatal(err)
	}
	short, err := etcdCA.Issue(pki.CertSpec{CommonName: "kube-apiserver-etcd-client", Usage: pki.ClientAuth, Validity: 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	pkiData[EtcdClientCert] = short.CertPEM
	certs, err := Certificates(secrets, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range certs {
		if want := c.Key == EtcdClientCert; c.Expiring != want {
			t.Errorf("%s expiring %v, want %v", c.Key, c.Expiring, want)
		}
	}
	// As of a day before the CAs expire, they and every leaf are expiring.
	caCert, _ := pki.ParseCertificate(pkiData[EtcdCACert])
	certs, _ = Certificates(secrets, caCert.NotAfter.Add(-24*time.Hour))
	for _, c := range certs {
		if !c.Expiring {
			t.Errorf("%s not expiring a day before the CA does", c.Key)
		}
	}
}

// A leaf that outlives the CA that signed it: made by another issuer than
// Nest's (pki.CA.Issue cuts leaves to the CA's expiry), or kept from
// before a CA was replaced.
func TestCertificatesMarksLeavesOutlivingTheirCA(t *testing.T) {
	now := time.Now()
	certs := []Certificate{
		{Key: "ca.crt", Subject: "cluster-ca", Issuer: "cluster-ca", CA: true, NotAfter: now.AddDate(1, 0, 0)},
		{Key: "outlives.crt", Subject: "a", Issuer: "cluster-ca", NotAfter: now.AddDate(2, 0, 0)},
		{Key: "within.crt", Subject: "b", Issuer: "cluster-ca", NotAfter: now.AddDate(0, 6, 0)},
		{Key: "unknown-issuer.crt", Subject: "c", Issuer: "elsewhere", NotAfter: now.AddDate(5, 0, 0)},
	}
	markIssuers(certs, now)
	for _, c := range certs {
		if want := c.Key == "outlives.crt"; c.OutlivesIssuer != want {
			t.Errorf("%s outlives its CA %v, want %v", c.Key, c.OutlivesIssuer, want)
		}
	}
}

func TestCertificatesNamesAKeyThatHoldsNoCertificate(t *testing.T) {
	_, secrets := tenantSecrets(t)
	secrets[0].Data[APIServerCert] = []byte("not a certificate")
	_, err := Certificates(secrets, time.Now())
	if err == nil || !strings.Contains(err.Error(), names.PKISecret()) || !strings.Contains(err.Error(), APIServerCert) {
		t.Errorf("err = %v, want the Secret and key named", err)
	}
}

// A clone starts from the tenant's authorities and service-account key
// alone: no leaf of the original goes with them, and ReconcilePKI issues
// the clone's leaves from the same authorities.
func TestAuthoritiesOfKeepsNoLeaf(t *testing.T) {
	n := Names{VirtualCluster: "alpha", Namespace: "vc-alpha"}
	e := endpoints()
	data, _, err := ReconcilePKI(nil, n, e, Renewal{})
	if err != nil {
		t.Fatal(err)
	}
	kept := AuthoritiesOf(data)
	for _, k := range []string{CACert, CAKey, EtcdCACert, EtcdCAKey, FrontProxyCACert, FrontProxyCAKey, KubeletClientCACert, KubeletClientCAKey, ServiceAccountKey, ServiceAccountPub} {
		if string(kept[k]) != string(data[k]) {
			t.Errorf("%s not kept as it was", k)
		}
	}
	for _, k := range []string{APIServerCert, APIServerKey, EtcdClientKey, EtcdPeerKey, FrontProxyClientKey} {
		if _, ok := kept[k]; ok {
			t.Errorf("leaf %s kept for a clone", k)
		}
	}
	clone, changed, err := ReconcilePKI(kept, Names{VirtualCluster: "beta", Namespace: "vc-beta"}, e, Renewal{})
	if err != nil || !changed {
		t.Fatalf("ReconcilePKI of the clone: changed %v, %v", changed, err)
	}
	if string(clone[CACert]) != string(data[CACert]) || string(clone[APIServerCert]) == string(data[APIServerCert]) {
		t.Error("the clone does not keep the CA, or keeps the original's serving certificate")
	}
}
