// Package v1alpha1 is the nest.dev/v1alpha1 API: VirtualCluster, one tenant's
// complete Kubernetes cluster run inside the host cluster.
//
// Field names follow the Kosmos kubenest VirtualCluster where they overlap
// (externalIPs, promotePolicies, promoteResources, kubeconfig), so its users
// recognise them.
//
// +kubebuilder:object:generate=true
// +groupName=nest.dev
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the API group and version of this package.
	GroupVersion = schema.GroupVersion{Group: "nest.dev", Version: "v1alpha1"}
	// SchemeBuilder registers this package's types with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}
	// AddToScheme adds this package's types to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
