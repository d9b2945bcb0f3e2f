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
	"k8s.io/utils/ptr"
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

// leavesOf are the leaf certificates of the VirtualCluster n's Secrets
// (the PKI Secret and the kubeconfigs), by Secret and key.
func leavesOf(n controlplane.Names) (map[string]controlplane.Certificate, error) {
	var secrets []corev1.Secret
	for _, name := range n.Secrets() {
		var s corev1.Secret
		if err := k8sClient.Get(context.Background(), types.NamespacedName{Namespace: n.Namespace, Name: name}, &s); err != nil {
			return nil, err
		}
		secrets = append(secrets, s)
	}
	certs, err := controlplane.Certificates(secrets, time.Now())
	if err != nil {
		return nil, err
	}
	out := map[string]controlplane.Certificate{}
	for _, c := range certs {
		if !c.CA {
			out[c.Secret+"/"+c.Key] = c
		}
	}
	return out, nil
}

// rotate asks for a rotation of n in a later second than its leaves were
// issued in (certificates keep whole seconds, and a leaf issued in the
// second of a rotation counts as new), and waits until it is served and
// every leaf of its Secrets was issued since. It returns the leaves.
func rotate(t *testing.T, n controlplane.Names, before map[string]controlplane.Certificate) map[string]controlplane.Certificate {
	t.Helper()
	ctx := context.Background()
	var newest time.Time
	for _, c := range before {
		if c.IssuedAt.After(newest) {
			newest = c.IssuedAt
		}
	}
	eventually(t, "a second after the leaves were issued", func() error {
		if !time.Now().Truncate(time.Second).After(newest) {
			return fmt.Errorf("still the second the leaves were issued in")
		}
		return nil
	})
	key := types.NamespacedName{Namespace: n.Namespace, Name: n.VirtualCluster}
	request, err := vcops.RequestRotation(ctx, k8sClient, key, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var after map[string]controlplane.Certificate
	eventually(t, "the rotation served and every leaf issued since", func() error {
		st := getVC(t, n.Namespace, n.VirtualCluster).Status.Certificates
		if st == nil || st.LastRotation == nil || st.LastRotation.Request != request {
			return fmt.Errorf("status.certificates %+v", st)
		}
		if after, err = leavesOf(n); err != nil {
			return err
		}
		if len(after) != len(before) {
			return fmt.Errorf("%d leaves, want %d", len(after), len(before))
		}
		for k, c := range after {
			if c.IssuedAt.Before(st.LastRotation.Time.Time) || c.IssuedAt.Equal(before[k].IssuedAt) {
				return fmt.Errorf("%s issued %s, the rotation at %s", k, c.IssuedAt, st.LastRotation.Time)
			}
		}
		return nil
	})
	return after
}

// nest certs rotate's requests are each served once: every leaf of the
// PKI Secret and the kubeconfigs is issued anew from the same CAs, twice
// for two rotations, and a reconcile after a rotation issues nothing more.
func TestRotationsIssueEveryLeafAnewOnceEach(t *testing.T) {
	n := newCluster(t, "rotated")
	pkiBefore := pkiOf(t, n)
	var leaves map[string]controlplane.Certificate
	eventually(t, "the kubeconfigs", func() error {
		var err error
		if leaves, err = leavesOf(n); err != nil {
			return err
		}
		if len(leaves) < 8 {
			return fmt.Errorf("%d leaves", len(leaves))
		}
		return nil
	})
	leaves = rotate(t, n, leaves)
	leaves = rotate(t, n, leaves)
	pkiAfter := pkiOf(t, n)
	for _, k := range []string{controlplane.CACert, controlplane.CAKey, controlplane.ServiceAccountKey} {
		if !bytes.Equal(pkiAfter[k], pkiBefore[k]) {
			t.Errorf("%s changed: a rotation of leaves keeps the authorities", k)
		}
	}
	// A reconcile of a later generation issues nothing more.
	reconcileNextGeneration(t, n, 123)
	now, err := leavesOf(n)
	if err != nil {
		t.Fatal(err)
	}
	for k, c := range now {
		if !c.IssuedAt.Equal(leaves[k].IssuedAt) {
			t.Errorf("%s issued again (%s, after %s) once the rotation was over", k, c.IssuedAt, leaves[k].IssuedAt)
		}
	}
}

// reconcileNextGeneration changes n's spec (its ConfigMap budget to
// budget) and waits until the new generation is reconciled.
func reconcileNextGeneration(t *testing.T, n controlplane.Names, budget int32) {
	t.Helper()
	updateVC(t, n.Namespace, n.VirtualCluster, func(vc *nestv1.VirtualCluster) {
		vc.Spec.VirtualNode.ObjectBudget.ConfigMaps = ptr.To(budget)
	})
	want := getVC(t, n.Namespace, n.VirtualCluster).Generation
	eventually(t, "the next generation reconciled", func() error {
		if got := getVC(t, n.Namespace, n.VirtualCluster).Status.ObservedGeneration; got < want {
			return fmt.Errorf("observed generation %d, want %d", got, want)
		}
		return nil
	})
}

// The API refuses lifetimes it could not honour, naming the field.
func TestCertificateLifetimesAreValidated(t *testing.T) {
	for _, tc := range []struct {
		spec nestv1.CertificatesSpec
		want string
	}{
		{nestv1.CertificatesSpec{LeafLifetime: &metav1.Duration{Duration: time.Minute}}, "certificates.leafLifetime must be from 5m"},
		{nestv1.CertificatesSpec{LeafLifetime: &metav1.Duration{Duration: time.Hour}, RenewBefore: &metav1.Duration{Duration: 2 * time.Hour}}, "renewBefore must be at most half"},
		{nestv1.CertificatesSpec{RenewBefore: &metav1.Duration{Duration: time.Second}}, "renewBefore must be at least 1m"},
		{nestv1.CertificatesSpec{CALifetime: &metav1.Duration{Duration: time.Minute}}, "certificates.caLifetime must be from 1h"},
	} {
		vc := &nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: "bad-certs", Namespace: newNamespace(t)}, Spec: nestv1.VirtualClusterSpec{Certificates: tc.spec}}
		if err := k8sClient.Create(context.Background(), vc); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("spec.certificates %+v: %v, want refused naming %q", tc.spec, err, tc.want)
		}
	}
}
