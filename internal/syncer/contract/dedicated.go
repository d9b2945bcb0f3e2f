package contract

import (
	"net/netip"
	"slices"
	"strings"
)

// Dedicated nodes are host nodes that node promotion moved into the tenant
// cluster. Their pods are the tenant's, but not host pods, so the host's
// EndpointSlice controller never names them behind a host Service. The
// syncer adds them to the host copies of the tenant's Services, admitting
// only addresses in the pod CIDRs of the nodes the tenant holds. Those
// ranges come from nest-manager, which writes them to a host ConfigMap in
// the tenant's namespace, never from the tenant, whose Node objects are its
// own to write. The same ConfigMap holds the nodes' IPs: nest-syncer's
// egress proxy lets the tenant API server reach their kubelets there, and
// their pod CIDRs, for logs, exec, webhooks and the proxy subresources.

// DedicatedNodesConfigMap is the name of that host ConfigMap for the
// VirtualCluster vc; DedicatedPodCIDRsKey and DedicatedNodeIPsKey are its
// keys.
func DedicatedNodesConfigMap(vc string) string { return vc + "-dedicated-nodes" }

// DedicatedPodCIDRsKey is the ConfigMap key of the dedicated nodes' pod
// CIDRs, one a line (FormatPodCIDRs).
const DedicatedPodCIDRsKey = "podCIDRs"

// DedicatedNodeIPsKey is the ConfigMap key of the dedicated nodes' IPs in
// the host network (GlobalNode spec.nodeIP), one a line (FormatNodeIPs).
const DedicatedNodeIPsKey = "nodeIPs"

// DedicatedKubeletPort is the port of a dedicated node's kubelet API at its
// node IP: the kubelet's default, which node promotion keeps (the node's
// kubelet runs with its own configuration, only its clients and
// certificates changed).
const DedicatedKubeletPort = 10250

// FormatNodeIPs writes addrs one a line, sorted and without repeats, as
// ParseNodeIPs reads them.
func FormatNodeIPs(addrs []netip.Addr) string {
	sorted := slices.Clone(addrs)
	slices.SortFunc(sorted, netip.Addr.Compare)
	lines := make([]string, 0, len(sorted))
	for _, a := range slices.Compact(sorted) {
		lines = append(lines, a.String())
	}
	return strings.Join(lines, "\n")
}

// ParseNodeIPs reads what FormatNodeIPs wrote. A line that is no IP
// address is skipped: it admits nothing.
func ParseNodeIPs(data string) []netip.Addr {
	var out []netip.Addr
	for line := range strings.Lines(data) {
		if a, err := netip.ParseAddr(strings.TrimSpace(line)); err == nil {
			out = append(out, a)
		}
	}
	return out
}

// FormatPodCIDRs writes prefixes one a line, sorted, as ParsePodCIDRs reads them.
func FormatPodCIDRs(prefixes []netip.Prefix) string {
	lines := make([]string, 0, len(prefixes))
	for _, p := range prefixes {
		lines = append(lines, p.Masked().String())
	}
	slices.Sort(lines)
	return strings.Join(slices.Compact(lines), "\n")
}

// ParsePodCIDRs reads what FormatPodCIDRs wrote. A line that is no CIDR
// is skipped: it admits nothing.
func ParsePodCIDRs(data string) []netip.Prefix {
	var out []netip.Prefix
	for line := range strings.Lines(data) {
		if p, err := netip.ParsePrefix(strings.TrimSpace(line)); err == nil {
			out = append(out, p.Masked())
		}
	}
	return out
}

// LeaseName is the host Lease in the tenant's host namespace through which
// the syncers of a VirtualCluster's control-plane replicas elect the one
// that runs the virtual node. It lives on the host, out of the tenant's
// reach: a tenant cannot hold it to stop its own syncer.
func LeaseName(virtualCluster string) string { return virtualCluster + "-syncer" }
