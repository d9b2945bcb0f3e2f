package components_test

import (
	"slices"
	"strings"
	"testing"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/controlplane"
	"github.com/nestdev/nest/internal/devcluster"
)

// The local host cluster and a tenant control plane set the same flags but
// for the ones listed here, each explained where it is set.
func TestHostAndTenantDifferOnlyByTheirOwnFlags(t *testing.T) {
	l := devcluster.Layout{Root: "/state"}
	nodes, err := devcluster.Topology("/state", 1)
	if err != nil {
		t.Fatal(err)
	}
	host := map[string]devcluster.Args{
		"etcd":                    devcluster.EtcdArgs(l, nodes[0]),
		"kube-apiserver":          devcluster.APIServerArgs(l, nodes[0]),
		"kube-controller-manager": devcluster.ControllerManagerArgs(l),
		"kube-scheduler":          devcluster.SchedulerArgs(l),
	}
	vc := &nestv1.VirtualCluster{}
	vc.Name, vc.Namespace = "alpha", "tenant-a"
	pod := controlplane.StatefulSetFor(vc, controlplane.Options{}, controlplane.ServiceIPs{}).Spec.Template.Spec
	tenant := map[string]map[string]string{}
	for _, c := range append(pod.InitContainers, pod.Containers...) {
		tenant[c.Name] = parse(c.Args)
	}
	etcdTLS := []string{"cert-file", "key-file", "client-cert-auth", "trusted-ca-file", "peer-cert-file", "peer-key-file", "peer-client-cert-auth", "peer-trusted-ca-file"}
	for _, tt := range []struct {
		component            string
		hostOnly, tenantOnly []string
	}{
		// A tenant member takes its initial cluster from the environment
		// (EtcdMember) and admits peers by the peer certificate's name.
		{"etcd", []string{"initial-cluster"}, append(etcdTLS, "snapshot-count", "peer-skip-client-san-verification", "peer-cert-allowed-cn")},
		// A tenant API server loads the node endpoints policy from files
		// (feature-gates, admission-control-config-file) and dials nodes
		// and pods through nest-syncer's egress proxy
		// (egress-selector-config-file): controlplane.APIServerConfigMapFor.
		{"kube-apiserver", []string{"kubelet-certificate-authority"}, []string{"etcd-cafile", "etcd-certfile", "etcd-keyfile", "max-requests-inflight", "max-mutating-requests-inflight", "enable-aggregator-routing",
			"feature-gates", "admission-control-config-file", "egress-selector-config-file"}},
		{"kube-controller-manager", []string{"allocate-node-cidrs", "cluster-name"}, nil},
		{"kube-scheduler", nil, []string{"kube-api-qps", "kube-api-burst"}},
	} {
		h, tn := host[tt.component], tenant[tt.component]
		if got := onlyIn(h, tn); !slices.Equal(got, sorted(tt.hostOnly)) {
			t.Errorf("%s: host-only flags %v, want %v", tt.component, got, sorted(tt.hostOnly))
		}
		if got := onlyIn(tn, h); !slices.Equal(got, sorted(tt.tenantOnly)) {
			t.Errorf("%s: tenant-only flags %v, want %v", tt.component, got, sorted(tt.tenantOnly))
		}
	}
	// Values that depend on no parameter are the same on both sides.
	for component, flags := range map[string][]string{
		"kube-apiserver":          {"authorization-mode", "enable-admission-plugins", "requestheader-allowed-names", "kubelet-preferred-address-types", "profiling"},
		"kube-controller-manager": {"controllers", "use-service-account-credentials", "leader-elect"},
		"etcd":                    {"listen-metrics-urls", "log-level"},
	} {
		for _, f := range flags {
			if h, tn := host[component][f], tenant[component][f]; h != tn || h == "" {
				t.Errorf("%s --%s: host %q, tenant %q", component, f, h, tn)
			}
		}
	}
}

func parse(args []string) map[string]string {
	out := map[string]string{}
	for _, a := range args {
		name, value, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		out[name] = value
	}
	return out
}

// onlyIn returns the flag names in a and not in b, sorted.
func onlyIn(a, b map[string]string) []string {
	var out []string
	for k := range a {
		if _, ok := b[k]; !ok {
			out = append(out, k)
		}
	}
	return sorted(out)
}

func sorted(s []string) []string { return slices.Sorted(slices.Values(s)) }
