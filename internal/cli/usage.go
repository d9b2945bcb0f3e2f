package cli

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
)

// newUsageCommand builds nest usage: what a virtual cluster's pods used in
// each member cluster, from status.memberUsage.
func newUsageCommand(host *hostFlags) *cobra.Command {
	var ns string
	cmd := &cobra.Command{
		Use:   "usage NAME",
		Short: "Show what a virtual cluster's pods used in each member cluster: pods, GPU-hours and CPU-hours",
		Long: "Show what a virtual cluster's pods used in each member cluster, as nest-manager records it (status.memberUsage of the " +
			"VirtualCluster; the records are in the host ConfigMap NAME-member-usage). Hours are the requests times the time the pods ran. " +
			"See docs/member-clusters.md.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withTarget(cmd, host, args[0], ns, time.Minute, func(ctx context.Context, c client.Client, key types.NamespacedName) error {
				return printUsage(ctx, c, key, cmd.OutOrStdout())
			})
		},
	}
	namespaceFlag(cmd, &ns)
	return cmd
}

// printUsage prints the member usage of the VirtualCluster key, one member
// a line, and why a member could not be listed under the table.
func printUsage(ctx context.Context, c client.Client, key types.NamespacedName, w io.Writer) error {
	vc := &nestv1.VirtualCluster{}
	if err := c.Get(ctx, key, vc); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("NAME %q: no VirtualCluster %s: nest list shows them; -n names the host namespace", key.Name, key)
		}
		return fmt.Errorf("get VirtualCluster %s: %w", key, err)
	}
	if len(vc.Status.MemberUsage) == 0 {
		fmt.Fprintf(w, "No member usage recorded for %s: it has no Ready member grant, or nest-manager has not listed its member pods yet\n", key)
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MEMBER\tPODS\tRUNNING\tGPU-HOURS\tCPU-HOURS\tSINCE")
	for _, u := range vc.Status.MemberUsage {
		since := "<none>"
		if u.Since != nil {
			since = u.Since.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\n", u.Name, u.Pods, u.Running, u.GPUHours, u.CPUHours, since)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, u := range vc.Status.MemberUsage {
		if u.Message != "" {
			fmt.Fprintf(w, "%s: not updated: %s\n", u.Name, u.Message)
		}
	}
	return nil
}
