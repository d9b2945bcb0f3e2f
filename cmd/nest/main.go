// Command nest is the Nest CLI: it creates and manages virtual clusters, and
// runs a local host cluster with `nest dev`.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/nestdev/nest/internal/cli"
)

func main() {
	if err := cli.NewRootCommand().ExecuteContext(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}
