package devcluster

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// The node network: a bridge in the root namespace holding BridgeIP, and per
// node a veth pair whose inner end is the node's eth0 with the node IP. Node to
// node traffic is bridged, so the root namespace needs no IP forwarding.

// setupBridge creates the root-namespace bridge and the unreachable routes that
// keep pod and service traffic from leaving through the machine's interfaces.
func setupBridge(ctx context.Context) error {
	steps := [][]string{
		{"link", "add", bridgeName, "type", "bridge"},
		{"addr", "add", BridgeIP().String() + "/24", "dev", bridgeName},
		{"link", "set", bridgeName, "up"},
		{"route", "add", "unreachable", ClusterCIDR},
		{"route", "add", "unreachable", ServiceCIDR},
	}
	for _, s := range steps {
		if err := ip(ctx, s...); err != nil {
			return err
		}
	}
	return nil
}

// setupNodeNetwork creates node n's namespace and veth pair, and routes to the
// pod CIDRs of all nodes through their node IPs.
func setupNodeNetwork(ctx context.Context, n Node, all []Node) error {
	steps := [][]string{
		{"netns", "add", n.Netns},
		{"link", "add", n.HostVeth, "type", "veth", "peer", "name", "eth0", "netns", n.Netns},
		{"link", "set", n.HostVeth, "master", bridgeName, "up"},
		{"-n", n.Netns, "link", "set", "lo", "up"},
		{"-n", n.Netns, "addr", "add", n.IP.String() + "/24", "dev", "eth0"},
		{"-n", n.Netns, "link", "set", "eth0", "up"},
		// Host-network processes reach ClusterIPs through kube-proxy's OUTPUT DNAT,
		// which runs only after a route is found. There is no default route.
		{"-n", n.Netns, "route", "add", ServiceCIDR, "dev", "eth0"},
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
	return setupNetworkPolicy(ctx, n)
}

// nodeSysctls enables forwarding (pods reach other nodes through the node) and
// bridge netfilter (kube-proxy's DNAT must see pod-to-pod traffic on cni0).
func nodeSysctls(ctx context.Context, n Node) error {
	cmd := exec.CommandContext(ctx, "nsenter", "--net="+n.NetnsPath(), "--", "sysctl", "-q", "-w",
		"net.ipv4.ip_forward=1", "net.bridge.bridge-nf-call-iptables=1", "net.ipv4.conf.all.route_localnet=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("set sysctls in %s: %w: %s", n.Netns, err, bytes.TrimSpace(out))
	}
	return nil
}

// teardownNetwork removes every node namespace, the bridge and the routes that
// setupBridge added. It removes what exists and ignores what is already gone,
// so it also cleans up after a run that was killed half-way.
func teardownNetwork(ctx context.Context) error {
	names, err := ourNetns()
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
		{"route", "del", "unreachable", ClusterCIDR},
		{"route", "del", "unreachable", ServiceCIDR},
	} {
		_ = ip(ctx, s...) // absent when setup never got this far
	}
	links := []string{bridgeName}
	for i := 0; i < MaxNodes; i++ {
		links = append(links, fmt.Sprintf("%s%d", hostVethPfx, i))
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

// ourNetns lists the network namespaces named by this package.
func ourNetns() ([]string, error) {
	entries, err := os.ReadDir("/run/netns")
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), netnsPrefix) {
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
