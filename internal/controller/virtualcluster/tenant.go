package virtualcluster

import (
	"context"
	"fmt"
	"slices"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nestdev/nest/internal/addons"
	"github.com/nestdev/nest/internal/controlplane"
)

// APITenants talks to tenant API servers with nest-manager's kubeconfig for
// each (controlplane.ManagerKubeconfig).
type APITenants struct{}

var _ TenantChecker = APITenants{}

func tenantClient(kubeconfig []byte) (*kubernetes.Clientset, error) {
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("parse tenant kubeconfig: %w", err)
	}
	cfg.Timeout = 5 * time.Second
	return kubernetes.NewForConfig(rest.CopyConfig(cfg))
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
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
			return nil
		}
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
