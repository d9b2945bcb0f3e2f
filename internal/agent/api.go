// Package agent is nest-agent, the node agent of dedicated nodes: the one
// process on a promotable host node that nest-manager asks to take the node
// out of one cluster and join it to another.
//
// The agent serves a small typed HTTP/JSON API over mutual TLS (server.go).
// Both ends hold certificates of the Nest agent CA: the agent's names its
// node, and the agent accepts only clients whose certificate common name is
// in its allow-list (nest-manager by default). It runs no command it is
// sent and writes only the files its own configuration names (Config).
//
// The operations are the steps kubeadm reset and kubeadm join take, each
// idempotent so that a manager that crashed half way simply repeats it:
//
//   - Status: the node's name, whether its kubelet and kube-proxy run, the API
//     server it is joined to, its pod CIDR and how many pod sandboxes remain.
//   - Stop: stop kube-proxy, then the kubelet.
//   - Reset: remove every pod sandbox through the CRI, unmount what the kubelet
//     mounted, wipe its credentials and state, and put back the node's own
//     kubelet, kube-proxy and CNI configuration (saved when the agent first
//     ran), and stop the agent's pull proxy.
//   - Join: serve the node's pull proxy (package pullproxy) if asked, since
//     the host's node network agent serving it is gone while the node is
//     out of the host, or stop it; then write a bootstrap kubeconfig (a
//     bootstrap token, never an admin credential), the kubelet and
//     kube-proxy configuration and, if asked, the CNI configuration for a
//     pod CIDR of the target cluster. A Join to the cluster the kubelet is
//     joined to, with another CA bundle (the cluster's CA rotates), also
//     removes the kubelet's kubeconfig and certificates, so that Start
//     bootstraps them anew from the cluster's signer; pods keep running.
//   - Start: start the kubelet, wait for its TLS bootstrap to finish, then
//     start kube-proxy with the node's own client certificate.
//
// How the kubelet and kube-proxy are started and stopped is a Services
// implementation: processes of the local host cluster (package devcluster),
// or, on real hosts, systemd units (SystemdServices, which `nest agent`
// serves with; deploy/systemd packages it).
package agent

import (
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"

	"github.com/nestdev/nest/internal/pki"
)

// API paths. PathStatus is a GET; the others are POSTs. Every answer of
// these paths is JSON: the operation's result, or an ErrorResponse with a
// non-2xx status. Other paths and methods get the standard library's plain
// 404 and 405.
const (
	PathStatus = "/v1/status"
	PathStop   = "/v1/stop"
	PathReset  = "/v1/reset"
	PathJoin   = "/v1/join"
	PathStart  = "/v1/start"
)

// ManagerIdentity is the certificate common name of nest-manager, the only
// client an agent accepts unless its configuration names others.
const ManagerIdentity = "nest-manager"

// DefaultPort is the agent's TCP port on the node's address. The kubelet and
// kube-proxy use 10248 to 10256 and the control plane 10257 and 10259.
const DefaultPort = 10260

// Status is what GET PathStatus answers: the node as the agent finds it.
type Status struct {
	// NodeName is the node's name, the same in every cluster it joins.
	NodeName string `json:"nodeName"`
	// Kubelet and KubeProxy say whether those services run.
	Kubelet   ServiceStatus `json:"kubelet"`
	KubeProxy ServiceStatus `json:"kubeProxy"`
	// Server is the API server URL of the cluster the node is joined to: the
	// kubelet's kubeconfig's, else its bootstrap kubeconfig's. Empty after a
	// Reset.
	Server string `json:"server,omitempty"`
	// Bootstrapped is true when the kubelet holds a kubeconfig of Server:
	// its TLS bootstrap is done (or it never needed one).
	Bootstrapped bool `json:"bootstrapped"`
	// CAHash is pki.BundleHash of the CA bundle of the kubelet's
	// kubeconfig: what it trusts for Server, and what it bootstrapped its
	// client certificate with. Empty while it has no kubeconfig.
	CAHash string `json:"caHash,omitempty"`
	// PodCIDR is the subnet of the node's CNI configuration.
	PodCIDR string `json:"podCIDR,omitempty"`
	// Sandboxes is the number of pod sandboxes the container runtime holds,
	// ready or not. Zero after a Reset.
	Sandboxes int `json:"sandboxes"`
}

// ServiceStatus is the state of one of the node's services.
type ServiceStatus struct {
	Running bool `json:"running"`
}

// JoinRequest is the body of POST PathJoin: the cluster the node's kubelet is
// to join, and how the node is set up for it.
type JoinRequest struct {
	// Server is the target API server's https URL, as the node reaches it.
	Server string `json:"server"`
	// CACertPEM verifies the target API server's serving certificate.
	CACertPEM []byte `json:"caCertPEM"`
	// KubeletClientCAPEM verifies the clients of the kubelet's own API: the
	// target API server's kubelet-client certificate (logs, exec, port-forward).
	// Empty keeps the node's own configuration's, as when it returns home.
	KubeletClientCAPEM []byte `json:"kubeletClientCAPEM,omitempty"`
	// BootstrapToken is a bootstrap token of the target cluster,
	// "<6 chars>.<16 chars>" of [a-z0-9]. The kubelet uses it only to ask for
	// its own client certificate (TLS bootstrapping).
	BootstrapToken string `json:"bootstrapToken"`
	// ClusterDNS and ClusterDomain are the target cluster's DNS Service
	// addresses and domain; empty keeps the node's own configuration's.
	ClusterDNS    []string `json:"clusterDNS,omitempty"`
	ClusterDomain string   `json:"clusterDomain,omitempty"`
	// ClusterCIDR is the target cluster's pod range, which kube-proxy treats
	// as local traffic; empty keeps the node's own configuration's.
	ClusterCIDR string `json:"clusterCIDR,omitempty"`
	// PodCIDR is the node's pod subnet in the target cluster; the agent writes
	// a CNI configuration for it. Empty keeps the node's own CNI configuration.
	PodCIDR string `json:"podCIDR,omitempty"`
	// ServerTLSBootstrap makes the kubelet ask the target cluster to sign its
	// serving certificate, instead of the one its own configuration names.
	ServerTLSBootstrap bool `json:"serverTLSBootstrap,omitempty"`
	// PullProxy, when set, makes the agent serve the node's pull proxy
	// (package pullproxy) at pullproxy.DefaultAddress while the node is in
	// the target cluster: the host's node network agent, which serves it
	// while the node is in the host, is gone with the host's pods. Nil stops
	// the agent's proxy, as when the node returns home.
	PullProxy *PullProxy `json:"pullProxy,omitempty"`
}

// PullProxy is how the agent's pull proxy checks and reaches registries
// (pullproxy.Config).
type PullProxy struct {
	// Deny are CIDRs (such as 10.244.0.0/16) no registry, redirect or token
	// realm may resolve to, besides pullproxy.AlwaysDenied: the host's own
	// ranges and the platform's denied registry ranges.
	Deny []string `json:"deny,omitempty"`
	// PlainHTTP are registries (host or host:port) reached over HTTP.
	PlainHTTP []string `json:"plainHTTP,omitempty"`
}

// denyPrefixes parses Deny; the error names the entry and the fix.
func (p PullProxy) denyPrefixes() ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(p.Deny))
	for i, c := range p.Deny {
		prefix, err := netip.ParsePrefix(c)
		if err != nil {
			return nil, fmt.Errorf("pullProxy.deny[%d]: must be a CIDR such as 10.244.0.0/16, got %q", i, c)
		}
		out = append(out, prefix.Masked())
	}
	return out, nil
}

// ErrorResponse is the body of every failed request.
type ErrorResponse struct {
	Error string `json:"error"`
}

var bootstrapTokenPattern = regexp.MustCompile(bootstrapapi.BootstrapTokenPattern)

// Validate reports the first field of r that the agent cannot use, by its
// JSON name, with what it must be.
func (r JoinRequest) Validate() error {
	u, err := url.Parse(r.Server)
	if err != nil || u.Scheme != "https" || u.Hostname() == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" || (u.Path != "" && u.Path != "/") {
		return fmt.Errorf("server: must be an https URL with a host and no user, path, query or fragment, such as https://198.51.100.10:6443, got %q", r.Server)
	}
	if _, err := pki.ParseCertificate(r.CACertPEM); err != nil {
		return fmt.Errorf("caCertPEM: must be the PEM certificate of the API server's CA: %v", err)
	}
	if _, err := pki.ParseCertificate(r.KubeletClientCAPEM); len(r.KubeletClientCAPEM) > 0 && err != nil {
		return fmt.Errorf("kubeletClientCAPEM: must be the PEM certificate of the CA of the API server's kubelet client: %v", err)
	}
	if !bootstrapTokenPattern.MatchString(r.BootstrapToken) {
		return fmt.Errorf("bootstrapToken: must be a bootstrap token, 6 and 16 characters of [a-z0-9] joined by a dot")
	}
	for i, ip := range r.ClusterDNS {
		if net.ParseIP(ip) == nil {
			return fmt.Errorf("clusterDNS[%d]: must be an IP address, got %q", i, ip)
		}
	}
	if r.ClusterDomain != "" {
		if msgs := validation.IsDNS1123Subdomain(r.ClusterDomain); len(msgs) > 0 {
			return fmt.Errorf("clusterDomain: must be a DNS domain such as cluster.local, got %q: %s", r.ClusterDomain, strings.Join(msgs, "; "))
		}
	}
	for _, f := range []struct{ name, cidr string }{{"clusterCIDR", r.ClusterCIDR}, {"podCIDR", r.PodCIDR}} {
		if f.cidr == "" {
			continue
		}
		if _, _, err := net.ParseCIDR(f.cidr); err != nil {
			return fmt.Errorf("%s: must be a CIDR such as 10.244.1.0/24, got %q", f.name, f.cidr)
		}
	}
	if r.PullProxy != nil {
		if _, err := r.PullProxy.denyPrefixes(); err != nil {
			return err
		}
		for i, reg := range r.PullProxy.PlainHTTP {
			if reg == "" || strings.ContainsAny(reg, "/?#@ ") {
				return fmt.Errorf("pullProxy.plainHTTP[%d]: must be a registry host or host:port such as registry.example.com:5000, got %q", i, reg)
			}
		}
	}
	return nil
}

// String hides the token's secret half, so a logged request gives nothing
// away; a malformed token is not shown at all.
func (r JoinRequest) String() string {
	token := "<invalid>"
	if bootstrapTokenPattern.MatchString(r.BootstrapToken) {
		id, _, _ := strings.Cut(r.BootstrapToken, ".")
		token = id + ".<secret>"
	}
	proxy := "no pull proxy"
	if r.PullProxy != nil {
		proxy = fmt.Sprintf("a pull proxy denying %v", r.PullProxy.Deny)
	}
	return fmt.Sprintf("join %s with bootstrap token %s, pod CIDR %q, %s", r.Server, token, r.PodCIDR, proxy)
}
