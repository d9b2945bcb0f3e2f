package syncer

import (
	"fmt"
	"slices"
	"strings"
)

// Allow-list entries (MetadataAllowList, --host-labels, --host-annotations).
// An entry is a whole key ("app", "example.com/team"), or ends in "*" to match
// every key that starts with the rest of the entry, where the "*" never spans
// a "/". So "*" is every key without a prefix ("app", "tier"),
// "example.com/*" every key under example.com, and "app*" the unprefixed keys
// that start with "app". A "*" anywhere else is refused. An empty list copies
// nothing.
const wildcard = "*"

// DefaultHostLabels are the tenant label keys copied to host pods when
// --host-labels is not given: every unprefixed key, and the descriptive
// app.kubernetes.io labels, which host dashboards and cost tools group by.
// Keys that Nest or host add-ons act on are never copied (see
// deniedOnHost), whatever the list says.
var DefaultHostLabels = append([]string{wildcard}, describingAppLabels...)

// DefaultHostAnnotations are the tenant annotation keys copied to host pods
// when --host-annotations is not given: none, because host add-ons (service
// meshes, CNI plugins, secret injectors, autoscalers) are configured through
// pod annotations, often under prefixes no list could foresee.
var DefaultHostAnnotations = []string{}

// describingAppLabels are the app.kubernetes.io keys that only describe a
// workload. The others under app.kubernetes.io (managed-by, component) select
// Nest's own control-plane pods and stay denied.
var describingAppLabels = []string{
	"app.kubernetes.io/name",
	"app.kubernetes.io/instance",
	"app.kubernetes.io/version",
	"app.kubernetes.io/part-of",
}

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
	if slices.Contains(describingAppLabels, key) {
		return false
	}
	return slices.ContainsFunc(deniedDomains, func(d string) bool { return prefix == d || strings.HasSuffix(prefix, "."+d) })
}

// allows reports whether one allow-list entry matches key.
func allows(entry, key string) bool {
	stem, wild := strings.CutSuffix(entry, wildcard)
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

// ParseAllowList parses a comma-separated allow-list of label or annotation
// keys (see MetadataAllowList); an entry with a "*" anywhere but at its end
// is an error. The empty string is the empty list, which copies nothing.
func ParseAllowList(s string) ([]string, error) {
	out := []string{}
	for _, e := range strings.Split(s, ",") {
		if e = strings.TrimSpace(e); e == "" {
			continue
		}
		if i := strings.Index(e, wildcard); i >= 0 && i != len(e)-1 {
			return nil, fmt.Errorf("%q: a \"*\" may only end an entry, such as example.com/*", e)
		}
		out = append(out, e)
	}
	return out, nil
}
