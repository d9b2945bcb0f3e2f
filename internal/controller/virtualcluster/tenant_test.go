package virtualcluster

import (
	"context"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilversion "k8s.io/apimachinery/pkg/util/version"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/nestdev/nest/internal/addons"
	"github.com/nestdev/nest/internal/components"
	"github.com/nestdev/nest/internal/controlplane"
)

// nest-manager, in system:masters, is allowed everything from the start, so
// its health check asks the authorizer about the administrators: they are
// cluster-admin only once nest-syncer's binding is there and the RBAC
// authorizer has seen it.
func TestAdministratorsAuthorizedFollowsTheirBinding(t *testing.T) {
	env := &envtest.Environment{}
	cfg, err := env.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	manager, err := env.AddUser(envtest.User{Name: controlplane.ManagerUser, Groups: []string{components.MastersGroup}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := manager.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := (APITenants{}).AdministratorsAuthorized(ctx, kubeconfig); err == nil {
		t.Error("the administrators are reported cluster-admin before their binding exists")
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, addons.ClusterAdmins(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the administrators are cluster-admin", func() error {
		return APITenants{}.AdministratorsAuthorized(ctx, kubeconfig)
	})
}

// The pre-flight reads the API server's gauge of requested deprecated
// APIs: those removed by the target release block, later ones do not.
func TestRemovedAPIsReadsTheDeprecatedAPIsGauge(t *testing.T) {
	metrics := `# HELP apiserver_requested_deprecated_apis [STABLE] Gauge of deprecated APIs that have been requested, broken out by API group, version, resource, subresource, and removed_release.
# TYPE apiserver_requested_deprecated_apis gauge
apiserver_requested_deprecated_apis{group="networking.k8s.io",removed_release="1.37",resource="ipaddresses",subresource="",version="v1beta1"} 1
apiserver_requested_deprecated_apis{group="resource.k8s.io",removed_release="1.38",resource="resourceclaims",subresource="status",version="v1beta1"} 1
apiserver_requested_deprecated_apis{group="",removed_release="1.30",resource="componentstatuses",subresource="",version="v1"} 1
apiserver_requested_deprecated_apis{group="example.dev",removed_release="",resource="widgets",subresource="",version="v1beta1"} 1
apiserver_requested_deprecated_apis{group="odd.dev",removed_release="soon",resource="gadgets",subresource="",version="v1beta1"} 1
# HELP apiserver_request_total [STABLE] Counter of apiserver requests.
# TYPE apiserver_request_total counter
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="cluster",subresource="",verb="LIST",version="v1"} 3
`
	got, err := RemovedAPIs([]byte(metrics), utilversion.MustParseSemantic("v1.37.2"))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"componentstatuses.v1 (removed in 1.30)", "gadgets.v1beta1.odd.dev (removed in soon)", "ipaddresses.v1beta1.networking.k8s.io (removed in 1.37)"}
	if !slices.Equal(got, want) {
		t.Errorf("removed by 1.37: %v, want %v", got, want)
	}
	got, _ = RemovedAPIs([]byte(metrics), utilversion.MustParseSemantic("v1.38.0"))
	if !slices.Contains(got, "resourceclaims.v1beta1.resource.k8s.io/status (removed in 1.38)") {
		t.Errorf("removed by 1.38: %v, want the resourceclaims status subresource", got)
	}
	if _, err := RemovedAPIs([]byte("not { metrics"), utilversion.MustParseSemantic("v1.37.2")); err == nil {
		t.Error("unparsable metrics: want an error, not an empty list that lets the upgrade through")
	}
}

func TestKubeletsTooOldFollowsTheSkewPolicy(t *testing.T) {
	node := func(name, v string) corev1.Node {
		return corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{KubeletVersion: v}}}
	}
	got := kubeletsTooOld([]corev1.Node{node("virtual", "v1.36.3"), node("dedicated-ok", "v1.34.0"), node("dedicated-old", "v1.33.9"), node("odd", "latest")},
		utilversion.MustParseSemantic("v1.37.2"))
	if len(got) != 2 || !strings.Contains(got[0], "node dedicated-old's kubelet v1.33.9 is more than 3 minor versions older than v1.37.2") ||
		!strings.Contains(got[1], `node odd reports kubelet version "latest", which does not parse`) {
		t.Errorf("blockers %q, want dedicated-old's and odd's", got)
	}
}
