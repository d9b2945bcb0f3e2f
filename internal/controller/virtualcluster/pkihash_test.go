package virtualcluster

import (
	"testing"

	"github.com/nestdev/nest/internal/controlplane"
)

// A serving certificate reissued for a new host node leaves the control-plane
// pod running; any other certificate restarts it.
func TestPKIRestartHashLeavesOutTheServingCertificate(t *testing.T) {
	pki := func(serving, ca string) map[string][]byte {
		return map[string][]byte{
			controlplane.APIServerCert: []byte(serving), controlplane.APIServerKey: []byte(serving + "-key"),
			controlplane.CACert: []byte(ca), controlplane.SyncerServingCert: []byte("syncer"),
		}
	}
	before := pkiRestartHash(pki("names node a", "ca-1"))
	if got := pkiRestartHash(pki("names nodes a and b", "ca-1")); got != before {
		t.Errorf("a reissued serving certificate changes the hash: %s, was %s", got, before)
	}
	if got := pkiRestartHash(pki("names node a", "ca-2")); got == before {
		t.Errorf("a new CA leaves the hash at %s", got)
	}
	withSyncer := pki("names node a", "ca-1")
	withSyncer[controlplane.SyncerServingCert] = []byte("syncer renewed")
	if got := pkiRestartHash(withSyncer); got == before {
		t.Errorf("a renewed syncer certificate leaves the hash at %s", got)
	}
}
