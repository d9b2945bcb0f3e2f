package syncer

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// Limits the API server enforces on a pod's dnsConfig (MaxDNSNameservers,
// MaxDNSSearchPaths and MaxDNSSearchListChars in k8s.io/kubernetes'
// pkg/apis/core/validation, not importable here). A host pod past them is
// refused by the host.
const (
	maxNameservers     = 3
	maxSearchPaths     = 32
	maxSearchListChars = 2048
)

// dnsConfig is the resolver configuration of a host pod whose tenant pod uses
// ClusterFirst: the tenant's CoreDNS and the tenant search path, merged with
// the tenant's own dnsConfig the way the kubelet merges ClusterFirst with
// dnsConfig, cut to the limits the API server enforces. dropped says, for
// the tenant, which nameservers and search domains were cut ("" when none
// were), as the kubelet's DNSConfigForming event does.
func (t Translator) dnsConfig(namespace string, tenant *corev1.PodDNSConfig) (c *corev1.PodDNSConfig, dropped string) {
	c = &corev1.PodDNSConfig{
		Nameservers: []string{t.DNSServer},
		Searches:    t.searchPath(namespace),
		Options:     []corev1.PodDNSConfigOption{{Name: "ndots", Value: ptr.To("5")}},
	}
	if tenant == nil {
		return c, ""
	}
	nameservers := dedupe(append(c.Nameservers, tenant.Nameservers...))
	searches := dedupe(append(c.Searches, tenant.Searches...))
	c.Nameservers = firstN(nameservers, maxNameservers)
	c.Searches = fitSearchList(searches)
	c.Options = mergeDNSOptions(c.Options, tenant.Options)
	var parts []string
	if cut := nameservers[len(c.Nameservers):]; len(cut) > 0 {
		parts = append(parts, fmt.Sprintf("Nameserver limits were exceeded (the tenant's DNS server comes first, then at most %d in all): omitted %s", maxNameservers, strings.Join(cut, " ")))
	}
	if cut := searches[len(c.Searches):]; len(cut) > 0 {
		parts = append(parts, fmt.Sprintf("Search Line limits were exceeded (at most %d domains and %d characters, the cluster's own first): omitted %s", maxSearchPaths, maxSearchListChars, strings.Join(cut, " ")))
	}
	return c, strings.Join(parts, "; ")
}

// searchPath is the tenant DNS search path of a namespace, as the kubelet
// writes it for ClusterFirst.
func (t Translator) searchPath(namespace string) []string {
	return []string{namespace + ".svc." + t.ClusterDomain, "svc." + t.ClusterDomain, t.ClusterDomain}
}

// dedupe drops repeated entries, keeping the first of each.
func dedupe(list []string) []string {
	var out []string
	for _, s := range list {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

func firstN(list []string, n int) []string {
	if len(list) > n {
		return list[:n]
	}
	return list
}

// fitSearchList cuts a search list to the API server's limits by dropping
// entries from the end, as the kubelet does: the cluster's own search path
// comes first and is always kept.
func fitSearchList(searches []string) []string {
	searches = firstN(searches, maxSearchPaths)
	for len(searches) > 0 && len(strings.Join(searches, " ")) > maxSearchListChars {
		searches = searches[:len(searches)-1]
	}
	return searches
}

// mergeDNSOptions merges resolver options by name: a tenant option replaces
// Nest's option of the same name in place, and new ones follow in the
// tenant's order.
func mergeDNSOptions(base, tenant []corev1.PodDNSConfigOption) []corev1.PodDNSConfigOption {
	out := slices.Clone(base)
	for _, o := range tenant {
		if i := slices.IndexFunc(out, func(b corev1.PodDNSConfigOption) bool { return b.Name == o.Name }); i >= 0 {
			out[i] = o
			continue
		}
		out = append(out, o)
	}
	return out
}
