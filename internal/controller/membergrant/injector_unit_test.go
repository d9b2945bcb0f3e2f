package membergrant

import (
	"bytes"
	"testing"
	"time"

	"github.com/nestdev/nest/internal/controlplane"
	"github.com/nestdev/nest/internal/pki"
	"github.com/nestdev/nest/internal/syncer/contract"
)

// The injector's certificate follows the tenant's renewal: issued for its
// leaf lifetime, kept until due, issued anew by a rotation, and its
// renewal time is the tenant's renewal point.
func TestInjectorCertFollowsTheTenantsRenewal(t *testing.T) {
	const ns = "tenant-ns"
	r := controlplane.Renewal{LeafLifetime: time.Hour, RenewBefore: 10 * time.Minute}
	cert, key, renewAt, err := injectorCert(nil, ns, r)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := pki.ParseCertificate(cert)
	if err != nil {
		t.Fatal(err)
	}
	if life := leaf.NotAfter.Sub(pki.IssuedAt(leaf)); life > time.Hour || life < time.Hour-time.Minute {
		t.Errorf("the injector's certificate lives %s, want the tenant's 1h", life)
	}
	if want := leaf.NotAfter.Add(-10 * time.Minute); !renewAt.Equal(want) {
		t.Errorf("renewed at %s, want %s (10m before its end)", renewAt, want)
	}
	old := &contract.MemberPlacement{Namespace: ns, InjectorCert: cert, InjectorKey: key}
	kept, _, _, err := injectorCert(old, ns, r)
	if err != nil || !bytes.Equal(kept, cert) {
		t.Errorf("a certificate not due was issued anew: %v", err)
	}
	late := r
	late.Now = renewAt.Add(time.Second)
	if renewed, _, _, err := injectorCert(old, ns, late); err != nil || bytes.Equal(renewed, cert) {
		t.Errorf("a certificate past its renewal point was kept: %v", err)
	}
	rotated := r
	// A rotation a second after its issue, seen a second later.
	rotated.IssuedAfter, rotated.Now = pki.IssuedAt(leaf).Add(time.Second), pki.IssuedAt(leaf).Add(2*time.Second)
	if renewed, _, _, err := injectorCert(old, ns, rotated); err != nil || bytes.Equal(renewed, cert) {
		t.Errorf("a rotation kept the injector's certificate: %v", err)
	}
	if other, _, _, err := injectorCert(old, "elsewhere", r); err != nil || bytes.Equal(other, cert) {
		t.Errorf("another namespace kept the certificate: %v", err)
	}
}
