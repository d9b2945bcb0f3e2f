package syncer

import (
	"slices"
	"strings"

	"github.com/nestdev/nest/internal/syncer/contract"
)

// deniedDomains are key prefixes that Nest, Kubernetes or host add-ons act
// on: a key whose prefix is one of these domains or a subdomain of one is
// never copied to a host pod. This covers nest.dev/ and every kubernetes.io
// and k8s.io key (Pod Security, AppArmor, seccomp, cluster-autoscaler,
// app.kubernetes.io/managed-by), Multus, Calico, Vault's injector, Istio,
// Linkerd and Karpenter.
var deniedDomains = []string{
	"nest.dev",
	"kubernetes.io",
	"k8s.io",
	"cni.cncf.io",
	"projectcalico.org",
	"vault.hashicorp.com",
	"istio.io",
	"linkerd.io",
	"karpenter.sh",
}

// deniedNamePrefixes are unprefixed key beginnings that container runtimes
// read from pod annotations, such as CRI-O's io.kubernetes.cri-o.Devices.
var deniedNamePrefixes = []string{"io.kubernetes."}

// deniedOnHost reports whether key is one that Nest, Kubernetes or a host
// add-on acts on, and so must never reach a host pod from a tenant.
func deniedOnHost(key string) bool {
	key = strings.ToLower(key)
	prefix, _, prefixed := strings.Cut(key, "/")
	if !prefixed {
		return slices.ContainsFunc(deniedNamePrefixes, func(p string) bool { return strings.HasPrefix(key, p) })
	}
	if slices.Contains(contract.DescribingAppLabels, key) {
		return false
	}
	return slices.ContainsFunc(deniedDomains, func(d string) bool { return prefix == d || strings.HasSuffix(prefix, "."+d) })
}

// allows reports whether one allow-list entry matches key.
func allows(entry, key string) bool {
	stem, wild := strings.CutSuffix(entry, contract.Wildcard)
	if !wild {
		return entry == key
	}
	rest, ok := strings.CutPrefix(key, stem)
	return ok && !strings.Contains(rest, "/")
}

// copyAllowed returns the entries of tenant whose key the allow-list names
// and the deny list does not: what of a tenant's labels or annotations may
// reach the host. It never returns nil.
func copyAllowed(tenant map[string]string, allowList []string) map[string]string {
	out := map[string]string{}
	for k, v := range tenant {
		if deniedOnHost(k) || !slices.ContainsFunc(allowList, func(e string) bool { return allows(e, k) }) {
			continue
		}
		out[k] = v
	}
	return out
}
