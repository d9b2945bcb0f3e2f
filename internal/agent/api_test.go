package agent

import (
	"strings"
	"testing"

	"github.com/nestdev/nest/internal/pki"
)

const (
	testTokenID     = "abcdef"
	testTokenSecret = "0123456789abcdef"
	testToken       = testTokenID + "." + testTokenSecret
	// homeServer is the server of the node's own cluster (the fixture's
	// kubelet kubeconfig); targetServer the cluster the tests join.
	homeServer   = "https://198.51.100.10:6443"
	targetServer = "https://203.0.113.20:6443"
)

// newCACertPEM is the PEM certificate of a fresh CA named name.
func newCACertPEM(t *testing.T, name string) []byte {
	t.Helper()
	ca, err := pki.NewCA(name)
	if err != nil {
		t.Fatal(err)
	}
	return ca.CertPEM
}

// validJoinRequest sets every field of a JoinRequest to a usable value.
func validJoinRequest(t *testing.T) JoinRequest {
	t.Helper()
	return JoinRequest{
		Server:             targetServer,
		CACertPEM:          newCACertPEM(t, "kubernetes"),
		KubeletClientCAPEM: newCACertPEM(t, "kubelet-client-ca"),
		BootstrapToken:     testToken,
		ClusterDNS:         []string{"10.112.0.10", "fd00:10:112::a"},
		ClusterDomain:      "target.local",
		ClusterCIDR:        "10.120.0.0/16",
		PodCIDR:            "10.120.3.0/24",
		ServerTLSBootstrap: true,
	}
}

func TestJoinRequestValidateAcceptsValidRequests(t *testing.T) {
	full := validJoinRequest(t)
	tests := []struct {
		name   string
		mutate func(r *JoinRequest)
	}{
		{"every field set", func(r *JoinRequest) {}},
		{"only the required fields", func(r *JoinRequest) {
			*r = JoinRequest{Server: r.Server, CACertPEM: r.CACertPEM, BootstrapToken: r.BootstrapToken}
		}},
		{"server with a root path", func(r *JoinRequest) { r.Server = targetServer + "/" }},
		{"server without a port", func(r *JoinRequest) { r.Server = "https://api.target.example" }},
		{"IPv6 server", func(r *JoinRequest) { r.Server = "https://[2001:db8::1]:6443" }},
		{"IPv6 pod CIDR", func(r *JoinRequest) { r.PodCIDR = "fd00:10:244:1::/64" }},
		{"pull proxy", func(r *JoinRequest) {
			r.PullProxy = &PullProxy{Deny: []string{"10.244.0.0/16", "fd00::/8"}, PlainHTTP: []string{"registry.local:5000"}}
		}},
		{"pull proxy denying nothing more", func(r *JoinRequest) { r.PullProxy = &PullProxy{} }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := full
			tt.mutate(&r)
			if err := r.Validate(); err != nil {
				t.Errorf("Validate() = %v, want nil", err)
			}
		})
	}
}

func TestJoinRequestValidateNamesTheBadField(t *testing.T) {
	full := validJoinRequest(t)
	tests := []struct {
		name   string
		field  string
		mutate func(r *JoinRequest)
	}{
		{"server not https", "server", func(r *JoinRequest) { r.Server = "http://203.0.113.20:6443" }},
		{"server with a path", "server", func(r *JoinRequest) { r.Server = targetServer + "/api" }},
		{"server empty", "server", func(r *JoinRequest) { r.Server = "" }},
		{"server without a host", "server", func(r *JoinRequest) { r.Server = "https://" }},
		{"server not a URL", "server", func(r *JoinRequest) { r.Server = "https://203.0.113.20:6443/%zz" }},
		{"caCertPEM garbage", "caCertPEM", func(r *JoinRequest) { r.CACertPEM = []byte("not a certificate") }},
		{"caCertPEM empty", "caCertPEM", func(r *JoinRequest) { r.CACertPEM = nil }},
		{"caCertPEM a key", "caCertPEM", func(r *JoinRequest) {
			r.CACertPEM = []byte("-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n")
		}},
		{"kubeletClientCAPEM garbage", "kubeletClientCAPEM", func(r *JoinRequest) { r.KubeletClientCAPEM = []byte("garbage") }},
		{"bootstrapToken empty", "bootstrapToken", func(r *JoinRequest) { r.BootstrapToken = "" }},
		{"bootstrapToken without a dot", "bootstrapToken", func(r *JoinRequest) { r.BootstrapToken = testTokenID + testTokenSecret }},
		{"bootstrapToken secret too short", "bootstrapToken", func(r *JoinRequest) { r.BootstrapToken = testTokenID + ".0123456789abcde" }},
		{"bootstrapToken upper case", "bootstrapToken", func(r *JoinRequest) { r.BootstrapToken = "ABCDEF." + testTokenSecret }},
		{"bootstrapToken with trailing text", "bootstrapToken", func(r *JoinRequest) { r.BootstrapToken = testToken + "x" }},
		{"clusterDNS[1] not an IP", "clusterDNS[1]", func(r *JoinRequest) { r.ClusterDNS = []string{"10.112.0.10", "kube-dns"} }},
		{"clusterDNS[0] empty", "clusterDNS[0]", func(r *JoinRequest) { r.ClusterDNS = []string{""} }},
		{"clusterDomain with trailing dot", "clusterDomain", func(r *JoinRequest) { r.ClusterDomain = "cluster.local." }},
		{"clusterDomain with leading dot", "clusterDomain", func(r *JoinRequest) { r.ClusterDomain = ".cluster.local" }},
		{"clusterDomain with a slash", "clusterDomain", func(r *JoinRequest) { r.ClusterDomain = "cluster/local" }},
		{"clusterCIDR an address", "clusterCIDR", func(r *JoinRequest) { r.ClusterCIDR = "10.120.0.0" }},
		{"clusterCIDR prefix too long", "clusterCIDR", func(r *JoinRequest) { r.ClusterCIDR = "10.120.0.0/33" }},
		{"podCIDR an address", "podCIDR", func(r *JoinRequest) { r.PodCIDR = "10.120.3.0" }},
		{"podCIDR garbage", "podCIDR", func(r *JoinRequest) { r.PodCIDR = "pods" }},
		{"pullProxy.deny[1] an address", "pullProxy.deny[1]", func(r *JoinRequest) {
			r.PullProxy = &PullProxy{Deny: []string{"10.244.0.0/16", "192.0.2.1"}}
		}},
		{"pullProxy.deny[0] a name", "pullProxy.deny[0]", func(r *JoinRequest) { r.PullProxy = &PullProxy{Deny: []string{"registry.example.com"}} }},
		{"pullProxy.plainHTTP[0] a URL", "pullProxy.plainHTTP[0]", func(r *JoinRequest) {
			r.PullProxy = &PullProxy{PlainHTTP: []string{"http://registry.local:5000/"}}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := full
			tt.mutate(&r)
			err := r.Validate()
			if err == nil {
				t.Fatalf("Validate() = nil, want an error naming %s", tt.field)
			}
			if !strings.HasPrefix(err.Error(), tt.field+":") {
				t.Errorf("Validate() = %q, want it to start with %q", err, tt.field+":")
			}
		})
	}
}

func TestJoinRequestStringHidesTheTokenSecret(t *testing.T) {
	r := validJoinRequest(t)
	s := r.String()
	if strings.Contains(s, testTokenSecret) {
		t.Errorf("String() = %q shows the token's secret", s)
	}
	for _, want := range []string{testTokenID, targetServer, r.PodCIDR} {
		if !strings.Contains(s, want) {
			t.Errorf("String() = %q, want it to contain %q", s, want)
		}
	}
}

func TestJoinRequestStringSaysWhetherItAsksForAPullProxy(t *testing.T) {
	r := validJoinRequest(t)
	if s := r.String(); !strings.Contains(s, "no pull proxy") {
		t.Errorf("String() = %q, want it to say the join asks for no pull proxy", s)
	}
	r.PullProxy = &PullProxy{Deny: []string{"10.244.0.0/16"}}
	if s := r.String(); !strings.Contains(s, "pull proxy denying [10.244.0.0/16]") {
		t.Errorf("String() = %q, want it to name the pull proxy's deny list", s)
	}
}
