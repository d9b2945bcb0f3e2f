package virtualcluster

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	promtestutil "github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/controlplane"
	"github.com/nestdev/nest/internal/pki"
	"github.com/nestdev/nest/internal/vcops"
)

// pkiOf is the PKI Secret's data of the VirtualCluster n, once it exists.
func pkiOf(t *testing.T, n controlplane.Names) map[string][]byte {
	t.Helper()
	var secret corev1.Secret
	eventually(t, "the PKI Secret", func() error {
		return k8sClient.Get(context.Background(), types.NamespacedName{Namespace: n.Namespace, Name: n.PKISecret()}, &secret)
	})
	return secret.Data
}

// spec.certificates.leafLifetime is the lifetime of the tenant's leaves,
// and status.certificates.notAfter the first to expire.
func TestLeafLifetimeIsHonoured(t *testing.T) {
	ensureNode(t)
	ns := newNamespace(t)
	vc := &nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: "short-leaves", Namespace: ns},
		Spec: nestv1.VirtualClusterSpec{Certificates: nestv1.CertificatesSpec{LeafLifetime: &metav1.Duration{Duration: 2 * time.Hour}}}}
	if err := k8sClient.Create(context.Background(), vc); err != nil {
		t.Fatal(err)
	}
	n := controlplane.Names{VirtualCluster: vc.Name, Namespace: ns}
	data := pkiOf(t, n)
	cert, err := pki.ParseCertificate(data[controlplane.APIServerCert])
	if err != nil {
		t.Fatal(err)
	}
	if life := cert.NotAfter.Sub(pki.IssuedAt(cert)); life != 2*time.Hour {
		t.Errorf("the API server's certificate lives %s, want the 2h asked for", life)
	}
	eventually(t, "the API server certificate's expiry in nest_certificate_expiry_seconds", func() error {
		got := promtestutil.ToFloat64(certificateExpiry.WithLabelValues(ns+"/"+vc.Name, n.PKISecret(), controlplane.APIServerCert))
		if got != float64(cert.NotAfter.Unix()) {
			return fmt.Errorf("%v, want %d", got, cert.NotAfter.Unix())
		}
		return nil
	})
	eventually(t, "status.certificates.notAfter", func() error {
		st := getVC(t, ns, vc.Name).Status.Certificates
		if st == nil || st.NotAfter == nil || st.NotAfter.After(time.Now().Add(2*time.Hour)) {
			return fmt.Errorf("status.certificates %+v", st)
		}
		return nil
	})
}

// nest certs rotate's request is served once: every leaf of the PKI Secret
// and the kubeconfigs is issued anew from the same CAs, status says when,
// and a second look issues nothing more.
func TestARotationIssuesEveryLeafAnewOnce(t *testing.T) {
	n := newCluster(t, "rotated")
	ctx := context.Background()
	before := pkiOf(t, n)
	var admin corev1.Secret
	eventually(t, "the admin kubeconfig", func() error {
		return k8sClient.Get(ctx, types.NamespacedName{Namespace: n.Namespace, Name: n.KubeconfigSecret()}, &admin)
	})
	key := types.NamespacedName{Namespace: n.Namespace, Name: n.VirtualCluster}
	// Certificates keep whole seconds, and a leaf issued in the second of a
	// rotation counts as new: rotate in a later second than the leaves'.
	issued, err := pki.ParseCertificate(before[controlplane.APIServerCert])
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "a second after the leaves were issued", func() error {
		if !time.Now().Truncate(time.Second).After(pki.IssuedAt(issued)) {
			return fmt.Errorf("still the second the leaves were issued in")
		}
		return nil
	})
	request, err := vcops.RequestRotation(ctx, k8sClient, key, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var served time.Time
	eventually(t, "the rotation served", func() error {
		st := getVC(t, n.Namespace, n.VirtualCluster).Status.Certificates
		if st == nil || st.LastRotation == nil || st.LastRotation.Request != request {
			return fmt.Errorf("status.certificates %+v", st)
		}
		served = st.LastRotation.Time.Time
		return nil
	})
	eventually(t, "every leaf issued anew", func() error {
		after := pkiOf(t, n)
		for k, v := range before {
			cert, err := pki.ParseCertificate(v)
			if err != nil {
				continue
			}
			same := bytes.Equal(after[k], v)
			if cert.IsCA != same {
				return fmt.Errorf("%s: CA %v, unchanged %v", k, cert.IsCA, same)
			}
		}
		if !bytes.Equal(after[controlplane.ServiceAccountKey], before[controlplane.ServiceAccountKey]) {
			return fmt.Errorf("the service-account key changed")
		}
		var now corev1.Secret
		if err := k8sClient.Get(ctx, types.NamespacedName{Namespace: n.Namespace, Name: n.KubeconfigSecret()}, &now); err != nil {
			return err
		}
		if bytes.Equal(now.Data[controlplane.KubeconfigKey], admin.Data[controlplane.KubeconfigKey]) {
			return fmt.Errorf("the admin kubeconfig was not issued anew")
		}
		return nil
	})
	if time.Since(served) > time.Minute {
		t.Errorf("served at %s, long before now", served)
	}
	// Served once: the next reconciles leave the new leaves alone.
	rotated := pkiOf(t, n)
	updateVC(t, n.Namespace, n.VirtualCluster, func(vc *nestv1.VirtualCluster) { vc.Labels = map[string]string{"touched": "yes"} })
	eventually(t, "a reconcile after the rotation", func() error {
		if getVC(t, n.Namespace, n.VirtualCluster).Status.ObservedGeneration == 0 {
			return fmt.Errorf("not observed")
		}
		return nil
	})
	if got := pkiOf(t, n); !bytes.Equal(got[controlplane.APIServerCert], rotated[controlplane.APIServerCert]) {
		t.Error("the API server's certificate was issued again after the rotation was served")
	}
}

// The API refuses lifetimes it could not honour, naming the field.
func TestCertificateLifetimesAreValidated(t *testing.T) {
	for _, tc := range []struct {
		spec nestv1.CertificatesSpec
		want string
	}{
		{nestv1.CertificatesSpec{LeafLifetime: &metav1.Duration{Duration: time.Minute}}, "certificates.leafLifetime must be from 5m"},
		{nestv1.CertificatesSpec{LeafLifetime: &metav1.Duration{Duration: time.Hour}, RenewBefore: &metav1.Duration{Duration: 2 * time.Hour}}, "renewBefore must be shorter"},
		{nestv1.CertificatesSpec{RenewBefore: &metav1.Duration{Duration: time.Second}}, "renewBefore must be at least 1m"},
	} {
		vc := &nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: "bad-certs", Namespace: newNamespace(t)}, Spec: nestv1.VirtualClusterSpec{Certificates: tc.spec}}
		if err := k8sClient.Create(context.Background(), vc); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("spec.certificates %+v: %v, want refused naming %q", tc.spec, err, tc.want)
		}
	}
}
