package version

import "strings"

// OptionalAPIs are the API group versions that every supported version's
// kube-apiserver leaves off by default and serves resources of once
// `--runtime-config GROUP/VERSION=true` turns them on, with no feature gate
// besides its defaults: what spec.controlPlane.runtimeConfig may name. The
// test starts each supported version's API server with them and checks
// that each serves a resource: a new version that stops serving one fails
// it, and that version's tenants then need a list of their own.
//
// v1.36's metadata says v1.37 removes networking.k8s.io/v1beta1
// (IPAddress, ServiceCIDR) and storage.k8s.io/v1beta1's
// VolumeAttributesClass, which is what the upgrade pre-flight reads, but
// v1.37.2 still serves them when they are turned on.
var OptionalAPIs = []string{"networking.k8s.io/v1beta1", "resource.k8s.io/v1beta1", "resource.k8s.io/v1beta2", "storage.k8s.io/v1beta1"}

// OptionalAPIsRule is the CEL rule on spec.controlPlane.runtimeConfig, a
// map from group version to "true", that OptionalAPIs gives: the CRD's
// marker must be this text (the test checks).
func OptionalAPIsRule() string {
	return "self.all(k, k in ['" + strings.Join(OptionalAPIs, "', '") + "'])"
}
