package controlplane

import (
	"bytes"
	"crypto/x509"
	"fmt"
	"slices"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nestdev/nest/internal/components"
	"github.com/nestdev/nest/internal/pki"
)

// Keys of the component kubeconfig Secret, mounted at KubeconfigDir.
const (
	KubeconfigDir               = "/etc/kubernetes/kubeconfig"
	ControllerManagerKubeconfig = "controller-manager.conf"
	SchedulerKubeconfig         = "scheduler.conf"
	// SyncerKubeconfig is nest-syncer's tenant credential. The syncer is part
	// of the control plane, as the controller-manager is, and acts for the
	// virtual node and for every namespace, so it is in system:masters:
	// authorized without RBAC objects the tenant could delete, and exempt
	// from API Priority and Fairness, so a tenant's flood never queues it.
	SyncerKubeconfig = "nest-syncer.conf"
	// AdminUser is the tenant administrator's user name, in
	// components.ClusterAdminsGroup (AdminClient): cluster-admin through
	// RBAC, and held by API Priority and Fairness, where system:masters
	// would be exempt from both.
	AdminUser = "nest-admin"
	// SyncerUser is nest-syncer's user name in the tenant (group
	// system:masters): the one writer of the virtual and member nodes'
	// endpoints (addons.NodeEndpoints) and of the administrators' binding
	// (addons.ClusterAdminsGuard).
	SyncerUser = "nest:syncer"
	// ManagerUser is nest-manager's user name in the tenant (ManagerClient):
	// its own, so the tenant's audit log tells nest-manager's health checks
	// and node promotions from the administrator's requests.
	ManagerUser = "nest:manager"
)

// ManagerClient is nest-manager's client certificate in the tenant:
// ManagerUser in system:masters, as nest-syncer is. nest-manager is the
// control plane's keeper, not the tenant's: its checks and node promotions
// must neither queue behind a tenant flooding its API server (API Priority
// and Fairness exempts system:masters through the mandatory "exempt"
// FlowSchema, which the API server restores) nor depend on RBAC objects the
// tenant could delete. Its credential stays on the host, in
// Names.ManagerKubeconfigSecret, which the tenant never sees.
func ManagerClient() pki.CertSpec { return components.Client(ManagerUser, components.MastersGroup) }

// AdminClient is the tenant administrator's client certificate: AdminUser
// in components.ClusterAdminsGroup, never system:masters.
func AdminClient() pki.CertSpec { return components.Client(AdminUser, components.ClusterAdminsGroup) }

// loopbackServer is where the controller-manager and scheduler reach the API
// server: the same pod.
var loopbackServer = fmt.Sprintf("https://127.0.0.1:%d", Port)

// ReconcileComponentKubeconfigs returns the controller-manager, scheduler and
// nest-syncer kubeconfigs, keeping existing ones whose client certificate the
// current CA signed and is not due (r).
func ReconcileComponentKubeconfigs(existing map[string][]byte, pkiData map[string][]byte, n Names, r Renewal) (map[string][]byte, bool, error) {
	ca, err := pki.LoadCA(pki.KeyPair{CertPEM: pkiData[CACert], KeyPEM: pkiData[CAKey]})
	if err != nil {
		return nil, false, fmt.Errorf("load tenant CA: %w", err)
	}
	out := map[string][]byte{}
	changed := false
	for file, subject := range map[string]pki.CertSpec{
		ControllerManagerKubeconfig: components.ControllerManagerClient(),
		SchedulerKubeconfig:         components.SchedulerClient(),
		SyncerKubeconfig:            components.Client(SyncerUser, components.MastersGroup),
	} {
		if kubeconfigValid(existing[file], ca, loopbackServer, subject, r) {
			out[file] = existing[file]
			continue
		}
		data, err := issueKubeconfig(ca, n.VirtualCluster, loopbackServer, subject, r)
		if err != nil {
			return nil, false, err
		}
		out[file], changed = data, true
	}
	return out, changed, nil
}

// ReconcileAdminKubeconfig returns the tenant admin kubeconfig for server (the
// external endpoint) and its in-cluster variant, keeping existing ones that
// still point at the right server, were signed by the current CA and name
// AdminClient's user and groups, and are not due (r). One that names
// others, such as the system:masters certificates Nest issued before, is
// issued anew; the old certificate stays valid until it expires, as
// nothing revokes a certificate.
func ReconcileAdminKubeconfig(existing map[string][]byte, pkiData map[string][]byte, n Names, server string, r Renewal) (map[string][]byte, bool, error) {
	ca, err := pki.LoadCA(pki.KeyPair{CertPEM: pkiData[CACert], KeyPEM: pkiData[CAKey]})
	if err != nil {
		return nil, false, fmt.Errorf("load tenant CA: %w", err)
	}
	admin := AdminClient()
	if kubeconfigValid(existing[KubeconfigKey], ca, server, admin, r) && kubeconfigValid(existing[KubeconfigInternalKey], ca, n.InternalServer(), admin, r) {
		return existing, false, nil
	}
	admin.Validity = r.LeafLifetime
	client, err := ca.Issue(admin)
	if err != nil {
		return nil, false, err
	}
	out := map[string][]byte{}
	for key, url := range map[string]string{KubeconfigKey: server, KubeconfigInternalKey: n.InternalServer()} {
		data, err := pki.Kubeconfig{ClusterName: n.VirtualCluster, Server: url, CACertPEM: ca.CertPEM, User: AdminUser, Client: client}.Bytes()
		if err != nil {
			return nil, false, err
		}
		out[key] = data
	}
	return out, true, nil
}

// ReconcileManagerKubeconfig returns nest-manager's kubeconfig for the
// tenant API server's in-cluster address (KubeconfigKey), keeping an
// existing one that still points there, was signed by the current CA and
// names ManagerClient's user and groups, and is not due (r).
func ReconcileManagerKubeconfig(existing map[string][]byte, pkiData map[string][]byte, n Names, r Renewal) (map[string][]byte, bool, error) {
	ca, err := pki.LoadCA(pki.KeyPair{CertPEM: pkiData[CACert], KeyPEM: pkiData[CAKey]})
	if err != nil {
		return nil, false, fmt.Errorf("load tenant CA: %w", err)
	}
	if kubeconfigValid(existing[KubeconfigKey], ca, n.InternalServer(), ManagerClient(), r) {
		return existing, false, nil
	}
	data, err := issueKubeconfig(ca, n.VirtualCluster, n.InternalServer(), ManagerClient(), r)
	if err != nil {
		return nil, false, err
	}
	return map[string][]byte{KubeconfigKey: data}, true, nil
}

func issueKubeconfig(ca *pki.CA, cluster, server string, subject pki.CertSpec, r Renewal) ([]byte, error) {
	subject.Usage = pki.ClientAuth
	subject.Validity = r.LeafLifetime
	client, err := ca.Issue(subject)
	if err != nil {
		return nil, err
	}
	return pki.Kubeconfig{ClusterName: cluster, Server: server, CACertPEM: ca.CertPEM, User: subject.CommonName, Client: client}.Bytes()
}

// kubeconfigValid reports whether data is a kubeconfig for server that
// trusts ca's whole bundle and whose client certificate ca signed, for
// subject's user and groups (in any order), and not yet due for renewal
// (r).
func kubeconfigValid(data []byte, ca *pki.CA, server string, subject pki.CertSpec, r Renewal) bool {
	if len(data) == 0 {
		return false
	}
	cfg, cert, err := kubeconfigClient(data)
	if err != nil || r.Due(cert, ca.Certificate()) || cert.Subject.CommonName != subject.CommonName ||
		!slices.Equal(slices.Sorted(slices.Values(cert.Subject.Organization)), slices.Sorted(slices.Values(subject.Organizations))) {
		return false
	}
	return cfg.Host == server && bytes.Equal(cfg.CAData, ca.CertPEM) && cert.CheckSignatureFrom(ca.Certificate()) == nil
}

// KubeconfigSubject is the user (the common name) and the groups (the
// organizations) of a kubeconfig's client certificate, as the API
// server's x509 authenticator reads them. It fails when data is no
// kubeconfig or holds no parsable client certificate.
func KubeconfigSubject(data []byte) (user string, groups []string, err error) {
	_, cert, err := kubeconfigClient(data)
	if err != nil {
		return "", nil, err
	}
	return cert.Subject.CommonName, cert.Subject.Organization, nil
}

// kubeconfigClient parses a kubeconfig and its client certificate.
func kubeconfigClient(data []byte) (*rest.Config, *x509.Certificate, error) {
	cfg, err := clientcmd.RESTConfigFromKubeConfig(data)
	if err != nil {
		return nil, nil, err
	}
	cert, err := pki.ParseCertificate(cfg.CertData)
	if err != nil {
		return nil, nil, err
	}
	return cfg, cert, nil
}
