package cli

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
)

func newNodesCommand(host *hostFlags) *cobra.Command {
	return newTableCommand(host, "nodes", "List the GlobalNode inventory: the host nodes node promotion may move into a virtual cluster, and who holds them", listNodes)
}

// newTableCommand is a command without arguments that prints, with print,
// a table of host objects as of now.
func newTableCommand(host *hostFlags, use, short string, print func(context.Context, client.Client, io.Writer, time.Time) error) *cobra.Command {
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := host.client()
			if err != nil {
				return err
			}
			return print(cmd.Context(), c, cmd.OutOrStdout(), time.Now())
		},
	}
}

// listNodes prints every GlobalNode, by name, with ages as of now.
func listNodes(ctx context.Context, c client.Client, w io.Writer, now time.Time) error {
	var list nestv1.GlobalNodeList
	if err := c.List(ctx, &list); err != nil {
		return fmt.Errorf("list GlobalNodes: %w", err)
	}
	slices.SortFunc(list.Items, func(a, b nestv1.GlobalNode) int { return strings.Compare(a.Name, b.Name) })
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSTATE\tVIRTUALCLUSTER\tNODE-IP\tPHASE\tAGE")
	for _, gn := range list.Items {
		age := now.Sub(gn.CreationTimestamp.Time).Round(time.Second)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", gn.Name, orNone(string(gn.Spec.State)), orNone(gn.Status.VirtualCluster),
			orNone(gn.Spec.NodeIP), orNone(string(gn.Status.Phase)), age)
	}
	return tw.Flush()
}

// orNone is s, or "<none>" (as kubectl prints an empty column) when s is empty.
func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}
