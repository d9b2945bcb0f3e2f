// Package v1alpha1 is the nest.dev/v1alpha1 API: VirtualCluster, one tenant's
// complete Kubernetes cluster run inside the host cluster; GlobalNode, the
// inventory of host nodes that node promotion may move into a tenant cluster;
// and MemberCluster, a cluster outside the host where Nest may place tenant
// pods.
//
// Field names follow the Kosmos kubenest VirtualCluster and GlobalNode where
// they overlap (externalIPs, promotePolicies, promoteResources, kubeconfig;
// nodeIP, state, labels), so its users recognise them.
//
// +kubebuilder:object:generate=true
// +groupName=nest.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Kinds of this package, as API objects and owner references name them.
const (
	VirtualClusterKind = "VirtualCluster"
)

var (
	// GroupVersion is the API group and version of this package.
	GroupVersion = schema.GroupVersion{Group: "nest.dev", Version: "v1alpha1"}
	// SchemeBuilder registers this package's types with a runtime.Scheme. The
	// package depends only on apimachinery, so clients can import it cheaply.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds this package's types to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &VirtualCluster{}, &VirtualClusterList{}, &GlobalNode{}, &GlobalNodeList{},
		&MemberCluster{}, &MemberClusterList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
