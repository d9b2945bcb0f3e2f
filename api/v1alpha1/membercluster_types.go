package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DefaultKubeconfigKey is the key of a MemberCluster's kubeconfig Secret that
// holds the kubeconfig when spec.kubeconfigSecretRef.key is not set.
const DefaultKubeconfigKey = "kubeconfig"

// Condition types of a MemberCluster.
const (
	// ConditionReachable is True when nest-manager's last probe read the
	// kubeconfig Secret, built a client from it and listed the member's
	// Nodes. The reason says which step failed otherwise.
	ConditionReachable = "Reachable"
	// ConditionInjectorReady is True when every Ready grant on the member
	// that has a member network (status.members[].network NodePort or
	// LoadBalancer of the VirtualCluster) has a network injector that
	// answers: a mutating webhook in the grant's namespace, registered by
	// nest-manager and served by nest-syncer, that holds the tenant's pods
	// there to its API server and DNS (a server-side dry-run pod came back
	// with them set; see status.members[].injectorReady). It is False with
	// reason NoGrants when no VirtualCluster has a Ready grant on the
	// member, NoMemberNetwork when no Ready grant has a member network (no
	// injector is installed), and NotReady naming the grants whose injector
	// does not answer.
	ConditionInjectorReady = "InjectorReady"
)

// SecretKeyRef names one key of a Secret in the host cluster.
type SecretKeyRef struct {
	// Namespace of the Secret. nest-manager reads it only in its own
	// namespace (nest-system by default): a Secret elsewhere is refused
	// with the Reachable condition (reason SecretNotAllowed).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="kubeconfigSecretRef.namespace must be a namespace name (lower-case letters, digits and '-'), such as nest-system"
	Namespace string `json:"namespace"`

	// Name of the Secret.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",message="kubeconfigSecretRef.name must be a Secret name (lower-case letters, digits, '-' and '.'), such as nest-member-gpu-pool"
	Name string `json:"name"`

	// Key of the Secret's data that holds the kubeconfig. Default kubeconfig.
	// +optional
	// +kubebuilder:default=kubeconfig
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[-._a-zA-Z0-9]+$')",message="kubeconfigSecretRef.key must be a Secret data key (letters, digits, '-', '_' and '.'), such as kubeconfig"
	Key string `json:"key,omitempty"`
}

// MemberNetwork is where pods Nest places in a member cluster reach their
// tenant's API server, DNS and Services, when the tenant is not reached
// through the host's load balancer. A tenant whose host Service is a
// LoadBalancer is reached through LoadBalancer addresses by default: its
// API server at its own address, and its DNS, the member's network
// injector and its exposed Services at the address of one more
// LoadBalancer Service per grant. These fields are the platform's own
// paths, for hosts without a load balancer or members that cannot reach
// its addresses, and each one set is used in place of that default.
// nest-manager does not probe them.
type MemberNetwork struct {
	// APIServerAddress is host:port of the member's load balancer in front
	// of tenant API servers, such as 10.20.0.5:6443 or [2001:db8::5]:6443.
	// Unset: member pods reach each tenant's API server at its host
	// LoadBalancer address, and a grant of a tenant without one is not
	// Ready (NoPathToTenant).
	// +optional
	// +kubebuilder:validation:MinLength=3
	// +kubebuilder:validation:MaxLength=261
	// +kubebuilder:validation:XValidation:rule="self.matches('^([a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?([.][a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?)*|[[][0-9a-fA-F:.]+[]]):[0-9]{1,5}$')",message="network.apiServerAddress must be host:port, such as 10.20.0.5:6443, lb.member.example:6443 or [2001:db8::5]:6443"
	// +kubebuilder:validation:XValidation:rule="!self.matches(':[0-9]{1,5}$') || (int(self.substring(self.lastIndexOf(':') + 1)) >= 1 && int(self.substring(self.lastIndexOf(':') + 1)) <= 65535)",message="network.apiServerAddress: the port must be 1 to 65535"
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('[') || self.indexOf(']') < 0 || isIP(self.substring(1, self.indexOf(']')))",message="network.apiServerAddress: an IPv6 host must be a valid address in brackets, such as [2001:db8::5]:6443"
	APIServerAddress string `json:"apiServerAddress,omitempty"`

	// DNSAddress is where pods in the member reach their tenant's DNS: an
	// IP address (port 53), or host:port. It is used only for a tenant
	// reached neither through NodePortAddress nor through a host
	// LoadBalancer; such a tenant's member pods reach no tenant Service
	// but the API server, and get no network injector. A grant that needs
	// it while it is unset is not Ready (NoPathToTenant).
	// +optional
	// +kubebuilder:validation:MinLength=2
	// +kubebuilder:validation:MaxLength=261
	// +kubebuilder:validation:XValidation:rule="isIP(self) || self.matches('^([a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?([.][a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?)*|[[][0-9a-fA-F:.]+[]]):[0-9]{1,5}$')",message="network.dnsAddress must be an IP address or host:port, such as 10.20.0.10, 10.20.0.10:53 or [2001:db8::a]:53"
	// +kubebuilder:validation:XValidation:rule="isIP(self) || !self.matches(':[0-9]{1,5}$') || (int(self.substring(self.lastIndexOf(':') + 1)) >= 1 && int(self.substring(self.lastIndexOf(':') + 1)) <= 65535)",message="network.dnsAddress: the port must be 1 to 65535"
	// +kubebuilder:validation:XValidation:rule="isIP(self) || !self.startsWith('[') || self.indexOf(']') < 0 || isIP(self.substring(1, self.indexOf(']')))",message="network.dnsAddress: an IPv6 host must be a valid address in brackets, such as [2001:db8::a]:53"
	DNSAddress string `json:"dnsAddress,omitempty"`

	// NodePortAddress is an IP address where the member's nodes reach the
	// host cluster's node ports: a host node, or a load balancer that
	// forwards the node-port range to host nodes. When it is set, Nest
	// exposes each tenant's DNS, its API server's in-cluster name, the
	// member's network injector and the tenant's NodePort and LoadBalancer
	// Services to the tenant's pods in the member through a host NodePort
	// Service per grant, reached at this address, even for tenants with a
	// host LoadBalancer.
	// +optional
	// +kubebuilder:validation:MaxLength=45
	// +kubebuilder:validation:XValidation:rule="isIP(self)",message="network.nodePortAddress must be an IP address, such as 10.20.0.1 or 2001:db8::1"
	NodePortAddress string `json:"nodePortAddress,omitempty"`
}

// MemberClusterSpec is a member cluster as the platform team registers it.
type MemberClusterSpec struct {
	// KubeconfigSecretRef names the host Secret holding the kubeconfig
	// nest-manager uses to reach the member. It must be in nest-manager's
	// namespace. The kubeconfig may not run commands (exec, auth-provider)
	// or read files: it is used inside nest-manager's pod.
	// +required
	KubeconfigSecretRef SecretKeyRef `json:"kubeconfigSecretRef"`

	// Network is where pods in the member reach their tenant when not
	// through the host's load balancer. Unset: through it only.
	// +optional
	Network MemberNetwork `json:"network,omitempty"`

	// VirtualClusterSelector chooses the VirtualClusters (by their labels)
	// that may place pods in the member. Unset: none may. An empty selector
	// ({}) selects every VirtualCluster, as an empty label selector does
	// everywhere in Kubernetes.
	// +optional
	// +kubebuilder:validation:XValidation:rule="!has(self.matchExpressions) || self.matchExpressions.all(e, e.operator in ['In', 'NotIn', 'Exists', 'DoesNotExist'])",message="virtualClusterSelector.matchExpressions[].operator must be In, NotIn, Exists or DoesNotExist"
	// +kubebuilder:validation:XValidation:rule="!has(self.matchExpressions) || self.matchExpressions.all(e, !(e.operator in ['In', 'NotIn']) || (has(e.values) && size(e.values) > 0))",message="virtualClusterSelector.matchExpressions[].values must not be empty for In and NotIn"
	// +kubebuilder:validation:XValidation:rule="!has(self.matchExpressions) || self.matchExpressions.all(e, !(e.operator in ['Exists', 'DoesNotExist']) || !has(e.values) || size(e.values) == 0)",message="virtualClusterSelector.matchExpressions[].values must be empty for Exists and DoesNotExist"
	VirtualClusterSelector *metav1.LabelSelector `json:"virtualClusterSelector,omitempty"`

	// Resources caps what Nest places in the member, per resource (cpu,
	// memory, nvidia.com/gpu, ...): status.allocatable never exceeds it. A
	// resource it does not name is not capped.
	// +optional
	// +kubebuilder:validation:Type=object
	// +kubebuilder:validation:MaxProperties=16
	// +kubebuilder:validation:XValidation:rule="self.all(k, !string(self[k]).startsWith('-'))",message="resources: every quantity must be zero or more, such as cpu: 64 or nvidia.com/gpu: 8"
	Resources corev1.ResourceList `json:"resources,omitempty"`
}

// MemberClusterStatus is what nest-manager's last probe found.
type MemberClusterStatus struct {
	// Conditions: Reachable, InjectorReady.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// Capacity is the sum of the capacity of the member's Ready,
	// schedulable Nodes.
	// +optional
	Capacity corev1.ResourceList `json:"capacity,omitempty"`

	// Allocatable is the sum of the allocatable resources of the member's
	// Ready, schedulable Nodes, each capped by spec.resources.
	// +optional
	Allocatable corev1.ResourceList `json:"allocatable,omitempty"`

	// Nodes is how many of the member's Nodes are Ready and schedulable:
	// those summed in capacity and allocatable.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Nodes int32 `json:"nodes,omitempty"`

	// ObservedGeneration is the metadata.generation of the spec the last
	// probe used.
	// +optional
	// +kubebuilder:validation:Minimum=0
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// LastProbeTime is when nest-manager last probed the member.
	// +optional
	LastProbeTime *metav1.Time `json:"lastProbeTime,omitempty"`
}

// MemberCluster is a Kubernetes cluster, outside the host, where Nest may
// place tenant pods (such as a remote GPU pool). The platform team owns it:
// it is cluster-scoped, and tenants never see it.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=mc,categories=nest
// +kubebuilder:printcolumn:name="Reachable",type=string,JSONPath=`.status.conditions[?(@.type=="Reachable")].status`
// +kubebuilder:printcolumn:name="CPU",type=string,JSONPath=`.status.allocatable.cpu`
// +kubebuilder:printcolumn:name="Memory",type=string,JSONPath=`.status.allocatable.memory`
// +kubebuilder:printcolumn:name="GPU",type=string,JSONPath=`.status.allocatable.nvidia\.com/gpu`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type MemberCluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is how to reach the member, who may use it and how much of it.
	// +required
	Spec MemberClusterSpec `json:"spec"`
	// Status is whether the member answers and what it offers.
	// +optional
	Status MemberClusterStatus `json:"status,omitempty"`
}

// MemberClusterList is a list of MemberClusters.
//
// +kubebuilder:object:root=true
type MemberClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the MemberClusters.
	Items []MemberCluster `json:"items"`
}
