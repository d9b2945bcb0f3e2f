package isolation

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/controlplane"
	"github.com/nestdev/nest/internal/devcluster"
	"github.com/nestdev/nest/test/e2e/framework"
)

// env is what every case shares, read-only: the host cluster, the two
// tenants and the addresses a hostile alpha pod aims at.
type env struct {
	ctx  context.Context
	host client.Client
	// hostKubeconfig is the host cluster's admin kubeconfig, in stateDir.
	hostKubeconfig, stateDir string
	// alpha is the attacker; beta the other tenant.
	alpha, beta *framework.Tenant
	// nodeIPs are the host nodes' InternalIPs.
	nodeIPs []string
	// net is the host cluster's addressing; hostAPIServer (host:port) and
	// hostDNS are its own kubernetes and DNS Services.
	net                    devcluster.Addressing
	hostAPIServer, hostDNS string
	// own are alpha's API server and DNS addresses as its pods see them;
	// betaTargets are beta's addresses on the host network.
	own, betaTargets targets
}

// targets are one tenant's addresses on the host network.
type targets struct {
	// controlPlanePod is the control-plane pod's IP.
	controlPlanePod string
	// apiServer and dns are the host ClusterIPs of its API server and CoreDNS.
	apiServer, dns string
	// webPod and webService are a tenant pod serving on 8080 and the host
	// ClusterIP of the tenant Service in front of it (beta only).
	webPod, webService string
}

// Alpha's object budget is small, so floods hit it quickly.
const (
	budgetConfigMaps = 5
	budgetServices   = 4
	budgetDataBytes  = 1 << 20
)

// TestTenantIsolation runs every adversarial case and control against one
// local host cluster with two virtual clusters. Cases do not depend on each
// other: each makes its own pods and objects.
func TestTenantIsolation(t *testing.T) {
	framework.RequireRoot(t)
	cluster := framework.LeaseCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	e := setup(t, ctx, cluster)
	// At most casesAtOnce cases run at once, whatever go test's -parallel
	// (which make e2e sets high, for the top-level tests of every package
	// to queue for their leases together).
	running := make(chan struct{}, casesAtOnce)
	for _, g := range []struct {
		name  string
		cases []testCase
		// serial runs the group's cases one at a time.
		serial bool
	}{
		{"controls", e.controls(), false},
		{"escape", e.escapes(), false},
		{"reach", e.reaches(), false},
		{"metadata", e.metadata(), false},
		{"resources", e.resources(), false},
		{"identity", e.identity(), false},
		// One at a time: they share alpha's object quota, and one case's
		// deletions have the quota controller recount it from its caches,
		// which can lag behind another case's flood of creations and let
		// that flood past the quota by an object (seen once in CI).
		{"budgets", e.budgets(), true},
		{"translation", e.translation(), false},
		{"network-policies", e.networkPolicies(), false},
		{"storage", e.storage(), false},
		{"steering", e.steering(), false},
		{"fail-closed", e.failClosed(), false},
	} {
		t.Run(g.name, func(t *testing.T) {
			for _, c := range g.cases {
				t.Run(c.name, func(t *testing.T) {
					if !g.serial {
						t.Parallel()
					}
					running <- struct{}{}
					defer func() { <-running }()
					c.run(t)
				})
			}
		})
	}
}

// casesAtOnce is how many isolation cases run at once against the two
// tenants: four kept the suite's cases within their deadlines on a 2-core
// machine beside another local cluster.
const casesAtOnce = 4

// testCase is one named check.
type testCase struct {
	name string
	run  func(t *testing.T)
}

func setup(t *testing.T, ctx context.Context, cluster devcluster.Addressing) *env {
	t.Helper()
	stateDir := framework.StartHostCluster(t, ctx, cluster, "--with-nest")
	host, hostKubeconfig, nest := framework.NestOn(t, ctx, stateDir)
	dir := t.TempDir()
	e := &env{ctx: ctx, host: host, hostKubeconfig: hostKubeconfig, stateDir: stateDir, alpha: &framework.Tenant{Name: "alpha", Dir: dir}, beta: &framework.Tenant{Name: "beta", Dir: dir}}
	e.net = framework.Addressing(t, stateDir)
	e.hostAPIServer = hostPort(e.net.KubernetesServiceIP().String(), 443)
	e.hostDNS = e.net.DNSIP().String()
	createAlpha(t, ctx, host)
	// Beta confines privileged containers, where alpha refuses them: the
	// escape cases check both.
	if out, err := nest("create", "beta", "--cpu", "1", "--memory", "2Gi", "--pods", "10", "--privileged-containers", "confine"); err != nil {
		t.Fatalf("create beta: %v\n%s", err, out)
	}
	for _, tn := range []*framework.Tenant{e.alpha, e.beta} {
		tn.Namespace = "vc-" + tn.Name
		framework.WaitReady(t, ctx, host, tn)
		tn.Load(t, nest)
		tn.WaitDefaultServiceAccount(t, ctx)
	}
	var nodes corev1.NodeList
	if err := host.List(ctx, &nodes); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		for _, a := range n.Status.Addresses {
			if a.Type == corev1.NodeInternalIP {
				e.nodeIPs = append(e.nodeIPs, a.Address)
			}
		}
	}
	if len(e.nodeIPs) != 2 {
		t.Fatalf("host node IPs %v, want 2", e.nodeIPs)
	}
	e.own = e.tenantTargets(t, e.alpha)
	e.betaTargets = e.tenantTargets(t, e.beta)
	// Every reach case dials from alpha's prober; beta serves a web pod
	// behind a Service for alpha to aim at.
	e.runServer(t, e.alpha, "prober")
	e.runServer(t, e.beta, "web")
	e.beta.Kubectl(t, ctx, "expose", "pod", "web", "--port=8080")
	e.betaTargets.webPod = e.hostPod(t, e.beta, "default", "web").Status.PodIP
	e.betaTargets.webService = e.hostServiceIP(t, e.beta, "default", "web")
	return e
}

// createAlpha creates the attacking tenant with a small object budget.
func createAlpha(t *testing.T, ctx context.Context, host client.Client) {
	t.Helper()
	if err := host.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "vc-alpha"}}); err != nil {
		t.Fatal(err)
	}
	vc := &nestv1.VirtualCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: "vc-alpha", Name: "alpha"},
		Spec: nestv1.VirtualClusterSpec{
			PromoteResources: nestv1.PromoteResources{Resources: corev1.ResourceList{
				"cpu": resource.MustParse("2"), "memory": resource.MustParse("4Gi"), "pods": resource.MustParse("30"),
			}},
			VirtualNode: nestv1.VirtualNodeSpec{ObjectBudget: nestv1.ObjectBudgetSpec{
				ConfigMaps: ptr.To[int32](budgetConfigMaps), Services: ptr.To[int32](budgetServices),
				DataBytes: resource.NewQuantity(budgetDataBytes, resource.BinarySI),
			}},
		},
	}
	if err := host.Create(ctx, vc); err != nil {
		t.Fatal(err)
	}
}

// tenantTargets finds a tenant's control-plane pod IP and Service ClusterIPs.
func (e *env) tenantTargets(t *testing.T, tn *framework.Tenant) targets {
	t.Helper()
	vc := &nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: tn.Name, Namespace: tn.Namespace}}
	n := controlplane.NamesOf(vc)
	var pods corev1.PodList
	if err := e.host.List(e.ctx, &pods, client.InNamespace(tn.Namespace), client.MatchingLabels(n.Labels())); err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 1 || pods.Items[0].Status.PodIP == "" {
		t.Fatalf("tenant %s: want one control-plane pod with an IP, got %d", tn.Name, len(pods.Items))
	}
	ip := func(name string) string {
		var svc corev1.Service
		if err := e.host.Get(e.ctx, client.ObjectKey{Namespace: tn.Namespace, Name: name}, &svc); err != nil {
			t.Fatal(err)
		}
		return svc.Spec.ClusterIP
	}
	return targets{controlPlanePod: pods.Items[0].Status.PodIP, apiServer: ip(n.Service()), dns: ip(n.DNSService())}
}

func hostPort(ip string, port int) string { return net.JoinHostPort(ip, fmt.Sprint(port)) }

// apiServerPort is where the control-plane pod serves.
const apiServerPort = int(controlplane.Port)
