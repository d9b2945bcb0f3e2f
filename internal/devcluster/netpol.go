package devcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Every node runs the NetworkPolicy enforcer kube-network-policies in its
// network namespace. It decides on the first packet of each connection in
// user space, from packets the kernel queues to it (NFQUEUE). Its own
// nftables rules use the nft "queue" expression; kernels built without it
// (CONFIG_NFT_QUEUE, as on our machines) still have the iptables NFQUEUE
// target, so there the node diverts new pod connections to the same queue
// with iptables rules of its own (divertToEnforcer). Which one is chosen at
// run time, per node.

// NetworkPolicyName is the user of the enforcer in the host API, and
// NetworkPolicyTable the nftables table it keeps in each node namespace.
const (
	NetworkPolicyName  = "system:kube-network-policies"
	NetworkPolicyTable = "kube-network-policies"
	// networkPolicyQueue is the NFQUEUE number the enforcer reads.
	networkPolicyQueue = 100
	// DivertChain is the iptables chain, in each node namespace, of
	// divertToEnforcer.
	DivertChain = "NEST-NETPOL"
)

// NetworkPolicyArgs is the command line of node n's enforcer. It fails
// closed: while it is down, queued packets are dropped, not let through. NRI
// is off (Debian's containerd 1.6 has none): pod IPs come from the API
// server. The netfilter bug 1766 workaround is off: it only matters before
// kernel 6.12, and with it on the enforcer also queues DNS replies.
func NetworkPolicyArgs(l Layout, n Node) Args {
	return Args{
		"kubeconfig":             l.Kubeconfig("kube-network-policies"),
		"hostname-override":      n.Name,
		"metrics-bind-address":   "127.0.0.1:9080",
		"nfqueue-id":             strconv.Itoa(networkPolicyQueue),
		"fail-open":              "false",
		"disable-nri":            "true",
		"netfilter-bug-1766-fix": "false",
	}
}

// setupNetworkPolicy prepares node n for the enforcer: where the kernel has
// no nft queue expression, iptables rules divert new connections from and
// to pods to the enforcer's queue.
func setupNetworkPolicy(ctx context.Context, n Node) error {
	if nftQueueSupported(ctx, n.NetnsPath()) {
		return nil
	}
	return divertToEnforcer(ctx, n.NetnsPath(), n.Net.ClusterCIDR.String())
}

// nftQueueSupported reports whether the kernel accepts an nft queue rule, by
// adding one in a scratch table of the namespace and removing it again.
func nftQueueSupported(ctx context.Context, nsPath string) bool {
	const probe = "table inet nest-queue-probe {\n  chain c {\n    queue num 1 bypass\n  }\n}\n"
	cmd := exec.CommandContext(ctx, "nsenter", "--net="+nsPath, "--", "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(probe)
	ok := cmd.Run() == nil
	_ = exec.CommandContext(ctx, "nsenter", "--net="+nsPath, "--", "nft", "delete", "table", "inet", "nest-queue-probe").Run()
	return ok
}

// divertToEnforcer queues the first packet of every connection that a pod
// opens or that is opened to a pod and crosses the node (FORWARD, which
// bridged traffic between pods of one node also passes through
// bridge-nf-call-iptables) or ends on it (INPUT). The node's own processes,
// the kubelet's probes among them, are not diverted, as the enforcer's own
// rules let root's traffic through. Without a reader the kernel drops queued
// packets: the node fails closed.
func divertToEnforcer(ctx context.Context, nsPath, clusterCIDR string) error {
	queue := []string{"-j", "NFQUEUE", "--queue-num", strconv.Itoa(networkPolicyQueue)}
	steps := [][]string{
		{"-N", DivertChain},
		append([]string{"-A", DivertChain, "-m", "conntrack", "--ctstate", "NEW", "-s", clusterCIDR}, queue...),
		append([]string{"-A", DivertChain, "-m", "conntrack", "--ctstate", "NEW", "-d", clusterCIDR}, queue...),
		{"-I", "FORWARD", "1", "-j", DivertChain},
		{"-I", "INPUT", "1", "-j", DivertChain},
	}
	for _, s := range steps {
		if err := iptables(ctx, nsPath, s...); err != nil {
			return err
		}
	}
	return nil
}

// removeNetworkPolicyRules removes, from every node namespace, the enforcer's
// nftables table and the diversion rules. The enforcer removes its table
// when it stops cleanly and deleting a namespace drops both; this covers an
// enforcer that was killed while its node namespace stays.
func removeNetworkPolicyRules(ctx context.Context, a Addressing) error {
	names, err := ourNetns(a)
	if err != nil {
		return err
	}
	var errs []error
	for _, ns := range names {
		nsPath := filepath.Join("/run/netns", ns)
		if nftTableExists(ctx, nsPath, NetworkPolicyTable) {
			if out, err := exec.CommandContext(ctx, "nsenter", "--net="+nsPath, "--", "nft", "delete", "table", "inet", NetworkPolicyTable).CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("delete nftables table inet %s in %s: %w: %s", NetworkPolicyTable, ns, err, bytes.TrimSpace(out)))
			}
		}
		if iptables(ctx, nsPath, "-n", "-L", DivertChain) != nil {
			continue
		}
		for _, s := range [][]string{{"-D", "FORWARD", "-j", DivertChain}, {"-D", "INPUT", "-j", DivertChain}, {"-F", DivertChain}, {"-X", DivertChain}} {
			if err := iptables(ctx, nsPath, s...); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// nftTableExists reports whether the inet table exists in the network
// namespace at nsPath.
func nftTableExists(ctx context.Context, nsPath, table string) bool {
	return exec.CommandContext(ctx, "nsenter", "--net="+nsPath, "--", "nft", "list", "table", "inet", table).Run() == nil
}

func iptables(ctx context.Context, nsPath string, args ...string) error {
	argv := append([]string{"--net=" + nsPath, "--", "iptables", "-w"}, args...)
	if out, err := exec.CommandContext(ctx, "nsenter", argv...).CombinedOutput(); err != nil {
		return fmt.Errorf("iptables %s in %s: %w: %s", strings.Join(args, " "), nsPath, err, bytes.TrimSpace(out))
	}
	return nil
}

// StopNetworkPolicy stops the NetworkPolicy enforcer of every node of the
// running local host cluster in stateDir and removes its rules, so pod
// traffic is no longer filtered. It is for benchmarks that compare pod
// start-up with and without the enforcer; `nest dev up` on a fresh cluster
// starts it again.
func StopNetworkPolicy(ctx context.Context, stateDir string) error {
	l := Layout{Root: stateDir}
	a, err := addressingOf(l, Addressing{})
	if err != nil {
		return err
	}
	procs, err := RecordedProcesses(l)
	if err != nil {
		return err
	}
	var errs []error
	for _, p := range procs {
		if strings.HasSuffix(p.Name, "."+NetworkPolicyTable) {
			errs = append(errs, p.stop(10*time.Second))
		}
	}
	return errors.Join(append(errs, removeNetworkPolicyRules(ctx, a))...)
}
