package addons

import (
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nestdev/nest/internal/components"
)

// ClusterAdminsName names the ClusterRoleBinding ClusterAdmins returns: the
// group's own name, as kubeadm names its kubeadm:cluster-admins binding.
const ClusterAdminsName = components.ClusterAdminsGroup

// ClusterAdminRole is the bootstrap ClusterRole ClusterAdmins grants: every
// verb on every resource, which the API server recreates at start.
const ClusterAdminRole = "cluster-admin"

// ClusterAdminsGuardName names the ValidatingAdmissionPolicy and binding of
// ClusterAdminsGuard; the suffix is the static one (see NodeEndpointsName).
const ClusterAdminsGuardName = "nest-cluster-admins.static.k8s.io"

// APIServerUser is the API server's own loopback identity, which
// reconciles the bootstrap ClusterRoles, cluster-admin among them, at every
// start.
const APIServerUser = "system:apiserver"

// ClusterAdmins returns the ClusterRoleBinding that makes the tenant's
// administrators (components.ClusterAdminsGroup) cluster-admin. Their
// certificates name that group rather than system:masters so that API
// Priority and Fairness classifies their requests (global-default) instead
// of exempting them: a tenant's administrator, or a tenant program holding
// its kubeconfig, then cannot starve the controller-manager, the scheduler,
// nest-syncer and the probes of the API server. The price is that the
// administrator's rights now live in an object, which nest-syncer keeps and
// ClusterAdminsGuard keeps the administrator from removing.
func ClusterAdmins() *rbacv1.ClusterRoleBinding {
	return &rbacv1.ClusterRoleBinding{
		TypeMeta: metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "ClusterRoleBinding"},
		ObjectMeta: metav1.ObjectMeta{
			Name: ClusterAdminsName,
			Annotations: map[string]string{
				"kubernetes.io/description": fmt.Sprintf("Nest's: grants the tenant's administrators (group %s) cluster-admin. "+
					"nest-syncer keeps it as it is; no one else may change or delete it.", components.ClusterAdminsGroup),
			},
		},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: ClusterAdminRole},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: components.ClusterAdminsGroup}},
	}
}

// ClusterAdminsGuard returns the ValidatingAdmissionPolicy and binding that
// keep the tenant's administrators from locking themselves out: no one but
// owner (nest-syncer, which keeps the binding) may update or delete the
// ClusterAdmins binding, nor, but for owner and the API server's own
// start-up reconciliation (APIServerUser), the cluster-admin ClusterRole
// it grants. Creating them is not refused: the API server creates the
// role, and nest-syncer the binding, before the administrators have any
// rights.
//
// As with NodeEndpoints, impersonating owner gets through: a cluster-admin
// may impersonate anyone. The policy keeps honest mistakes (kubectl delete
// clusterrolebindings --all, a GitOps tool pruning what it did not make)
// from cutting the administrator off; nest-syncer puts the binding back
// whoever removed it.
func ClusterAdminsGuard(owner string) (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	const typeGroup = "admissionregistration.k8s.io/v1"
	writes := []admissionregistrationv1.OperationType{admissionregistrationv1.Update, admissionregistrationv1.Delete}
	// Names are matched on oldObject, not with resourceNames: a
	// deletecollection request reaches admission once per object, but with
	// the request's empty name, which no resourceNames rule matches.
	rule := func(resource string) admissionregistrationv1.NamedRuleWithOperations {
		return admissionregistrationv1.NamedRuleWithOperations{
			RuleWithOperations: admissionregistrationv1.RuleWithOperations{
				Operations: writes,
				Rule: admissionregistrationv1.Rule{
					APIGroups: []string{rbacv1.GroupName}, APIVersions: []string{"*"}, Resources: []string{resource},
					Scope: ptr.To(admissionregistrationv1.ClusterScope),
				},
			},
		}
	}
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: typeGroup, Kind: "ValidatingAdmissionPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: ClusterAdminsGuardName},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{
				rule("clusterrolebindings"),
				rule("clusterroles"),
			}},
			MatchConditions: []admissionregistrationv1.MatchCondition{{
				Name: "the-administrators-binding-or-role",
				// An error here would refuse (FailurePolicy Fail): an update
				// that creates has no oldObject, and is a CREATE anyway.
				Expression: fmt.Sprintf("oldObject != null && oldObject.metadata.name == (request.resource.resource == 'clusterrolebindings' ? %s : %s)",
					celString(ClusterAdminsName), celString(ClusterAdminRole)),
			}, {
				Name: "not-the-owner", Expression: fmt.Sprintf("request.userInfo.username != %s", celString(owner)),
			}, {
				// The API server reconciles the bootstrap roles at start:
				// refusing it would keep it from becoming ready.
				Name: "not-the-api-server-reconciling-the-role", Expression: fmt.Sprintf("request.resource.resource != 'clusterroles' || request.userInfo.username != %s", celString(APIServerUser)),
			}},
			Validations: []admissionregistrationv1.Validation{{
				Expression: "false",
				Message: fmt.Sprintf("the ClusterRoleBinding %s and the ClusterRole %s are Nest's: they make the tenant's administrators (group %s) cluster-admin, "+
					"and changing or deleting them could lock every administrator out; to grant others cluster-admin, make a ClusterRoleBinding of your own",
					ClusterAdminsName, ClusterAdminRole, components.ClusterAdminsGroup),
				Reason: ptr.To(metav1.StatusReasonForbidden),
			}},
		},
	}
	return policy, denyBinding(ClusterAdminsGuardName)
}
