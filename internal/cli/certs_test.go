package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/controlplane"
	"github.com/nestdev/nest/internal/kube"
)

func TestPrintCertificates(t *testing.T) {
	vc := &nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "vc-ml", Name: "ml"}}
	n := controlplane.NamesOf(vc)
	pkiData, _, err := controlplane.ReconcilePKI(nil, n, controlplane.Endpoints{ServiceIP: "10.96.5.5", HostClusterDomain: "cluster.local",
		TenantClusterDomain: "cluster.local", TenantServiceCIDR: "10.96.0.0/16"}, controlplane.Renewal{})
	if err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "vc-ml", Name: n.PKISecret()}, Data: pkiData}
	noPKI := &nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "vc-new", Name: "new"}}
	c := fake.NewClientBuilder().WithScheme(kube.NewScheme()).WithObjects(vc, secret, noPKI).Build()
	ctx := context.Background()

	var out bytes.Buffer
	if err := printCertificates(ctx, c, types.NamespacedName{Namespace: "vc-ml", Name: "ml"}, time.Now(), &out); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if got := strings.Fields(lines[0]); strings.Join(got, " ") != "SECRET KEY SUBJECT ISSUER EXPIRES IN STATUS" {
		t.Errorf("header %q", lines[0])
	}
	crts := 0
	for key := range pkiData {
		if strings.HasSuffix(key, ".crt") {
			crts++
		}
	}
	if len(lines) != 1+crts {
		t.Fatalf("%d lines for %d certificates:\n%s", len(lines), crts, out.String())
	}
	if !strings.Contains(out.String(), controlplane.CACert) || strings.Contains(out.String(), "EXPIRING") {
		t.Errorf("output:\n%s", out.String())
	}

	// Ten years on, everything has expired.
	out.Reset()
	if err := printCertificates(ctx, c, types.NamespacedName{Namespace: "vc-ml", Name: "ml"}, time.Now().AddDate(10, 0, 0), &out); err != nil {
		t.Fatal(err)
	}
	if strings.Count(out.String(), "expired") != crts || strings.Count(out.String(), "EXPIRING") != crts {
		t.Errorf("ten years on, want every certificate expired:\n%s", out.String())
	}

	err = printCertificates(ctx, c, types.NamespacedName{Namespace: "vc-new", Name: "new"}, time.Now(), &out)
	if err == nil || !strings.Contains(err.Error(), "no PKI Secret yet") {
		t.Errorf("a VirtualCluster without its PKI: %v", err)
	}
	err = printCertificates(ctx, c, types.NamespacedName{Namespace: "vc-x", Name: "x"}, time.Now(), &out)
	if err == nil || !strings.Contains(err.Error(), "no VirtualCluster vc-x/x") {
		t.Errorf("missing VirtualCluster: %v", err)
	}
}

func TestCertsCheckCommandRegistered(t *testing.T) {
	cmd, _, err := NewRootCommand().Find([]string{"certs", "check"})
	if err != nil || cmd.Name() != "check" || cmd.Flags().Lookup("namespace") == nil {
		t.Errorf("nest certs check: %v, %v", cmd, err)
	}
}

// nest certs check prints the CA rotation under way with its phase and
// when the old CAs go, else the last one.
func TestPrintCARotation(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	var out bytes.Buffer
	printCARotation(&out, &nestv1.CertificatesStatus{CARotation: &nestv1.CARotation{Request: "r1", Authorities: []nestv1.CAName{nestv1.CACluster, nestv1.CAServiceAccount},
		Phase: nestv1.CAPhaseGrace, PhaseTime: metav1.NewTime(now.Add(-time.Minute)), RetireAfter: &metav1.Time{Time: now.Add(2 * time.Hour)}}}, now)
	if got := out.String(); !strings.Contains(got, "CA rotation r1 of cluster, service-account: phase Grace") || !strings.Contains(got, "retired in 2h0m0s") {
		t.Errorf("under way: %q", got)
	}
	out.Reset()
	printCARotation(&out, &nestv1.CertificatesStatus{LastCARotation: &nestv1.CARotation{Request: "r0", Authorities: []nestv1.CAName{nestv1.CAEtcd}, Phase: nestv1.CAPhaseDone, PhaseTime: metav1.NewTime(now)}}, now)
	if got := out.String(); !strings.Contains(got, "last CA rotation r0 of etcd: done 2026-11-29T12:00:00Z") {
		t.Errorf("the last: %q", got)
	}
	out.Reset()
	printCARotation(&out, nil, now)
	if out.Len() != 0 {
		t.Errorf("no rotation printed %q", out.String())
	}
}
