package devcluster

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
)

// The node network: a bridge in the root namespace holding the bridge IP,
// and per node a veth pair whose inner end is the node's eth0 with the node
// IP. Node to node traffic inside a cluster is bridged. Traffic between the
// nodes of two local clusters (a member cluster beside the default one) is
// routed by the root namespace from one bridge to the other: forwarding is
// turned on for the bridges alone, and the cluster's nftables table lets
// what the bridges forward go only to another cluster's bridge.

// crossClusterChain is the nat chain, in each node namespace, that
// masquerades pod traffic to other local clusters' nodes behind the node
// IP: those nodes have no route back to this cluster's pod CIDR.
const crossClusterChain = "NEST-XCLUSTER"

// setupBridge creates the root-namespace bridge, the unreachable routes that
// keep pod and service traffic from leaving through the machine's interfaces,
// and the forwarding between local clusters' bridges.
func setupBridge(ctx context.Context, a Addressing) error {
	steps := [][]string{
		{"link", "add", a.Bridge, "type", "bridge"},
		{"addr", "add", a.BridgeIP().String() + "/24", "dev", a.Bridge},
		{"link", "set", a.Bridge, "up"},
		{"route", "add", "unreachable", a.ClusterCIDR.String()},
		{"route", "add", "unreachable", a.ServiceCIDR.String()},
	}
	for _, s := range steps {
		if err := ip(ctx, s...); err != nil {
			return err
		}
	}
	if err := nft(ctx, forwardRules(a)); err != nil {
		return err
	}
	// Per interface, not net.ipv4.ip_forward: only packets that arrive on a
	// cluster bridge may be routed, and the machine's other interfaces keep
	// their setting.
	return sysctl(ctx, "", "net.ipv4.conf."+a.Bridge+".forwarding=1")
}

// forwardRules is the nftables script of a's root-namespace table. Bridged
// traffic between a's own nodes passes the forward hook too (bridge
// netfilter), and is let through; routed traffic from a's bridge goes only
// to another local cluster's bridge and node range; anything else it would
// route (towards the machine's own interfaces, say) is dropped.
func forwardRules(a Addressing) string {
	var peers []string
	for _, r := range a.peerNodeRanges() {
		peers = append(peers, r.String())
	}
	return fmt.Sprintf(`table inet %[1]s {
  chain forward {
    type filter hook forward priority filter; policy accept;
    iifname "%[2]s" oifname "%[2]s" accept
    iifname "%[2]s" oifname "nest*" ip daddr { %[3]s } accept
    iifname "%[2]s" drop
  }
}
`, a.ForwardTable, a.Bridge, strings.Join(peers, ", "))
}

// setupNodeNetwork creates node n's namespace and veth pair, and routes to the
// pod CIDRs of all nodes through their node IPs and to other local clusters'
// nodes through the bridge.
func setupNodeNetwork(ctx context.Context, n Node, all []Node) error {
	a := n.Net
	steps := [][]string{
		{"netns", "add", n.Netns},
		{"link", "add", n.HostVeth, "type", "veth", "peer", "name", "eth0", "netns", n.Netns},
		{"link", "set", n.HostVeth, "master", a.Bridge, "up"},
		{"-n", n.Netns, "link", "set", "lo", "up"},
		{"-n", n.Netns, "addr", "add", n.IP.String() + "/24", "dev", "eth0"},
		{"-n", n.Netns, "link", "set", "eth0", "up"},
		// Host-network processes reach ClusterIPs through kube-proxy's OUTPUT DNAT,
		// which runs only after a route is found. There is no default route.
		{"-n", n.Netns, "route", "add", a.ServiceCIDR.String(), "dev", "eth0"},
	}
	for _, r := range a.peerNodeRanges() {
		steps = append(steps, []string{"-n", n.Netns, "route", "add", r.String(), "via", a.BridgeIP().String()})
	}
	for _, other := range all {
		if other.Index == n.Index {
			continue
		}
		steps = append(steps, []string{"-n", n.Netns, "route", "add", other.PodCIDR.String(), "via", other.IP.String()})
	}
	steps = append(steps, []string{"route", "add", n.PodCIDR.String(), "via", n.IP.String()})
	for _, s := range steps {
		if err := ip(ctx, s...); err != nil {
			return err
		}
	}
	if err := nodeSysctls(ctx, n); err != nil {
		return err
	}
	if err := masqueradeToPeers(ctx, n); err != nil {
		return err
	}
	return setupNetworkPolicy(ctx, n)
}

// masqueradeToPeers makes pod traffic to other local clusters' nodes leave
// node n with the node IP, which their nodes route back through the bridges;
// traffic to n's own cluster keeps the pod IP.
func masqueradeToPeers(ctx context.Context, n Node) error {
	steps := [][]string{
		{"-t", "nat", "-N", crossClusterChain},
		{"-t", "nat", "-A", crossClusterChain, "-d", n.Net.NodeSubnet.String(), "-j", "RETURN"},
	}
	for _, r := range n.Net.peerNodeRanges() {
		steps = append(steps, []string{"-t", "nat", "-A", crossClusterChain, "-d", r.String(), "-j", "MASQUERADE"})
	}
	steps = append(steps, []string{"-t", "nat", "-A", "POSTROUTING", "-s", n.Net.ClusterCIDR.String(), "-j", crossClusterChain})
	for _, s := range steps {
		if err := iptables(ctx, n.NetnsPath(), s...); err != nil {
			return err
		}
	}
	return nil
}

// nodeSysctls enables forwarding (pods reach other nodes through the node) and
// bridge netfilter (kube-proxy's DNAT must see pod-to-pod traffic on cni0).
func nodeSysctls(ctx context.Context, n Node) error {
	return sysctl(ctx, n.NetnsPath(), "net.ipv4.ip_forward=1", "net.bridge.bridge-nf-call-iptables=1", "net.ipv4.conf.all.route_localnet=1")
}

// sysctl sets kernel parameters in the network namespace at nsPath, or in
// the root namespace when nsPath is "".
func sysctl(ctx context.Context, nsPath string, settings ...string) error {
	argv := append([]string{"sysctl", "-q", "-w"}, settings...)
	where := "the root namespace"
	if nsPath != "" {
		argv = append([]string{"nsenter", "--net=" + nsPath, "--"}, argv...)
		where = nsPath
	}
	if out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput(); err != nil {
		return fmt.Errorf("set sysctls in %s: %w: %s", where, err, bytes.TrimSpace(out))
	}
	return nil
}

// nft runs an nftables script in the root namespace.
func nft(ctx context.Context, script string) error {
	cmd := exec.CommandContext(ctx, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nft -f: %w: %s\n%s", err, bytes.TrimSpace(out), script)
	}
	return nil
}

// subnetFree fails when another link already holds an address of a's node
// subnet: a cluster in the same slot from a run that was not torn down,
// whose routes would fight ours.
func subnetFree(a Addressing) error { return linksOutside(a, a.Bridge) }

// SlotFree fails, naming the link, when any link of this machine (a's own
// bridge included) holds an address of a's node subnet: some local cluster,
// running or left over, uses the slot.
func SlotFree(a Addressing) error { return linksOutside(a, "") }

// linksOutside fails when a link other than skip holds an address of a's
// node subnet.
func linksOutside(a Addressing, skip string) error {
	ifaces, err := net.Interfaces()
	if err != nil {
		return err
	}
	for _, iface := range ifaces {
		if iface.Name == skip {
			continue
		}
		addrs, err := iface.Addrs()
		if err != nil {
			continue
		}
		for _, addr := range addrs {
			if p, err := netip.ParsePrefix(addr.String()); err == nil && a.NodeSubnet.Contains(p.Addr()) {
				return fmt.Errorf("link %s already has %s in the node subnet %s of slot %d: another local cluster uses the slot; stop it or pick another --slot", iface.Name, p, a.NodeSubnet, a.Slot)
			}
		}
	}
	return nil
}

// teardownNetwork removes every node namespace of a's cluster, its bridge,
// the routes that setupBridge added and its nftables table. It removes what
// exists and ignores what is already gone, so it also cleans up after a run
// that was killed half-way.
func teardownNetwork(ctx context.Context, a Addressing) error {
	names, err := ourNetns(a)
	if err != nil {
		return err
	}
	var errs []string
	for _, ns := range names {
		if err := ip(ctx, "netns", "delete", ns); err != nil {
			errs = append(errs, err.Error())
		}
	}
	for _, s := range [][]string{
		{"route", "del", "unreachable", a.ClusterCIDR.String()},
		{"route", "del", "unreachable", a.ServiceCIDR.String()},
	} {
		_ = ip(ctx, s...) // absent when setup never got this far
	}
	if exec.CommandContext(ctx, "nft", "list", "table", "inet", a.ForwardTable).Run() == nil {
		if err := nft(ctx, "delete table inet "+a.ForwardTable+"\n"); err != nil {
			errs = append(errs, err.Error())
		}
	}
	links := []string{a.Bridge}
	for i := 0; i < MaxNodes; i++ {
		links = append(links, fmt.Sprintf("%s%d", a.HostVethPrefix, i))
	}
	for _, link := range links {
		if err := deleteLink(ctx, link); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("tear down network: %s", strings.Join(errs, "; "))
	}
	return nil
}

// ourNetns lists the network namespaces of a's cluster. No other cluster's
// prefix starts with a's: a name has no "-", and "dev" is reserved.
func ourNetns(a Addressing) ([]string, error) {
	entries, err := os.ReadDir("/run/netns")
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), a.NetnsPrefix) {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// deleteLink deletes a link if it exists. The kernel removes a veth whose peer's
// namespace was deleted asynchronously, so the link may vanish between the
// check and the delete; that counts as success.
func deleteLink(ctx context.Context, name string) error {
	if !linkExists(name) {
		return nil
	}
	err := ip(ctx, "link", "delete", name)
	if err != nil && linkExists(name) {
		return err
	}
	return nil
}

func linkExists(name string) bool {
	_, err := os.Stat("/sys/class/net/" + name)
	return err == nil
}

func ip(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}
