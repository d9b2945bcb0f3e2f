// Package cli holds the cobra commands of the nest CLI. Commands parse flags and
// call into internal packages; they hold no logic of their own.
package cli

import (
	"github.com/spf13/cobra"

	"github.com/nestdev/nest/internal/version"
)

// NewRootCommand returns the `nest` command with all its subcommands; `nest
// --version` prints version.Line("nest").
func NewRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "nest",
		Short:         "Nest runs isolated Kubernetes clusters inside a host Kubernetes cluster",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version.Describe(),
	}
	root.AddCommand(newDevCommand(), newAgentCommand(), newNodeNetworkAgentCommand())
	addVirtualClusterCommands(root)
	return root
}
