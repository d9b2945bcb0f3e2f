package controlplane

import (
	"bytes"
	"crypto/x509"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/pki"
)

// pool is a CertPool of every certificate of the PEM bundles.
func pool(t *testing.T, bundles ...[]byte) *x509.CertPool {
	t.Helper()
	p := x509.NewCertPool()
	for _, b := range bundles {
		if !p.AppendCertsFromPEM(b) {
			t.Fatalf("no certificate in %q", b)
		}
	}
	return p
}

// verifiesServing reports whether a client trusting roots verifies the API
// server's certificate chain as the API server serves it.
func verifiesServing(t *testing.T, data map[string][]byte, roots *x509.CertPool) bool {
	t.Helper()
	chain, err := pki.ParseCertificates(data[APIServerCert])
	if err != nil {
		t.Fatal(err)
	}
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	_, err = chain[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, DNSName: names.Service()})
	return err == nil
}

// clientAccepted reports whether the API server, trusting data's cluster
// CA bundle, accepts the kubeconfig's client certificate.
func clientAccepted(t *testing.T, kubeconfig []byte, data map[string][]byte) bool {
	t.Helper()
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := pki.ParseCertificate(cfg.CertData)
	if err != nil {
		t.Fatal(err)
	}
	_, err = cert.Verify(x509.VerifyOptions{Roots: pool(t, data[CACert]), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	return err == nil
}

// phaseOf reconciles data in phase p of a rotation of every authority and
// checks that a second reconcile in the same phase changes nothing.
func phaseOf(t *testing.T, data map[string][]byte, p nestv1.CARotationPhase) map[string][]byte {
	t.Helper()
	r := Renewal{CARotation: &nestv1.CARotation{Request: "r1", Authorities: nestv1.CANames, Phase: p}}
	out, changed, err := ReconcilePKI(data, names, endpoints(), r)
	if err != nil || !changed {
		t.Fatalf("phase %s: changed %v, %v", p, changed, err)
	}
	if again, changed, err := ReconcilePKI(out, names, endpoints(), r); err != nil || changed || !equalData(again, out) {
		t.Fatalf("phase %s written again: changed %v, %v", p, changed, err)
	}
	// The controller-manager's CSR signer takes one certificate, the
	// one of the signing key.
	if certs, err := pki.ParseCertificates(out[CASignerCert]); err != nil || len(certs) != 1 {
		t.Errorf("phase %s: %s holds %d certificates, want the signer alone: %v", p, CASignerCert, len(certs), err)
	} else if _, err := pki.LoadCA(pki.KeyPair{CertPEM: out[CASignerCert], KeyPEM: out[CAKey]}); err != nil {
		t.Errorf("phase %s: %s is not the CA of %s: %v", p, CASignerCert, CAKey, err)
	}
	return out
}

func equalData(a, b map[string][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !bytes.Equal(b[k], v) {
			return false
		}
	}
	return true
}

func publicKeys(t *testing.T, pemData []byte) int {
	t.Helper()
	keys, err := pki.ParsePublicKeys(pemData)
	if err != nil {
		t.Fatal(err)
	}
	return len(keys)
}

// TestCARotationPhases walks every authority through Trust, Reissue, Grace
// and Retire and checks at each step who trusts whom: a client holding the
// old CA alone verifies the API server until Retire and not after, a
// client holding the new bundle always does, and the old client
// certificate is accepted until Retire.
func TestCARotationPhases(t *testing.T) {
	before, _, err := ReconcilePKI(nil, names, endpoints(), Renewal{})
	if err != nil {
		t.Fatal(err)
	}
	oldKubeconfig, _, err := ReconcileAdminKubeconfig(nil, before, names, "https://198.51.100.10:31443", Renewal{})
	if err != nil {
		t.Fatal(err)
	}
	oldRoots := pool(t, before[CACert])

	trust := phaseOf(t, before, nestv1.CAPhaseTrust)
	for _, a := range rotatables {
		if len(trust[nextKey(a.key)]) == 0 || a.bundleLen(trust) != 2 || !bytes.Equal(trust[a.key], before[a.key]) {
			t.Errorf("Trust, %s: the bundle holds %d, the next key is %d bytes, the old key still signs: %v",
				a.name, a.bundleLen(trust), len(trust[nextKey(a.key)]), bytes.Equal(trust[a.key], before[a.key]))
		}
	}
	if !bytes.Equal(trust[APIServerCert], before[APIServerCert]) || !bytes.Equal(trust[EtcdPeerCert], before[EtcdPeerCert]) {
		t.Error("Trust issued leaves anew: the new CA may not sign before every component trusts it")
	}
	admin, _, err := ReconcileAdminKubeconfig(oldKubeconfig, trust, names, "https://198.51.100.10:31443", Renewal{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg, _ := clientcmd.RESTConfigFromKubeConfig(admin[KubeconfigKey]); !bytes.Equal(cfg.CAData, trust[CACert]) {
		t.Error("the kubeconfig written in Trust does not trust the new bundle")
	}

	reissue := phaseOf(t, trust, nestv1.CAPhaseReissue)
	newCA, err := pki.LoadCA(pki.KeyPair{CertPEM: reissue[CACert], KeyPEM: reissue[CAKey]})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(reissue[CAKey], trust[nextKey(CAKey)]) || len(reissue[nextKey(CAKey)]) != 0 {
		t.Error("Reissue: the new key does not sign")
	}
	for _, leaf := range []string{EtcdPeerCert, EtcdServerCert, FrontProxyClientCert, SyncerServingCert} {
		if bytes.Equal(reissue[leaf], before[leaf]) {
			t.Errorf("Reissue left %s as it was", leaf)
		}
	}
	if !SignedBy(reissue[SyncerServingCert], newCA.CertificatePEM()) {
		t.Error("Reissue: nest-syncer's serving certificate is not from the new cluster CA")
	}
	if !verifiesServing(t, reissue, oldRoots) || !verifiesServing(t, reissue, pool(t, newCA.CertificatePEM())) {
		t.Error("Reissue: a client holding the old CA alone, or the new alone, does not verify the API server")
	}
	if !clientAccepted(t, oldKubeconfig[KubeconfigKey], reissue) {
		t.Error("Reissue: the old client certificate is refused before Retire")
	}
	if publicKeys(t, reissue[ServiceAccountPub]) != 2 || !bytes.Equal(reissue[ServiceAccountKey], trust[nextKey(ServiceAccountKey)]) {
		t.Error("Reissue: the new service-account key does not sign, or the old no longer verifies")
	}
	// A phase read late from a cache: Trust again makes no third CA.
	if stale, changed, err := ReconcilePKI(reissue, names, endpoints(), Renewal{CARotation: &nestv1.CARotation{Authorities: nestv1.CANames, Phase: nestv1.CAPhaseTrust}}); err != nil || changed || !equalData(stale, reissue) {
		t.Errorf("Trust after Reissue changed the Secret: %v, %v", changed, err)
	}

	grace, changed, err := ReconcilePKI(reissue, names, endpoints(), Renewal{CARotation: &nestv1.CARotation{Authorities: nestv1.CANames, Phase: nestv1.CAPhaseGrace}})
	if err != nil || changed || !equalData(grace, reissue) {
		t.Errorf("Grace changed the Secret: %v, %v", changed, err)
	}

	retire := phaseOf(t, grace, nestv1.CAPhaseRetire)
	for _, a := range rotatables {
		if a.bundleLen(retire) != 1 {
			t.Errorf("Retire, %s: the bundle holds %d", a.name, a.bundleLen(retire))
		}
	}
	if _, ok := retire[CACrossCert]; ok {
		t.Error("Retire kept the cross-signed CA")
	}
	if verifiesServing(t, retire, oldRoots) || !verifiesServing(t, retire, pool(t, newCA.CertificatePEM())) {
		t.Error("Retire: the old CA alone still verifies the API server, or the new does not")
	}
	if clientAccepted(t, oldKubeconfig[KubeconfigKey], retire) {
		t.Error("Retire: the old client certificate is still accepted")
	}
	if !bytes.Equal(retire[CACert], newCA.CertificatePEM()) {
		t.Error("Retire: the bundle is not the new CA alone")
	}
	if ca, _ := pki.ParseCertificate(retire[CACert]); time.Until(ca.NotAfter) < pki.CAValidity-time.Hour {
		t.Errorf("the new CA expires at %s: not the default lifetime", ca.NotAfter)
	}

	// A snapshot of Trust or Reissue settles on the CAs that signed.
	for phase, data := range map[string]map[string][]byte{"Trust": trust, "Reissue": reissue} {
		settled, err := SettledPKI(data)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range rotatables {
			if a.bundleLen(settled) != 1 || len(settled[nextKey(a.key)]) != 0 {
				t.Errorf("settled %s, %s: the bundle holds %d, a next key of %d bytes", phase, a.name, a.bundleLen(settled), len(settled[nextKey(a.key)]))
			}
		}
		if _, ok := settled[CACrossCert]; ok {
			t.Errorf("settled %s kept the cross-signed CA", phase)
		}
		if _, err := pki.LoadCA(pki.KeyPair{CertPEM: settled[CACert], KeyPEM: data[CAKey]}); err != nil {
			t.Errorf("settled %s: ca.crt is not the CA that signed: %v", phase, err)
		}
		if again, changed, err := ReconcilePKI(settled, names, endpoints(), Renewal{}); err != nil || (phase == "Trust" && changed) || !verifiesServing(t, again, pool(t, settled[CACert])) {
			t.Errorf("settled %s, reconciled: changed %v, %v", phase, changed, err)
		}
	}
}

// A request is one JSON value naming known authorities and a grace in
// bounds; each refusal names what is wrong.
func TestParseCARotationRequest(t *testing.T) {
	for raw, want := range map[string]string{
		`{"request":"a"}{"request":"b"}`:                   "more than one JSON value",
		`{"request":""}`:                                   "request must be 1 to 64 characters",
		`{"request":"a","authorities":["kubelet-client"]}`: `authority "kubelet-client"`,
		`{"request":"a","grace":"-1s"}`:                    "grace -1s must be",
		`{"request":"a","extra":1}`:                        "unknown field",
	} {
		if _, err := ParseCARotationRequest(raw, time.Now()); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error naming %q", raw, err, want)
		}
	}
	rot, err := ParseCARotationRequest(`{"request":"a","authorities":["service-account","cluster"]}`, time.Now())
	if err != nil || fmt.Sprint(rot.Authorities) != "[cluster service-account]" || rot.Grace.Duration != nestv1.DefaultCARotationGrace || rot.Phase != nestv1.CAPhaseTrust {
		t.Errorf("%+v, %v", rot, err)
	}
}

// TestCARotationDue: a CA with a third of its life left is due, a fresh
// one is not, and the service-account key never is.
func TestCARotationDue(t *testing.T) {
	data, _, err := ReconcilePKI(nil, names, endpoints(), Renewal{CALifetime: 3 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if due := CARotationDue(data, time.Now()); len(due) != 0 {
		t.Errorf("fresh CAs are due: %v", due)
	}
	due := CARotationDue(data, time.Now().Add(2*time.Hour+10*time.Minute))
	if want := []nestv1.CAName{nestv1.CACluster, nestv1.CAEtcd, nestv1.CAFrontProxy}; fmt.Sprint(due) != fmt.Sprint(want) {
		t.Errorf("CAs with under a third of their life left: due %v, want %v", due, want)
	}
	// The kubelet-client CA does not rotate: it keeps the default life.
	if ca, err := pki.ParseCertificate(data[KubeletClientCACert]); err != nil || time.Until(ca.NotAfter) < pki.CAValidity-time.Hour {
		t.Errorf("the kubelet-client CA lives to %v with caLifetime 3h: %v", ca.NotAfter, err)
	}
}
