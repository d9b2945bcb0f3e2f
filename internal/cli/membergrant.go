package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nestdev/nest/internal/syncer/contract"
	"github.com/nestdev/nest/internal/vcops"
)

// newMemberGrantCommand builds nest member grant: the VirtualCluster's
// share of a member cluster, which its tenant sees as node nest-member-NAME.
func newMemberGrantCommand(host *hostFlags) *cobra.Command {
	var (
		ns    string
		share vcops.Share
	)
	cmd := &cobra.Command{
		Use:   "grant VIRTUAL-CLUSTER MEMBER [--gpu N] [--cpu N] [--memory Q] [--pods N]",
		Short: "Give a virtual cluster a share of a member cluster, shown to its tenant as the node nest-member-MEMBER",
		Long: "Give a virtual cluster a share of a member cluster (spec.members of the VirtualCluster), or change it. " +
			"nest-manager sets the share up in the member: a namespace, a service account limited to it and a ResourceQuota; " +
			"the tenant sees one more node, nest-member-MEMBER, tainted nest.dev/member=MEMBER:NoSchedule. " +
			"The MemberCluster must also select the virtual cluster (nest member add --selector). See docs/member-clusters.md.",
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			res, err := share.Resources()
			if err != nil {
				return asFlagError(err)
			}
			if len(res) == 0 {
				return errors.New("--gpu, --cpu, --memory or --pods: give at least one; nest member revoke removes a grant")
			}
			return setGrant(cmd, host, types.NamespacedName{Namespace: resolveNamespace(ns, args[0]), Name: args[0]}, args[1], res)
		},
	}
	namespaceFlag(cmd, &ns)
	cmd.Flags().StringVar(&share.GPU, "gpu", "", "nvidia.com/gpu the tenant may use in the member, such as 1")
	cmd.Flags().StringVar(&share.CPU, "cpu", "", "cpu the tenant may request in the member, such as 8 (default: not bounded by the grant)")
	cmd.Flags().StringVar(&share.Memory, "memory", "", "memory the tenant may request in the member, such as 32Gi (default: not bounded by the grant)")
	cmd.Flags().StringVar(&share.Pods, "pods", "", "pods the tenant may run in the member, such as 20 (default: not bounded by the grant)")
	return cmd
}

// newMemberRevokeCommand builds nest member revoke.
func newMemberRevokeCommand(host *hostFlags) *cobra.Command {
	var ns string
	cmd := &cobra.Command{
		Use:   "revoke VIRTUAL-CLUSTER MEMBER",
		Short: "Take a virtual cluster's share of a member cluster away: its node goes, and its namespace in the member is deleted with the pods in it",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return setGrant(cmd, host, types.NamespacedName{Namespace: resolveNamespace(ns, args[0]), Name: args[0]}, args[1], nil)
		},
	}
	namespaceFlag(cmd, &ns)
	return cmd
}

// setGrant writes the grant (nil res: removes it) and says what changed.
func setGrant(cmd *cobra.Command, host *hostFlags, key types.NamespacedName, member string, res corev1.ResourceList) error {
	c, err := host.client()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), time.Minute)
	defer cancel()
	if err := vcops.SetMemberGrant(ctx, c, key, member, res); err != nil {
		return err
	}
	if len(res) == 0 {
		fmt.Fprintf(cmd.OutOrStdout(), "virtualcluster/%s: grant on member cluster %s removed\n", key.Name, member)
		return nil
	}
	fmt.Fprintf(cmd.OutOrStdout(), "virtualcluster/%s: grant on member cluster %s is %s\n", key.Name, member, contract.FormatResourceList(res))
	return nil
}
