package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NodeState says who may use a GlobalNode's node: the host (free) or a
// VirtualCluster (reserved, occupied). It is the kubenest GlobalNode's state.
// +kubebuilder:validation:Enum=free;reserved;occupied
type NodeState string

// States of a GlobalNode.
const (
	// NodeStateFree: the node belongs to the host cluster and no
	// VirtualCluster holds it; node promotion may pick it.
	NodeStateFree NodeState = "free"
	// NodeStateReserved: a VirtualCluster holds the node (node assignment
	// claimed it) and it is not yet a node of the tenant cluster: still in
	// the host, on its way in, or coming back from a move released before
	// it reached the tenant. Nothing else may pick it.
	NodeStateReserved NodeState = "reserved"
	// NodeStateOccupied: the node has become a node of the holder's tenant
	// cluster (phase Tenant). It stays occupied until node promotion brings
	// it home and frees it.
	NodeStateOccupied NodeState = "occupied"
)

// NodePhase is where a GlobalNode's node is in its move between the host
// cluster and a tenant cluster. Conditions carry the detail.
// +kubebuilder:validation:Enum=Host;Draining;Leaving;Joining;Tenant;Releasing;Returning;Failed
type NodePhase string

// Phases of a GlobalNode, in the order promotion and release pass through them.
const (
	// NodePhaseHost: the node is a node of the host cluster.
	NodePhaseHost NodePhase = "Host"
	// NodePhaseDraining: the node is cordoned in the host and its host pods
	// are being evicted.
	NodePhaseDraining NodePhase = "Draining"
	// NodePhaseLeaving: the node's agent is removing it from the host cluster.
	NodePhaseLeaving NodePhase = "Leaving"
	// NodePhaseJoining: the node's agent is joining it to the tenant cluster.
	NodePhaseJoining NodePhase = "Joining"
	// NodePhaseTenant: the node is a node of the tenant cluster.
	NodePhaseTenant NodePhase = "Tenant"
	// NodePhaseReleasing: the node is being drained and removed from the
	// tenant cluster.
	NodePhaseReleasing NodePhase = "Releasing"
	// NodePhaseReturning: the node's agent is joining it to the host cluster again.
	NodePhaseReturning NodePhase = "Returning"
	// NodePhaseFailed: a step of the move failed in a way retrying cannot fix;
	// the conditions say which, and an operator must act.
	NodePhaseFailed NodePhase = "Failed"
)

// AnnotationHeldBy marks the VirtualCluster that holds a GlobalNode, as
// "namespace/name". Node assignment sets it, together with state reserved, in
// one update conditional on the GlobalNode's resourceVersion, so two
// VirtualClusters cannot both take a node; status.virtualCluster follows it.
// It is the record of who holds the node: a GlobalNode carrying it is never a
// candidate for another VirtualCluster, and the inventory controller leaves it
// alone. An annotation, not a label: a label value holds neither the '/' nor
// a long namespace and name.
const AnnotationHeldBy = "nest.dev/held-by"

// Condition types of a GlobalNode.
const (
	// ConditionHostNodePresent is True while the host cluster has a Node of
	// the GlobalNode's name. It is False while the node is away in a tenant
	// cluster, or was removed from the host while a VirtualCluster held it.
	ConditionHostNodePresent = "HostNodePresent"
)

// GlobalNodeSpec is a host node as node promotion sees it.
type GlobalNodeSpec struct {
	// NodeIP is the node's address in the host network: the first InternalIP
	// its kubelet reported. nest-agent on the node is reached there.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=45
	// +kubebuilder:validation:XValidation:rule="isIP(self)",message="nodeIP must be an IPv4 or IPv6 address, such as 198.51.100.11"
	NodeIP string `json:"nodeIP"`

	// State says who may use the node: free (the host), reserved or occupied
	// (the VirtualCluster in status.virtualCluster). Default free.
	// +optional
	// +kubebuilder:default=free
	State NodeState `json:"state,omitempty"`

	// Labels are the host Node's labels, kept in step by nest-manager while
	// the GlobalNode is free and in the host (phase Host). While a
	// VirtualCluster holds the node they keep the labels it had in the host,
	// so promotion policies can still select it by them.
	// +optional
	// +kubebuilder:validation:MaxProperties=1024
	Labels map[string]string `json:"labels,omitempty"`
}

// GlobalNodeStatus is what nest-manager last observed of a GlobalNode's node.
type GlobalNodeStatus struct {
	// VirtualCluster is the holder of the node as "namespace/name"; empty
	// while the GlobalNode is free.
	// +optional
	// +kubebuilder:validation:MaxLength=104
	// +kubebuilder:validation:XValidation:rule="self == '' || self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?/[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="virtualCluster must name a VirtualCluster as namespace/name, such as vc-alpha/alpha"
	VirtualCluster string `json:"virtualCluster,omitempty"`

	// Phase is where the node is in its move between the host and a tenant
	// cluster: Host, Draining, Leaving, Joining, Tenant, Releasing,
	// Returning or Failed. Empty until nest-manager first writes the status.
	// +optional
	Phase NodePhase `json:"phase,omitempty"`

	// PhaseTransitionTime is when the GlobalNode entered Phase.
	// +optional
	PhaseTransitionTime *metav1.Time `json:"phaseTransitionTime,omitempty"`

	// PodCIDR is the node's pod subnet while it is away from the host: the
	// range of its own CNI configuration, which it keeps in the tenant
	// cluster and which the host network routes to it. The holder's host
	// NetworkPolicies let it reach the tenant's pods on virtual nodes.
	// +optional
	PodCIDR string `json:"podCIDR,omitempty"`

	// CABundleHash is the hash (pki.BundleHash: hex SHA-256) of the
	// cluster CA bundle the node's kubelet trusted when it last became
	// Ready in its holder's tenant cluster, with a client certificate from
	// that cluster's signer of the time, as its nest-agent reports it.
	// Empty on the way in, once home, and while the agent reports none
	// (older than nest-manager). When the tenant's cluster CA rotates,
	// node promotion has the node rejoin in place (pods keep running) with
	// each phase's bundle, and the rotation waits for it.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	CABundleHash string `json:"caBundleHash,omitempty"`

	// Conditions: HostNodePresent (the inventory controller) and Moving
	// (node promotion: True while a step of a move is under way or done,
	// False with the reason when a step failed).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// ObservedGeneration is the metadata.generation of the spec that Phase
	// and the conditions describe.
	// +optional
	// +kubebuilder:validation:Minimum=0
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// GlobalNode is the inventory entry of one host node that node promotion may
// move into a tenant cluster: its address, its host labels, and which
// VirtualCluster, if any, holds it. It is named after the host Node and
// outlives it while the node is away in a tenant cluster, where the host
// cluster has no Node for it.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=gn,categories=nest
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.spec.state`
// +kubebuilder:printcolumn:name="VirtualCluster",type=string,JSONPath=`.status.virtualCluster`
// +kubebuilder:printcolumn:name="Node-IP",type=string,JSONPath=`.spec.nodeIP`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type GlobalNode struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the node's address, host labels and state.
	// +required
	Spec GlobalNodeSpec `json:"spec"`
	// Status is where the node is, who holds it, and whether the host has its Node.
	// +optional
	Status GlobalNodeStatus `json:"status,omitempty"`
}

// GlobalNodeList is a list of GlobalNodes.
//
// +kubebuilder:object:root=true
type GlobalNodeList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the GlobalNodes, one per host node in the inventory.
	Items []GlobalNode `json:"items"`
}

// Moved reports whether node promotion has begun to move the node out of
// the host: a phase other than Host (an unwritten phase counts as Host).
// Such a node goes back to the host only through node promotion's release,
// which frees it at the end.
func (gn *GlobalNode) Moved() bool {
	return gn.Status.Phase != "" && gn.Status.Phase != NodePhaseHost
}

// HoldsTenantPods reports whether the node's pods may be its holder's
// tenant pods: from Joining, when the tenant's kubelet may start them, until
// Returning, once the tenant Node is deleted and the node reset (a node
// Failed on its way out of a tenant still holds them). Only then does
// status.podCIDR belong to the tenant.
func (gn *GlobalNode) HoldsTenantPods() bool {
	switch gn.Status.Phase {
	case NodePhaseJoining, NodePhaseTenant, NodePhaseReleasing, NodePhaseFailed:
		return true
	}
	return false
}
