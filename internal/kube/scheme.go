// Package kube holds small helpers shared by Nest's clients of the Kubernetes
// API: the runtime.Scheme that knows every type Nest reads or writes, status
// patches, a pod's addresses (PodAddrs), whether a node is Ready
// (NodeReady) and how a ResourceList is written (FormatResourceList).
package kube

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
)

// NewScheme returns a scheme with the built-in Kubernetes types, CRDs
// (apiextensions.k8s.io/v1) and nest.dev/v1alpha1.
func NewScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(apiextensionsv1.AddToScheme(s))
	utilruntime.Must(nestv1.AddToScheme(s))
	return s
}
