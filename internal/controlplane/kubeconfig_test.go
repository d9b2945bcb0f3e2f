package controlplane

import (
	"slices"
	"testing"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/nestdev/nest/internal/components"
	"github.com/nestdev/nest/internal/pki"
)

// adminSubject is the user and groups of a kubeconfig's client certificate.
func adminSubject(t *testing.T, kubeconfig []byte) (string, []string) {
	t.Helper()
	user, groups, err := KubeconfigSubject(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	return user, groups
}

// The tenant's administrator is cluster-admin through RBAC, in Nest's group,
// and never in system:masters, which API Priority and Fairness exempts.
func TestAdminCertificateIsInClusterAdminsNotMasters(t *testing.T) {
	pkiData, _, _ := ReconcilePKI(nil, names, endpoints(), Renewal{})
	admin, _, err := ReconcileAdminKubeconfig(nil, pkiData, names, "https://198.51.100.10:30001", Renewal{})
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{KubeconfigKey, KubeconfigInternalKey} {
		user, groups := adminSubject(t, admin[key])
		if user != AdminUser || !slices.Equal(groups, []string{components.ClusterAdminsGroup}) {
			t.Errorf("%s: the admin certificate is %q in %v, want %q in [%s] only", key, user, groups, AdminUser, components.ClusterAdminsGroup)
		}
	}
}

// An admin kubeconfig Nest issued before, in system:masters, is issued anew
// in the administrators' group; the components' stay as they are.
func TestMastersAdminKubeconfigIsReissued(t *testing.T) {
	pkiData, _, _ := ReconcilePKI(nil, names, endpoints(), Renewal{})
	ca, err := pki.LoadCA(pki.KeyPair{CertPEM: pkiData[CACert], KeyPEM: pkiData[CAKey]})
	if err != nil {
		t.Fatal(err)
	}
	const server = "https://198.51.100.10:30001"
	old := map[string][]byte{}
	for key, url := range map[string]string{KubeconfigKey: server, KubeconfigInternalKey: names.InternalServer()} {
		if old[key], err = issueKubeconfig(ca, names.VirtualCluster, url, components.Client(AdminUser, components.MastersGroup), Renewal{}); err != nil {
			t.Fatal(err)
		}
	}
	renewed, changed, err := ReconcileAdminKubeconfig(old, pkiData, names, server, Renewal{})
	if err != nil || !changed {
		t.Fatalf("a system:masters admin kubeconfig was kept: changed %v, %v", changed, err)
	}
	for _, key := range []string{KubeconfigKey, KubeconfigInternalKey} {
		if _, groups := adminSubject(t, renewed[key]); slices.Contains(groups, components.MastersGroup) {
			t.Errorf("%s: the reissued admin certificate is still in %v", key, groups)
		}
	}
	if _, changed, _ := ReconcileAdminKubeconfig(renewed, pkiData, names, server, Renewal{}); changed {
		t.Error("the reissued admin kubeconfig was issued again")
	}

	comp, _, err := ReconcileComponentKubeconfigs(nil, pkiData, names, Renewal{})
	if err != nil {
		t.Fatal(err)
	}
	if _, changed, _ := ReconcileComponentKubeconfigs(comp, pkiData, names, Renewal{}); changed {
		t.Error("component kubeconfigs naming their own users and groups were issued again")
	}
	if user, groups := adminSubject(t, comp[SyncerKubeconfig]); user != SyncerUser || !slices.Equal(groups, []string{components.MastersGroup}) {
		t.Errorf("nest-syncer is %q in %v, want %q in system:masters, exempt from API Priority and Fairness", user, groups, SyncerUser)
	}
}

// nest-manager's own kubeconfig is nest:manager in system:masters, for the
// API server's in-cluster address; it is kept while valid and issued anew
// from a replaced CA.
func TestManagerKubeconfigIsItsOwnAndFollowsTheCA(t *testing.T) {
	pkiData, _, _ := ReconcilePKI(nil, names, endpoints(), Renewal{})
	manager, changed, err := ReconcileManagerKubeconfig(nil, pkiData, names, Renewal{})
	if err != nil || !changed {
		t.Fatalf("issue: changed %v, %v", changed, err)
	}
	if user, groups := adminSubject(t, manager[KubeconfigKey]); user != ManagerUser || !slices.Equal(groups, []string{components.MastersGroup}) {
		t.Errorf("nest-manager is %q in %v, want %q in [%s] only", user, groups, ManagerUser, components.MastersGroup)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(manager[KubeconfigKey])
	if err != nil || cfg.Host != names.InternalServer() {
		t.Errorf("nest-manager's kubeconfig is for %v (%v), want %s", cfg, err, names.InternalServer())
	}
	if _, changed, _ := ReconcileManagerKubeconfig(manager, pkiData, names, Renewal{}); changed {
		t.Error("a valid manager kubeconfig was issued again")
	}

	// An admin certificate in its place, as a hand-edited Secret could hold,
	// is replaced by nest-manager's own.
	admin, _, _ := ReconcileAdminKubeconfig(nil, pkiData, names, "https://198.51.100.10:30001", Renewal{})
	if renewed, changed, _ := ReconcileManagerKubeconfig(map[string][]byte{KubeconfigKey: admin[KubeconfigInternalKey]}, pkiData, names, Renewal{}); !changed {
		t.Error("an admin kubeconfig under the manager's key was kept")
	} else if user, _ := adminSubject(t, renewed[KubeconfigKey]); user != ManagerUser {
		t.Errorf("reissued as %q, want %q", user, ManagerUser)
	}

	replaced, _, _ := ReconcilePKI(map[string][]byte{}, names, endpoints(), Renewal{})
	renewed, changed, err := ReconcileManagerKubeconfig(manager, replaced, names, Renewal{})
	if err != nil || !changed {
		t.Fatalf("a new CA kept the old manager kubeconfig: changed %v, %v", changed, err)
	}
	if cfg, _ := clientcmd.RESTConfigFromKubeConfig(renewed[KubeconfigKey]); !SignedBy(cfg.CertData, replaced[CACert]) {
		t.Error("the reissued manager certificate is not signed by the new CA")
	}
}
