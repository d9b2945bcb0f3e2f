package contract

import "k8s.io/apimachinery/pkg/runtime/schema"

// HostKind is a kind of host object nest-syncer writes in the tenant's
// host namespace, each labelled LabelTenantOf. nest-manager deletes every
// object of these kinds with the VirtualCluster; nest-syncer's ClusterRole
// grants create and delete on them (config/syncer/role.yaml, from the
// markers in internal/syncer/rbac.go), nest-manager's deletecollection
// (config/rbac/role.yaml); a test checks both against this list.
type HostKind struct {
	schema.GroupVersionKind
	// Resource is the kind's plural resource name, as RBAC rules name it.
	Resource string
}

// HostKinds are the kinds of host objects nest-syncer writes. The Lease of
// its election is not among them: it is Nest's own (controlplane.HostObjects).
var HostKinds = []HostKind{
	{schema.GroupVersionKind{Version: "v1", Kind: "Pod"}, "pods"},
	{schema.GroupVersionKind{Version: "v1", Kind: "Service"}, "services"},
	{schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, "configmaps"},
	{schema.GroupVersionKind{Version: "v1", Kind: "Secret"}, "secrets"},
	// The virtual nodes' disks and the host claims of tenant claims.
	{schema.GroupVersionKind{Version: "v1", Kind: "PersistentVolumeClaim"}, "persistentvolumeclaims"},
	{schema.GroupVersionKind{Group: "discovery.k8s.io", Version: "v1", Kind: "EndpointSlice"}, "endpointslices"},
	{schema.GroupVersionKind{Group: "networking.k8s.io", Version: "v1", Kind: "NetworkPolicy"}, "networkpolicies"},
}
