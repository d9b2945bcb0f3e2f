// Command nest-agent is the node-side daemon of node promotion, the same as
// `nest agent`: it joins its node to a tenant cluster and back to the host
// when nest-manager asks (see internal/agent).
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/nestdev/nest/internal/cli"
	"github.com/nestdev/nest/internal/version"
)

func main() {
	cmd := cli.NewAgentCommand()
	cmd.Use = "nest-agent --config FILE"
	cmd.Version = version.Describe() // --version
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}
