package version

import (
	"fmt"
	"slices"
	"strings"
)

// OptionalAPIs are, per supported version, the API group versions its
// kube-apiserver leaves off by default and serves resources of once
// `--runtime-config GROUP/VERSION=true` turns them on, with no feature gate
// besides its defaults: what spec.controlPlane.runtimeConfig may name. The
// test starts each version's API server with every group version of every
// list and checks that it serves resources of exactly those of its own.
//
// v1.37 removed networking.k8s.io/v1beta1's last resources (IPAddress,
// ServiceCIDR) and storage.k8s.io/v1beta1's (VolumeAttributesClass): its
// API server accepts them in --runtime-config and serves nothing of them.
var OptionalAPIs = map[string][]string{
	Kubernetes: {"networking.k8s.io/v1beta1", "resource.k8s.io/v1beta1", "resource.k8s.io/v1beta2", "storage.k8s.io/v1beta1"},
	"v1.37.2":  {"resource.k8s.io/v1beta1", "resource.k8s.io/v1beta2"},
}

// AllOptionalAPIs is every group version of OptionalAPIs, sorted, once:
// those the CRD's rule on spec.controlPlane.runtimeConfig accepts.
func AllOptionalAPIs() []string {
	var all []string
	for _, v := range Supported {
		all = append(all, OptionalAPIs[v]...)
	}
	slices.Sort(all)
	return slices.Compact(all)
}

// ServesOptionalAPI says whether version v's API server serves resources
// of the optional group version gv once it is turned on.
func ServesOptionalAPI(v, gv string) bool { return slices.Contains(OptionalAPIs[v], gv) }

// OptionalAPIsRule is the CEL rule on spec.controlPlane.runtimeConfig, a
// map from group version to "true", that AllOptionalAPIs gives: the CRD's
// marker must be this text (the test checks).
func OptionalAPIsRule() string {
	return "self.all(k, k in ['" + strings.Join(AllOptionalAPIs(), "', '") + "'])"
}

// ParseRuntimeConfig reads group versions to turn on in a control plane of
// version v, each "GROUP/VERSION" or "GROUP/VERSION=true" as
// kube-apiserver's --runtime-config takes them, into
// spec.controlPlane.runtimeConfig's map. An entry that v does not serve
// once on (OptionalAPIs), or whose value is not true, is an error naming it
// and the accepted ones.
func ParseRuntimeConfig(v string, entries []string) (map[string]string, error) {
	out := map[string]string{}
	for _, e := range entries {
		gv, value, hasValue := strings.Cut(e, "=")
		if hasValue && value != "true" {
			return nil, fmt.Errorf("%q: only turning a group version on is supported (GROUP/VERSION or GROUP/VERSION=true)", e)
		}
		if !ServesOptionalAPI(v, gv) {
			return nil, fmt.Errorf("%q: not a group version off by default that %s serves; want one of %s", gv, v, strings.Join(OptionalAPIs[v], ", "))
		}
		out[gv] = "true"
	}
	return out, nil
}
