// Command nest-node-network-agent is the node network agent, the same as
// `nest node-network-agent`: on each host node it gives tenants' hostNetwork
// pods the virtual node's address and host ports inside their own network
// namespaces (see internal/netagent).
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/nestdev/nest/internal/cli"
	"github.com/nestdev/nest/internal/version"
)

func main() {
	cmd := cli.NewNodeNetworkAgentCommand()
	cmd.Use = "nest-node-network-agent --node-name NODE"
	cmd.Version = version.Describe() // --version
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}
