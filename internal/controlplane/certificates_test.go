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
	pkiData, _, err := ReconcilePKI(nil, names, endpoints())
	if err != nil {
		t.Fatal(err)
	}
	kubeconfigs, _, err := ReconcileAdminKubeconfig(nil, pkiData, names, "https://198.51.100.10:31443")
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

func TestCertificatesMarksExpiringLeavesAndLeavesOutlivingTheirCA(t *testing.T) {
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
	caCert, _ := pki.ParseCertificate(pkiData[EtcdCACert])
	// As of a day before the CA expires, the CA itself is expiring; and a
	// leaf issued for longer than the CA has left outlives it.
	now := caCert.NotAfter.Add(-24 * time.Hour)
	long, err := etcdCA.Issue(pki.CertSpec{CommonName: "etcd-server", Usage: pki.ServerAuth, Validity: time.Until(caCert.NotAfter) + 48*time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	pkiData[EtcdServerCert] = long.CertPEM
	certs, err := Certificates(secrets, now)
	if err != nil {
		t.Fatal(err)
	}
	byKey := map[string]Certificate{}
	for _, c := range certs {
		byKey[c.Key] = c
	}
	if !byKey[EtcdCACert].Expiring || !byKey[EtcdClientCert].Expiring {
		t.Errorf("etcd CA %+v and the one-day client certificate %+v are not marked expiring", byKey[EtcdCACert], byKey[EtcdClientCert])
	}
	if !byKey[EtcdServerCert].OutlivesIssuer || byKey[EtcdClientCert].OutlivesIssuer {
		t.Errorf("outlives its CA: etcd server %v (want true), etcd client %v (want false)", byKey[EtcdServerCert].OutlivesIssuer, byKey[EtcdClientCert].OutlivesIssuer)
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
