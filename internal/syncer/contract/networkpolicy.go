package contract

// Isolation labels: how nest-syncer tells nest-manager's base
// NetworkPolicies which host pods a tenant NetworkPolicy isolates. Kubernetes
// opens a pod in a direction until some policy of that direction selects it;
// Nest's base policies (controlplane.NetworkPoliciesFor, the
// <vc>-tenant-ingress and <vc>-tenant-egress policies nest-manager writes)
// open the tenant's host pods to each other, and for egress to the outside,
// only while they lack the label of that direction, and the host copies of
// the tenant's policies (syncer/kinds/networkpolicy) then say what such a
// pod may do. The base policies select on the key alone (DoesNotExist), so
// the value does not matter; nest-syncer writes "true". Tenants cannot write
// keys under nest.dev/ (ReservedPrefix), so only nest-syncer sets these.
// Their values are on existing host pods: never change them.
const (
	// LabelIngressIsolated ("true") marks a host pod whose tenant pod some
	// tenant NetworkPolicy of type Ingress selects. nest-syncer sets it
	// (from its networkpolicy kind) when it makes the host pod and whenever
	// the tenant's policies or the pod's labels change, and removes it
	// when no such policy selects the pod any more; nest-manager's
	// <vc>-tenant-ingress policy leaves the pods that carry it out.
	LabelIngressIsolated = "nest.dev/ingress-isolated"
	// LabelEgressIsolated ("true") is LabelIngressIsolated for Egress: it
	// marks a host pod whose tenant pod some tenant NetworkPolicy of type
	// Egress selects, which nest-syncer sets and removes likewise;
	// nest-manager's <vc>-tenant-egress policy, which opens tenant pods to
	// each other and the outside, leaves such pods out.
	LabelEgressIsolated = "nest.dev/egress-isolated"
)
