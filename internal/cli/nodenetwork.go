package cli

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/nestdev/nest/internal/netagent"
	"github.com/nestdev/nest/internal/nodenet"
	"github.com/nestdev/nest/internal/pullproxy"
)

func newNodeNetworkAgentCommand() *cobra.Command { return NewNodeNetworkAgentCommand() }

// NewNodeNetworkAgentCommand is `nest node-network-agent`, also built alone
// as cmd/nest-node-network-agent: the DaemonSet that gives hostNetwork
// tenant pods the virtual node's network and cuts tenant pods' connections
// when their NetworkPolicies change.
func NewNodeNetworkAgentCommand() *cobra.Command {
	var nodeName, netnsDir, pullAddress string
	var pullDeny, pullPlainHTTP []string
	cmd := &cobra.Command{
		Use:   "node-network-agent --node-name NODE",
		Short: "Give tenants' hostNetwork pods on this host node the virtual node's address and host ports",
		Long: `Serve the node network agent, which the nest-node-network DaemonSet runs
privileged on every host node (docs/shared-mode.md, "Host network"). It watches
the host pods nest-syncer made on this node for tenants' hostNetwork pods and
sets up each one's own network namespace, found by the pod's IP under
--netns-dir, as the pod's nest.dev/node-network annotation says: the virtual
node's host ports forwarded from its address and from 127.0.0.1, and the
virtual node's address bindable. It also ends the node's tracked connections
(conntrack entries) of a tenant pod on this node when a tenant-owned
NetworkPolicy selecting it is created, changed or deleted, or its labels
change, so the host's NetworkPolicy enforcer judges them again by today's
policies (docs/isolation.md); for that it runs in the node's network
namespace. And it serves the node's pull proxy at --pull-proxy-address, the
registry mirror the node's containerd is configured to pull every image
through (docs/isolation.md, "Image registries"): it dials registries, their
redirects and token realms itself and refuses any that resolve to the host's
own addresses (every node's addresses and pod CIDRs, every ServiceCIDR and
every Service's external and LoadBalancer addresses, read from the API),
loopback, link-local, multicast or --pull-proxy-deny. It changes no host
node's network otherwise and reads pods, nodes, Services, ServiceCIDRs and
NetworkPolicies only. It runs until SIGTERM or SIGINT, with
the pod's in-cluster credentials.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if msgs := validation.IsDNS1123Subdomain(nodeName); len(msgs) > 0 {
				return fmt.Errorf("--node-name: %q must be this host node's name (the downward API's spec.nodeName): %v", nodeName, msgs)
			}
			deny, err := parsePrefixes("--pull-proxy-deny", pullDeny)
			if err != nil {
				return err
			}
			if pullAddress != "" {
				if _, _, err := net.SplitHostPort(pullAddress); err != nil {
					return fmt.Errorf("--pull-proxy-address: %q is not host:port, such as %s: %w", pullAddress, pullproxy.DefaultAddress, err)
				}
			}
			cfg, err := rest.InClusterConfig()
			if err != nil {
				return fmt.Errorf("in-cluster credentials (run the agent as the nest-node-network DaemonSet): %w", err)
			}
			client, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			ctx = klog.NewContext(ctx, klog.Background())
			a := &netagent.Agent{Client: client, NodeName: nodeName, NetnsDir: netnsDir, FindNetns: netagent.FindPodNetns, Apply: nodenet.Apply}
			c := &netagent.ConnectionCutter{Client: client, NodeName: nodeName, Forget: netagent.ForgetConnections, Again: netagent.DefaultCutAgain}
			g, ctx := errgroup.WithContext(ctx)
			g.Go(func() error { return a.Run(ctx) })
			g.Go(func() error { return c.Run(ctx) })
			if pullAddress != "" {
				p := &netagent.PullGuard{Client: client, Address: pullAddress, Extra: deny, PlainHTTP: pullPlainHTTP}
				g.Go(func() error { return p.Run(ctx) })
			}
			return g.Wait()
		},
	}
	cmd.Flags().StringVar(&nodeName, "node-name", "", "this host node's name (required)")
	cmd.Flags().StringVar(&netnsDir, "netns-dir", netagent.DefaultNetnsDir, "where the container runtime bind-mounts pod network namespaces")
	cmd.Flags().StringVar(&pullAddress, "pull-proxy-address", pullproxy.DefaultAddress, "host:port where the node's pull proxy listens, in the node's network namespace; empty serves none (then the node's containerd must not name it)")
	cmd.Flags().StringSliceVar(&pullDeny, "pull-proxy-deny", nil, "comma-separated CIDRs the pull proxy also refuses to dial, besides the host's node addresses, pod CIDRs and ServiceCIDRs, loopback, link-local and multicast")
	cmd.Flags().StringSliceVar(&pullPlainHTTP, "pull-proxy-plain-http", nil, "comma-separated registries (host or host:port) the pull proxy reaches over HTTP instead of HTTPS")
	return cmd
}

// parsePrefixes parses CIDRs given to flag, naming the flag and the bad
// entry in its error.
func parsePrefixes(flag string, cidrs []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(cidrs))
	for _, c := range cidrs {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return nil, fmt.Errorf("%s: %q is not a CIDR, such as 10.0.0.0/8: %w", flag, c, err)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}
