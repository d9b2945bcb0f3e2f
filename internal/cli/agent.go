package cli

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/nestdev/nest/internal/agent"
	"github.com/nestdev/nest/internal/pki"
)

// defaultAgentConfig is where deploy/systemd/nest-agent.service has the
// agent read its configuration.
const defaultAgentConfig = "/etc/nest/agent.yaml"

func newAgentCommand() *cobra.Command { return NewAgentCommand() }

// NewAgentCommand is `nest agent`, also built alone as cmd/nest-agent: the
// node-side daemon of node promotion.
func NewAgentCommand() *cobra.Command {
	var configPath string
	cmd := &cobra.Command{
		Use:   "agent --config FILE",
		Short: "Serve nest-agent on a promotable host node whose kubelet and kube-proxy are systemd units",
		Long: `Serve nest-agent, the node agent nest-manager asks to move this node between the
host cluster and virtual clusters (docs/nest-agent.md). It runs as root under
systemd (deploy/systemd/nest-agent.service), stops and starts the kubelet and
kube-proxy units through systemd, and writes only the paths its configuration
names. On its first start it saves the node's own kubelet, kube-proxy and CNI
configuration, which every reset puts back. It serves until SIGTERM or SIGINT.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if configPath == "" {
				return fmt.Errorf("--config: name the agent's configuration file, such as %s (deploy/systemd/agent.yaml is an example)", defaultAgentConfig)
			}
			cfg, err := agent.LoadConfig(configPath)
			if err != nil {
				return fmt.Errorf("--config: %w", err)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return agent.RunSystemd(ctx, cfg)
		},
	}
	cmd.Flags().StringVar(&configPath, "config", "", "the agent's configuration file (YAML), such as "+defaultAgentConfig)
	cmd.AddCommand(newAgentCertsCommand())
	return cmd
}

func newAgentCertsCommand() *cobra.Command {
	var caCert, caKey, node, ip, out string
	cmd := &cobra.Command{
		Use:   "certs --ca-cert FILE --ca-key FILE --node NAME --ip IP --out DIR",
		Short: "Issue a node's nest-agent serving certificate from the agent CA",
		Long: fmt.Sprintf(`Issue the serving certificate of one node's nest-agent from the Nest agent CA,
valid for a year, and write into DIR %s, %s (mode 0600) and a copy
of the CA's certificate, %s, which the agent checks nest-manager's
certificate against. The CA's key is not copied. Run it where the CA's key is
kept, and copy DIR to the node (/etc/nest/pki in deploy/systemd/agent.yaml).`,
			agent.ServingCertFile, agent.ServingKeyFile, agent.CACertFile),
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var errs []error
			for _, f := range []struct{ flag, value, want string }{
				{"--ca-cert", caCert, "the agent CA's certificate (PEM), the tls.crt of nest-manager's --agent-ca-secret"},
				{"--ca-key", caKey, "the agent CA's private key (PEM), the tls.key of that Secret"},
				{"--node", node, "the node's name, as its Node and GlobalNode are named"},
				{"--ip", ip, "the node's address, its GlobalNode's spec.nodeIP"},
				{"--out", out, "the directory to write the certificate, its key and the CA certificate into"},
			} {
				if f.value == "" {
					errs = append(errs, fmt.Errorf("%s: required: %s", f.flag, f.want))
				}
			}
			if node != "" {
				if msgs := validation.IsDNS1123Subdomain(node); len(msgs) > 0 {
					errs = append(errs, fmt.Errorf("--node: must be the node's name, a DNS-1123 subdomain: %s", strings.Join(msgs, "; ")))
				}
			}
			addr := net.ParseIP(ip)
			if ip != "" && addr == nil {
				errs = append(errs, fmt.Errorf("--ip: must be an IPv4 or IPv6 address (the node's GlobalNode spec.nodeIP), got %q", ip))
			}
			if err := errors.Join(errs...); err != nil {
				return err
			}
			certPEM, err := os.ReadFile(caCert)
			if err != nil {
				return fmt.Errorf("--ca-cert: %w", err)
			}
			keyPEM, err := os.ReadFile(caKey)
			if err != nil {
				return fmt.Errorf("--ca-key: %w", err)
			}
			ca, err := pki.LoadCA(pki.KeyPair{CertPEM: certPEM, KeyPEM: keyPEM})
			if err != nil {
				return fmt.Errorf("--ca-cert, --ca-key: must be the agent CA's certificate and its key: %w", err)
			}
			if err := agent.WriteServingCert(ca, node, addr, out); err != nil {
				return fmt.Errorf("issue the serving certificate of %s: %w", node, err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s, %s and %s in %s for node %s at %s\n",
				agent.ServingCertFile, agent.ServingKeyFile, agent.CACertFile, out, node, addr)
			return nil
		},
	}
	cmd.Flags().StringVar(&caCert, "ca-cert", "", "the agent CA's certificate (PEM)")
	cmd.Flags().StringVar(&caKey, "ca-key", "", "the agent CA's private key (PEM)")
	cmd.Flags().StringVar(&node, "node", "", "the node's name")
	cmd.Flags().StringVar(&ip, "ip", "", "the node's IP address, where nest-manager reaches its agent")
	cmd.Flags().StringVar(&out, "out", "", "directory to write the files into")
	return cmd
}
