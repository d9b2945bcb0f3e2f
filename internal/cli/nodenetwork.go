package cli

import (
	"fmt"
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
)

func newNodeNetworkAgentCommand() *cobra.Command { return NewNodeNetworkAgentCommand() }

// NewNodeNetworkAgentCommand is `nest node-network-agent`, also built alone
// as cmd/nest-node-network-agent: the DaemonSet that gives hostNetwork
// tenant pods the virtual node's network and cuts tenant pods' connections
// when their NetworkPolicies change.
func NewNodeNetworkAgentCommand() *cobra.Command {
	var nodeName, netnsDir string
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
namespace. It changes no host node's network otherwise and reads pods and
NetworkPolicies only. It runs until SIGTERM or SIGINT, with the pod's
in-cluster credentials.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if msgs := validation.IsDNS1123Subdomain(nodeName); len(msgs) > 0 {
				return fmt.Errorf("--node-name: %q must be this host node's name (the downward API's spec.nodeName): %v", nodeName, msgs)
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
			return g.Wait()
		},
	}
	cmd.Flags().StringVar(&nodeName, "node-name", "", "this host node's name (required)")
	cmd.Flags().StringVar(&netnsDir, "netns-dir", netagent.DefaultNetnsDir, "where the container runtime bind-mounts pod network namespaces")
	return cmd
}
