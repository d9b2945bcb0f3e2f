package addons

import (
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// networkPolicyReaderName names the ClusterRole and its binding.
const networkPolicyReaderName = "kube-network-policies"

// NetworkPolicyReader returns the RBAC a NetworkPolicy enforcer such as
// kube-network-policies needs, granted to user: list and watch pods,
// namespaces and NetworkPolicies, as upstream's install.yaml grants its
// ServiceAccount. It reads nothing else and writes nothing.
func NetworkPolicyReader(user string) []client.Object {
	meta := metav1.ObjectMeta{Name: networkPolicyReaderName}
	return []client.Object{
		&rbacv1.ClusterRole{ObjectMeta: meta, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods", "namespaces"}, Verbs: []string{"list", "watch"}},
			{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"networkpolicies"}, Verbs: []string{"list", "watch"}},
		}},
		&rbacv1.ClusterRoleBinding{
			ObjectMeta: meta,
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: networkPolicyReaderName},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
		},
	}
}
