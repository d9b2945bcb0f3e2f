package devcluster

import (
	"maps"
	"net"
	"net/netip"
	"reflect"
	"testing"

	"github.com/nestdev/nest/internal/agent"
	"github.com/nestdev/nest/internal/components"
	"github.com/nestdev/nest/internal/pki"
)

// The host's command lines are the shared ones (package components), with
// the host's parameters, plus the host-only flags listed here, which must not
// override a shared one. A change to a shared flag so reaches the host and,
// by the same test in controlplane, every tenant.
func TestComponentArgsAreTheSharedOnesPlusHostOnlyFlags(t *testing.T) {
	l := Layout{Root: "/state"}
	nodes, _ := Topology("/state", 2)
	pkiDir := components.PKIDir("/state/pki")
	etcd := components.Etcd{Name: "nest-control-plane", DataDir: "/state/etcd"}
	client := func(kubeconfig string) components.ClientComponent {
		return components.ClientComponent{Kubeconfig: "/state/kubeconfig/" + kubeconfig + ".conf", BindAddress: "127.0.0.1"}
	}
	api := components.APIServer{AdvertiseAddress: "198.51.100.10", Port: 6443, PKI: pkiDir, Etcd: etcd, ServiceCIDR: "10.96.0.0/16", ClusterDomain: "cluster.local"}
	for _, tt := range []struct {
		name     string
		got      Args
		shared   components.Flags
		hostOnly map[string]string
	}{
		{"etcd", EtcdArgs(l, nodes[0]), etcd.Flags(), nil},
		{"kube-apiserver", APIServerArgs(l, nodes[0]), api.Flags(), map[string]string{"kubelet-certificate-authority": "/state/pki/ca.crt"}},
		{"kube-controller-manager", ControllerManagerArgs(l), components.ControllerManagerFlags(client("controller-manager"), pkiDir, components.CACert),
			map[string]string{"allocate-node-cidrs": "false", "cluster-name": "nest"}},
		{"kube-scheduler", SchedulerArgs(l), components.SchedulerFlags(client("scheduler")), nil},
	} {
		want := tt.shared.Map()
		for k := range tt.hostOnly {
			if _, shared := want[k]; shared {
				t.Errorf("%s: host-only --%s overrides a shared flag", tt.name, k)
			}
		}
		maps.Copy(want, tt.hostOnly)
		if !maps.Equal(map[string]string(tt.got), want) {
			t.Errorf("%s:\n got %s\nwant %s", tt.name, tt.got, Args(want))
		}
	}
}

// The host's certificates are the shared specs; only the kubelets' serving
// certificates, the workers' agent serving certificates (never the
// control-plane node's: it is never promoted) and the names of the host's
// identities are its own.
func TestLeavesAreTheSharedOnes(t *testing.T) {
	nodes, _ := Topology("/state", 2)
	want := []components.Leaf{
		components.APIServerServing(netip.MustParsePrefix("10.96.0.0/16"), "cluster.local", []string{"nest-control-plane"}, []net.IP{net.ParseIP("198.51.100.10")}),
		components.APIServerKubeletClient(components.CACert),
		components.FrontProxyClient(),
		{CA: components.CACert, Cert: "kubelet-nest-control-plane.crt", Key: "kubelet-nest-control-plane.key", Spec: components.KubeletServing("nest-control-plane", net.ParseIP("198.51.100.10"))},
		{CA: components.CACert, Cert: "kubelet-nest-worker.crt", Key: "kubelet-nest-worker.key", Spec: components.KubeletServing("nest-worker", net.ParseIP("198.51.100.11"))},
		{CA: AgentCACert, Cert: "nest-agent-nest-worker.crt", Key: "nest-agent-nest-worker.key", Spec: agent.ServingCertSpec("nest-worker", net.ParseIP("198.51.100.11"))},
	}
	got := leaves(Layout{Root: "/state"}, nodes)
	if len(got) != len(want) {
		t.Fatalf("%d leaves, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		if !got[i].Equal(want[i]) {
			t.Errorf("leaf %d:\n got %+v\nwant %+v", i, got[i], want[i])
		}
	}
	subjects := map[string]pki.CertSpec{}
	for _, s := range kubeconfigSpecs(nodes) {
		subjects[s.file] = s.subject
	}
	for file, want := range map[string]pki.CertSpec{
		"controller-manager":         components.ControllerManagerClient(),
		"scheduler":                  components.SchedulerClient(),
		"kube-proxy":                 components.KubeProxyClient(),
		"kubelet-nest-worker":        components.NodeClient("nest-worker"),
		"admin":                      components.Client("kubernetes-admin", components.MastersGroup),
		"kube-network-policies":      components.Client(NetworkPolicyName),
		"kubelet-nest-control-plane": components.NodeClient("nest-control-plane"),
	} {
		if !reflect.DeepEqual(subjects[file], want) {
			t.Errorf("kubeconfig %s: subject %+v, want %+v", file, subjects[file], want)
		}
	}
}
