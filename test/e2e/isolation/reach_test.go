package isolation

import (
	"strings"
	"testing"
)

// Reach: alpha's pods open no connection to the host or to beta. Every
// address is one of the local host cluster's. The "own" cases are the
// controls: the same prober does reach what its tenant may.
func (e *env) reaches() []testCase {
	b := e.betaTargets
	dial := func(name string, addrs ...string) testCase {
		return testCase{name, func(t *testing.T) {
			for _, a := range addrs {
				e.blocked(t, a)
			}
		}}
	}
	var kubelets, proxies []string
	for _, ip := range e.nodeIPs {
		kubelets = append(kubelets, hostPort(ip, 10250))
		proxies = append(proxies, hostPort(ip, 10249), hostPort(ip, 10256))
	}
	return []testCase{
		{"own-api-server-and-dns-are-reachable", e.ownReachable},
		dial("host-api-server", e.hostAPIServer, hostPort(e.nodeIPs[0], 6443)),
		dial("host-kubelets", kubelets...),
		dial("kube-proxy-metrics-and-health", proxies...),
		dial("other-tenant-api-server", hostPort(b.controlPlanePod, apiServerPort), hostPort(b.apiServer, apiServerPort)),
		dial("other-tenant-etcd", hostPort(b.controlPlanePod, 2379), hostPort(b.controlPlanePod, 2381)),
		dial("other-tenant-syncer", hostPort(b.controlPlanePod, 10248), hostPort(b.controlPlanePod, 10250)),
		{"other-tenant-coredns", func(t *testing.T) {
			e.dnsBlocked(t, hostPort(b.dns, 53))
			e.blocked(t, hostPort(b.controlPlanePod, 1053))
		}},
		{"host-cluster-dns", func(t *testing.T) {
			e.dnsBlocked(t, hostPort(e.hostDNS, 53))
			e.blocked(t, hostPort(e.hostDNS, 53))
		}},
		dial("other-tenant-pods-and-services", hostPort(b.webPod, 8080), hostPort(b.webService, 8080)),
		dial("own-control-plane-ports-other-than-api-and-dns", hostPort(e.own.controlPlanePod, 2381), hostPort(e.own.controlPlanePod, 10248), hostPort(e.own.controlPlanePod, 10250)),
	}
}

// ownReachable: alpha's prober reaches its own API server (in-cluster
// client) and resolves a name through its own CoreDNS.
func (e *env) ownReachable(t *testing.T) {
	if out := e.mustExec(t, e.alpha, "prober", "kube", "/version"); !strings.Contains(out, "gitVersion") {
		t.Errorf("own API server /version: %s", out)
	}
	// The in-cluster Service, which serves the API server on 443 and DNS.
	if out := e.mustExec(t, e.alpha, "prober", "dns", "kubernetes.default.svc.cluster.local"); !strings.Contains(out, e.own.dns) {
		t.Errorf("own CoreDNS answered %q, want the in-cluster Service's address %s", out, e.own.dns)
	}
	if out := e.mustExec(t, e.alpha, "prober", "dial", hostPort(e.own.controlPlanePod, apiServerPort)); !strings.Contains(out, "connected") {
		t.Errorf("dial own API server: %s", out)
	}
}

// dnsBlocked asserts that a DNS query from alpha's prober to server gets no answer.
func (e *env) dnsBlocked(t *testing.T, server string) {
	t.Helper()
	out, err := exec(e.ctx, e.alpha, "prober", "dns", "kubernetes.default.svc.cluster.local", server)
	if err == nil {
		t.Errorf("DNS server %s answered alpha's pod: %s", server, out)
	} else if !strings.Contains(err.Error(), "timeout") {
		t.Errorf("DNS query to %s failed, but not by timing out (the probe itself may be broken): %v", server, err)
	}
}
