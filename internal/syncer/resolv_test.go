package syncer

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

func TestHostPodDNSConfig(t *testing.T) {
	cluster := []string{"shop.svc.cluster.local", "svc.cluster.local", "cluster.local"}
	// 197 characters each: the cluster's 54 and ten of them fit in 2048.
	label := strings.Repeat("d", 60)
	long := func(i int) string { return fmt.Sprintf("%s.%s.%s-%02d.example.com", label, label, label, i) }
	var manyLong []string
	for i := range 12 {
		manyLong = append(manyLong, long(i))
	}
	var many []string
	for i := range 40 {
		many = append(many, fmt.Sprintf("s%d.example.com", i))
	}
	tests := []struct {
		name            string
		policy          corev1.DNSPolicy
		tenant          *corev1.PodDNSConfig
		wantNameservers []string
		wantSearches    []string
		wantOptions     []string
		// wantWarning is in the DNSConfigForming warning, "" when there
		// must be none.
		wantWarning string
	}{
		{name: "ClusterFirst: the tenant's CoreDNS", wantNameservers: []string{"10.96.0.6"}, wantSearches: cluster, wantOptions: []string{"ndots=5"}},
		{name: "a valid dnsConfig with 3 nameservers",
			tenant:          &corev1.PodDNSConfig{Nameservers: []string{"1.1.1.1", "8.8.8.8", "9.9.9.9"}, Searches: []string{"corp.example"}},
			wantNameservers: []string{"10.96.0.6", "1.1.1.1", "8.8.8.8"}, wantSearches: append(slices.Clone(cluster), "corp.example"), wantOptions: []string{"ndots=5"},
			wantWarning: "Nameserver limits were exceeded (the tenant's DNS server comes first, then at most 3 in all): omitted 9.9.9.9"},
		{name: "repeats are dropped",
			tenant:          &corev1.PodDNSConfig{Nameservers: []string{"10.96.0.6", "1.1.1.1"}, Searches: []string{"cluster.local", "corp.example", "corp.example"}},
			wantNameservers: []string{"10.96.0.6", "1.1.1.1"}, wantSearches: append(slices.Clone(cluster), "corp.example"), wantOptions: []string{"ndots=5"}},
		{name: "options merge by name, the tenant's value wins",
			tenant:          &corev1.PodDNSConfig{Options: []corev1.PodDNSConfigOption{{Name: "edns0"}, {Name: "ndots", Value: ptr.To("2")}}},
			wantNameservers: []string{"10.96.0.6"}, wantSearches: cluster, wantOptions: []string{"ndots=2", "edns0"}},
		{name: "at most 32 search domains, the cluster's first",
			tenant:          &corev1.PodDNSConfig{Searches: many},
			wantNameservers: []string{"10.96.0.6"}, wantSearches: append(slices.Clone(cluster), many[:29]...), wantOptions: []string{"ndots=5"},
			wantWarning: "Search Line limits were exceeded (at most 32 domains and 2048 characters, the cluster's own first): omitted " + strings.Join(many[29:], " ")},
		{name: "at most 2048 characters of search domains",
			tenant:          &corev1.PodDNSConfig{Searches: manyLong},
			wantNameservers: []string{"10.96.0.6"}, wantSearches: append(slices.Clone(cluster), manyLong[:10]...), wantOptions: []string{"ndots=5"},
			wantWarning: "omitted " + manyLong[10] + " " + manyLong[11]},
		{name: "None keeps the tenant's own", policy: corev1.DNSNone,
			tenant:          &corev1.PodDNSConfig{Nameservers: []string{"1.1.1.1", "8.8.8.8", "9.9.9.9"}, Searches: []string{"corp.example"}},
			wantNameservers: []string{"1.1.1.1", "8.8.8.8", "9.9.9.9"}, wantSearches: []string{"corp.example"}},
		{name: "Default keeps the tenant's own", policy: corev1.DNSDefault,
			tenant:          &corev1.PodDNSConfig{Nameservers: []string{"1.1.1.1"}},
			wantNameservers: []string{"1.1.1.1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := tenantPod()
			p.Spec.DNSPolicy, p.Spec.DNSConfig = tt.policy, tt.tenant
			pt, err := tr.TranslatePod(p, defaultMetadata, nil)
			if err != nil {
				t.Fatal(err)
			}
			c := pt.Pod.Spec.DNSConfig
			var options []string
			for _, o := range c.Options {
				options = append(options, strings.TrimSuffix(o.Name+"="+ptr.Deref(o.Value, ""), "="))
			}
			if !slices.Equal(c.Nameservers, tt.wantNameservers) || !slices.Equal(c.Searches, tt.wantSearches) || !slices.Equal(options, tt.wantOptions) {
				t.Errorf("dnsConfig\n nameservers %v\n searches %v\n options %v\nwant\n nameservers %v\n searches %v\n options %v",
					c.Nameservers, c.Searches, options, tt.wantNameservers, tt.wantSearches, tt.wantOptions)
			}
			var warning string
			for _, w := range pt.Warnings {
				if w.Reason == ReasonDNSConfigForming {
					warning = w.Message
				}
			}
			if (tt.wantWarning == "") != (warning == "") || !strings.Contains(warning, tt.wantWarning) {
				t.Errorf("DNSConfigForming warning %q, want one with %q", warning, tt.wantWarning)
			}
			if len(c.Nameservers) > 3 || len(c.Searches) > 32 || len(strings.Join(c.Searches, " ")) > 2048 {
				t.Errorf("dnsConfig past the API server's limits: %d nameservers, %d searches, %d characters", len(c.Nameservers), len(c.Searches), len(strings.Join(c.Searches, " ")))
			}
		})
	}
}
