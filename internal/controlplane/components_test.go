package controlplane

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/clientcmd"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/components"
	"github.com/nestdev/nest/internal/pki"
	"github.com/nestdev/nest/internal/syncer/contract"
)

// The tenant's command lines are the shared ones (package components), with
// the tenant's parameters and in their order, then the tenant-only flags
// listed here. A change to a shared flag so reaches every tenant and, by the
// same test in devcluster, the local host cluster.
func TestControlPlaneArgsAreTheSharedOnesPlusTenantOnlyFlags(t *testing.T) {
	v := vc(func(v *nestv1.VirtualCluster) {
		v.Spec.ServiceCIDR = "10.100.0.0/16"
		v.Spec.ClusterDomain = "tenant.local"
	})
	pkiDir := components.PKIDir("/etc/kubernetes/pki")
	etcd := components.Etcd{Name: "$(POD_NAME)", DataDir: "/var/lib/etcd/data", TLS: true, PKI: pkiDir, SnapshotCount: 10000,
		Member: &components.EtcdMember{Host: "$(POD_NAME).alpha-peers.tenant-a.svc", ListenIP: "$(POD_IP)", DNSNames: []string{"*.alpha-peers.tenant-a.svc"}}}
	client := func(kubeconfig string) components.ClientComponent {
		return components.ClientComponent{Kubeconfig: "/etc/kubernetes/kubeconfig/" + kubeconfig, BindAddress: "0.0.0.0"}
	}
	api := components.APIServer{AdvertiseAddress: "$(POD_IP)", Port: 6443, PKI: pkiDir, Etcd: etcd, ServiceCIDR: "10.100.0.0/16", ClusterDomain: "tenant.local"}
	readOnly, mutating := APIServerInflight(apiServerResources(v).Limits[corev1.ResourceMemory])
	want := map[string][]string{
		"etcd": etcd.Flags().Args(),
		"kube-apiserver": append(api.Flags().Args(),
			fmt.Sprintf("--max-requests-inflight=%d", readOnly), fmt.Sprintf("--max-mutating-requests-inflight=%d", mutating), "--enable-aggregator-routing=true",
			"--feature-gates=ManifestBasedAdmissionControlConfig=true", "--admission-control-config-file=/etc/nest/apiserver/admission.yaml",
			"--egress-selector-config-file=/etc/nest/apiserver/egress-selector.yaml"),
		"kube-controller-manager": components.ControllerManagerFlags(client("controller-manager.conf"), pkiDir, CASignerCert).Args(),
		"kube-scheduler":          append(components.SchedulerFlags(client("scheduler.conf")).Args(), "--kube-api-qps=200", "--kube-api-burst=400"),
	}
	pod := StatefulSetFor(v, Options{}, ServiceIPs{}).Spec.Template.Spec
	for _, c := range append(pod.InitContainers, pod.Containers...) {
		w, ok := want[c.Name]
		if !ok {
			continue
		}
		delete(want, c.Name)
		if !slices.Equal(c.Args, w) {
			t.Errorf("%s:\n got %s\nwant %s", c.Name, strings.Join(c.Args, " "), strings.Join(w, " "))
		}
	}
	for name := range want {
		t.Errorf("no container %s", name)
	}
}

// The tenant's certificates are the shared specs; only nest-syncer's, the
// kubelet-client CA and the names of the tenant's endpoints are its own.
func TestLeavesAreTheSharedOnes(t *testing.T) {
	got, err := leafSpecs(names, endpoints())
	if err != nil {
		t.Fatal(err)
	}
	serving := components.APIServerServing(netip.MustParsePrefix("10.96.0.0/16"), "cluster.local",
		[]string{"alpha", "alpha.tenant-a", "alpha.tenant-a.svc", "alpha.tenant-a.svc.cluster.local"},
		[]net.IP{net.ParseIP("10.96.5.5"), net.ParseIP("198.51.100.10")})
	want := []components.Leaf{
		serving,
		components.APIServerKubeletClient(KubeletClientCACert),
		components.FrontProxyClient(),
		{CA: CACert, Cert: SyncerServingCert, Key: SyncerServingKey, Spec: components.LoopbackServing("nest-syncer", 0)},
		components.APIServerEtcdClient(), memberNamed(components.EtcdServer()), memberNamed(components.EtcdPeer()),
	}
	if len(got) != len(want) {
		t.Fatalf("%d leaves, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		if !got[i].Equal(want[i]) {
			t.Errorf("leaf %d:\n got %+v\nwant %+v", i, got[i], want[i])
		}
	}
}

// The component kubeconfigs carry the identities the shared specs give, and
// nest-syncer admits the kubelet client certificate's name.
func TestTenantIdentitiesAreTheSharedOnes(t *testing.T) {
	pkiData, _, err := ReconcilePKI(nil, names, endpoints(), Renewal{})
	if err != nil {
		t.Fatal(err)
	}
	kubeconfigs, _, err := ReconcileComponentKubeconfigs(nil, pkiData, names, Renewal{})
	if err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string]pki.CertSpec{
		ControllerManagerKubeconfig: components.ControllerManagerClient(),
		SchedulerKubeconfig:         components.SchedulerClient(),
	} {
		cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfigs[file])
		if err != nil {
			t.Fatal(err)
		}
		cert, err := pki.ParseCertificate(cfg.CertData)
		if err != nil {
			t.Fatal(err)
		}
		if cert.Subject.CommonName != want.CommonName || !slices.Equal(cert.Subject.Organization, want.Organizations) {
			t.Errorf("%s: subject %s, want %s in %v", file, cert.Subject.CommonName, want.CommonName, want.Organizations)
		}
	}
	if contract.KubeletClientName != components.KubeletClientUser {
		t.Errorf("nest-syncer admits %q, the API server presents %q", contract.KubeletClientName, components.KubeletClientUser)
	}
}

// The serving certificate's names are compared as sets, so one issued with
// the same names in another order (as before package components) is kept.
func TestReconcilePKIKeepsAServingCertificateWhoseNamesAreReordered(t *testing.T) {
	data, _, err := ReconcilePKI(nil, names, endpoints(), Renewal{})
	if err != nil {
		t.Fatal(err)
	}
	serving, err := apiServerServing(names, endpoints())
	if err != nil {
		t.Fatal(err)
	}
	spec := serving.Spec
	spec.DNSNames, spec.IPs = slices.Clone(spec.DNSNames), slices.Clone(spec.IPs)
	slices.Reverse(spec.DNSNames)
	slices.Reverse(spec.IPs)
	ca, err := pki.LoadCA(pki.KeyPair{CertPEM: data[CACert], KeyPEM: data[CAKey]})
	if err != nil {
		t.Fatal(err)
	}
	pair, err := ca.Issue(spec)
	if err != nil {
		t.Fatal(err)
	}
	data[APIServerCert], data[APIServerKey] = pair.CertPEM, pair.KeyPEM
	if _, changed, err := ReconcilePKI(data, names, endpoints(), Renewal{}); err != nil || changed {
		t.Errorf("changed=%v err=%v: a reordered serving certificate was reissued", changed, err)
	}
}

// memberNamed is an etcd member's certificate l that also names every
// member of the tenant's cluster, as its peers and their helpers dial them.
func memberNamed(l components.Leaf) components.Leaf {
	l.Spec.DNSNames = append(l.Spec.DNSNames, "*.alpha-peers.tenant-a.svc")
	return l
}
