package virtualcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	utilversion "k8s.io/apimachinery/pkg/util/version"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/addons"
	"github.com/nestdev/nest/internal/controlplane"
	"github.com/nestdev/nest/internal/kube"
)

// APITenants talks to tenant API servers with nest-manager's kubeconfig for
// each (controlplane.ManagerKubeconfig).
type APITenants struct{}

var _ TenantChecker = APITenants{}

// tenantConfig is the client config of kubeconfig, each call bounded.
func tenantConfig(kubeconfig []byte) (*rest.Config, error) {
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("parse tenant kubeconfig: %w", err)
	}
	cfg.Timeout = 5 * time.Second
	return cfg, nil
}

func tenantClient(kubeconfig []byte) (*kubernetes.Clientset, error) {
	cfg, err := tenantConfig(kubeconfig)
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}

// Ready returns nil when the tenant API server's /readyz answers "ok".
func (APITenants) Ready(ctx context.Context, kubeconfig []byte) error {
	cs, err := tenantClient(kubeconfig)
	if err != nil {
		return err
	}
	body, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
	if err != nil {
		return err
	}
	if string(body) != "ok" {
		return fmt.Errorf("/readyz answered %q", body)
	}
	return nil
}

// VirtualNodeReady returns nil when the tenant's virtual node has condition
// Ready=True, else an error saying what is missing.
func (APITenants) VirtualNodeReady(ctx context.Context, kubeconfig []byte) error {
	cs, err := tenantClient(kubeconfig)
	if err != nil {
		return err
	}
	node, err := cs.CoreV1().Nodes().Get(ctx, controlplane.VirtualNodeName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("virtual node %s: %w", controlplane.VirtualNodeName, err)
	}
	if kube.NodeReady(node) {
		return nil
	}
	return fmt.Errorf("virtual node %s is not Ready yet", controlplane.VirtualNodeName)
}

// AdministratorsAuthorized returns nil when the tenant's authorizer lets its
// administrators (controlplane.AdminClient) do anything anywhere: once
// nest-syncer's binding (addons.ClusterAdmins) exists and the RBAC
// authorizer has seen it, the admin kubeconfig works.
func (APITenants) AdministratorsAuthorized(ctx context.Context, kubeconfig []byte) error {
	cs, err := tenantClient(kubeconfig)
	if err != nil {
		return err
	}
	admin := controlplane.AdminClient()
	review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:               admin.CommonName,
		Groups:             append(slices.Clone(admin.Organizations), user.AllAuthenticated),
		ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "*", Group: "*", Resource: "*"},
	}}
	review, err = cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("ask whether the administrators are cluster-admin: %w", err)
	}
	if !review.Status.Allowed {
		return fmt.Errorf("the administrators (%s) are not cluster-admin yet: nest-syncer has not made their ClusterRoleBinding %s, or the API server has not seen it (%s)",
			admin.Organizations[0], addons.ClusterAdminsName, review.Status.Reason)
	}
	return nil
}

// deprecatedAPIsMetric is the API server's gauge of the deprecated APIs
// clients requested since it started, labelled with the release that
// removes each (removed_release, "MAJOR.MINOR", "" when none is planned).
const deprecatedAPIsMetric = "apiserver_requested_deprecated_apis"

// maxKubeletSkew is how many minor versions a kubelet may be older than
// the API server (upstream's version skew policy since v1.28).
const maxKubeletSkew = 3

// Preflight asks every API server in apiServers for its metrics and the
// tenant for its nodes (TenantChecker.Preflight).
func (APITenants) Preflight(ctx context.Context, kubeconfig []byte, apiServers []string, to string, ignoreRemovedAPIs bool) (string, error) {
	cfg, err := tenantConfig(kubeconfig)
	if err != nil {
		return "", err
	}
	target := utilversion.MustParseSemantic(to)
	var blockers []string
	if !ignoreRemovedAPIs {
		removed, err := removedAPIsRequested(ctx, cfg, apiServers, target)
		if err != nil {
			return "", err
		}
		if len(removed) > 0 {
			blockers = append(blockers, fmt.Sprintf("clients requested %s, which %s no longer serves, since the API servers started: move them to a served version, or annotate the VirtualCluster %s=true to upgrade anyway",
				strings.Join(removed, ", "), to, nestv1.AnnotationIgnoreRemovedAPIs))
		}
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return "", err
	}
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", fmt.Errorf("list the tenant's nodes: %w", err)
	}
	blockers = append(blockers, kubeletsTooOld(nodes.Items, target)...)
	return strings.Join(blockers, "; "), nil
}

// removedAPIsRequested lists, as resource.version.group (removed in
// MAJOR.MINOR), the APIs that a client requested from any of apiServers
// and that the version target removes.
func removedAPIsRequested(ctx context.Context, cfg *rest.Config, apiServers []string, target *utilversion.Version) ([]string, error) {
	// The kubeconfig's server names the certificate's host; each replica
	// is dialled at its own address under that name.
	server, err := url.Parse(cfg.Host)
	if err != nil {
		return nil, fmt.Errorf("parse the tenant API server's address %q: %w", cfg.Host, err)
	}
	if len(apiServers) == 0 {
		return nil, errors.New("no control-plane replica has an address yet")
	}
	found := map[string]bool{}
	for _, base := range apiServers {
		one := rest.CopyConfig(cfg)
		one.Host, one.TLSClientConfig.ServerName = base, server.Hostname()
		cs, err := kubernetes.NewForConfig(one)
		if err != nil {
			return nil, err
		}
		body, err := cs.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
		if err != nil {
			return nil, fmt.Errorf("metrics of the API server at %s: %w", base, err)
		}
		apis, err := RemovedAPIs(body, target)
		if err != nil {
			return nil, fmt.Errorf("metrics of the API server at %s: %w", base, err)
		}
		for _, a := range apis {
			found[a] = true
		}
	}
	return slices.Sorted(maps.Keys(found)), nil
}

// RemovedAPIs reads an API server's metrics (Prometheus text format) and
// lists the requested deprecated APIs that target no longer serves: those
// whose removed_release is at or below target's minor, as
// resource.version.group (or resource.version for the core group), with
// their subresource after a slash.
func RemovedAPIs(metrics []byte, target *utilversion.Version) ([]string, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(metrics))
	if err != nil {
		return nil, fmt.Errorf("parse metrics: %w", err)
	}
	family := families[deprecatedAPIsMetric]
	if family == nil {
		return nil, nil
	}
	var out []string
	for _, m := range family.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if m.GetGauge().GetValue() == 0 || labels["removed_release"] == "" {
			continue
		}
		name := labels["resource"] + "." + labels["version"]
		if labels["group"] != "" {
			name += "." + labels["group"]
		}
		if labels["subresource"] != "" {
			name += "/" + labels["subresource"]
		}
		// A release that does not parse holds the upgrade too: in doubt,
		// the API may be gone.
		removed, err := utilversion.ParseGeneric(labels["removed_release"])
		if err == nil && removed.GreaterThan(utilversion.MajorMinor(target.Major(), target.Minor())) {
			continue
		}
		out = append(out, fmt.Sprintf("%s (removed in %s)", name, labels["removed_release"]))
	}
	slices.Sort(out)
	return out, nil
}

// kubeletsTooOld names the nodes whose kubelet is more than maxKubeletSkew
// minor versions older than target, which upstream does not support.
func kubeletsTooOld(nodes []corev1.Node, target *utilversion.Version) []string {
	var out []string
	for _, n := range nodes {
		v, err := utilversion.ParseGeneric(n.Status.NodeInfo.KubeletVersion)
		if err != nil {
			out = append(out, fmt.Sprintf("node %s reports kubelet version %q, which does not parse: the skew to %s cannot be checked",
				n.Name, n.Status.NodeInfo.KubeletVersion, "v"+target.String()))
			continue
		}
		if v.Major() != target.Major() || int(target.Minor())-int(v.Minor()) > maxKubeletSkew {
			out = append(out, fmt.Sprintf("node %s's kubelet %s is more than %d minor versions older than %s (upstream's version skew policy): upgrade the node first",
				n.Name, n.Status.NodeInfo.KubeletVersion, maxKubeletSkew, "v"+target.String()))
		}
	}
	return out
}
