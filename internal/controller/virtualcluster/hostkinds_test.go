package virtualcluster

import (
	"slices"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/nestdev/nest/internal/syncer/contract"
)

// allows reports whether rules grant verb on group/resource.
func allows(rules []rbacv1.PolicyRule, group, resource, verb string) bool {
	return slices.ContainsFunc(rules, func(r rbacv1.PolicyRule) bool {
		return slices.Contains(r.APIGroups, group) && slices.Contains(r.Resources, resource) && slices.Contains(r.Verbs, verb)
	})
}

// The host kinds nest-syncer writes are one list (contract.HostKinds):
// nest-syncer may create and delete each, nest-manager may delete them all
// with the VirtualCluster, and nest-syncer creates nothing else but its
// Lease and the subresources of its pods.
func TestHostKindsAgreeWithRBAC(t *testing.T) {
	syncer, manager := clusterRoleRules(t, "../../../config/syncer/role.yaml"), clusterRoleRules(t, "../../../config/rbac/role.yaml")
	for _, k := range contract.HostKinds {
		for _, verb := range []string{"create", "delete", "get"} {
			if !allows(syncer, k.Group, k.Resource, verb) {
				t.Errorf("nest-syncer may not %s %s, a host kind it writes", verb, k.Resource)
			}
		}
		for _, verb := range []string{"list", "deletecollection"} {
			if !allows(manager, k.Group, k.Resource, verb) {
				t.Errorf("nest-manager may not %s %s, which it deletes with a VirtualCluster", verb, k.Resource)
			}
		}
	}
	others := []string{"leases", "pods/attach", "pods/exec", "pods/portforward"}
	for _, r := range syncer {
		if !slices.Contains(r.Verbs, "create") {
			continue
		}
		for _, res := range r.Resources {
			known := slices.Contains(others, res) || slices.ContainsFunc(contract.HostKinds, func(k contract.HostKind) bool {
				return k.Resource == res && slices.Contains(r.APIGroups, k.Group)
			})
			if !known {
				t.Errorf("nest-syncer may create %s %v, which is not in contract.HostKinds: nest-manager would leave them behind", res, r.APIGroups)
			}
		}
	}
}
