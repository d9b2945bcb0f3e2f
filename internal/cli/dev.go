package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/nestdev/nest/internal/devcluster"
	"github.com/nestdev/nest/internal/provisioner"
)

// devFlags are the persistent flags of `nest dev`: which local cluster a
// command is about.
type devFlags struct {
	stateDir, cluster string
	slot              int
}

// addressing is the cluster's addressing from --cluster and --slot (or
// $NEST_DEV_CLUSTER and $NEST_DEV_SLOT); a named cluster's slot defaults to 1.
func (f *devFlags) addressing() (devcluster.Addressing, error) {
	slot := f.slot
	if env := os.Getenv(devcluster.SlotEnv); slot == 0 && env != "" {
		n, err := strconv.Atoi(env)
		if err != nil {
			return devcluster.Addressing{}, fmt.Errorf("$%s=%q: want a slot number from 1 to %d", devcluster.SlotEnv, env, devcluster.MaxSlot)
		}
		slot = n
	}
	if f.cluster != "" && slot == 0 {
		slot = 1
	}
	return devcluster.AddressingFor(f.cluster, slot)
}

// resolve returns the cluster's addressing and state directory.
func (f *devFlags) resolve() (devcluster.Addressing, string, error) {
	a, err := f.addressing()
	if err != nil {
		return a, "", err
	}
	return a, a.StateDir(f.stateDir), nil
}

// resolvedStateDir is the state directory of the cluster the flags name.
func (f *devFlags) resolvedStateDir() (string, error) {
	_, dir, err := f.resolve()
	return dir, err
}

func newDevCommand() *cobra.Command {
	f := &devFlags{}
	dev := &cobra.Command{
		Use:   "dev",
		Short: "Run a local host cluster: a real multi-node Kubernetes on this Linux machine",
		Long: `Run a local host cluster: etcd, kube-apiserver, kube-controller-manager and
kube-scheduler, and per node a network namespace with its own containerd, kubelet,
kube-proxy and CNI bridge, plus CoreDNS and a default StorageClass. Needs root.`,
	}
	dev.PersistentFlags().StringVar(&f.stateDir, "state-dir", "",
		fmt.Sprintf("directory holding the cluster's state (default $%s, else %s; %s-NAME with --cluster NAME)", devcluster.StateDirEnv, devcluster.DefaultStateDir, devcluster.DefaultStateDir))
	dev.PersistentFlags().StringVar(&f.cluster, "cluster", os.Getenv(devcluster.ClusterEnv),
		fmt.Sprintf("name of a second, independent local cluster (1 to 6 lowercase letters or digits), e.g. a member cluster; empty for the default cluster (default $%s)", devcluster.ClusterEnv))
	dev.PersistentFlags().IntVar(&f.slot, "slot", 0,
		fmt.Sprintf("address slot of a named cluster, 1 to %d (default $%s, else 1): node subnet 198.18.SLOT.0/24, pods 10.(244+SLOT).0.0/16, services 10.(96+SLOT).0.0/16", devcluster.MaxSlot, devcluster.SlotEnv))
	dev.AddCommand(newDevUpCommand(f), newDevDownCommand(f), newDevStatusCommand(f),
		newDevKubeconfigCommand(f), newDevRegistryCommand(f), newDevInstallNestCommand(f), newDevProvisionerCommand(), newDevAgentCommand(f))
	return dev
}

func newDevUpCommand(f *devFlags) *cobra.Command {
	o := devcluster.Options{}
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Start the local host cluster, or do nothing if it already runs",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			a, dir, err := f.resolve()
			if err != nil {
				return err
			}
			o.Net, o.StateDir, o.Out = a, dir, cmd.OutOrStdout()
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			start := time.Now()
			if err := devcluster.Up(ctx, o); err != nil {
				return err
			}
			l := devcluster.Layout{Root: o.StateDir}
			fmt.Fprintf(cmd.OutOrStdout(), "cluster ready in %.1fs\nexport KUBECONFIG=%s\n", time.Since(start).Seconds(), l.AdminKubeconfig())
			return nil
		},
	}
	cmd.Flags().IntVar(&o.Nodes, "nodes", 2, fmt.Sprintf("number of nodes, 1 to %d; the first is the control-plane node", devcluster.MaxNodes))
	cmd.Flags().StringVar(&o.BinDir, "bin-dir", "", "directory of the kube, coredns, pause and testapp binaries (default: the directory of this nest binary)")
	cmd.Flags().DurationVar(&o.Timeout, "timeout", 5*time.Minute, "give up when the cluster is not ready after this long")
	cmd.Flags().BoolVar(&o.WithNest, "with-nest", false, "also install Nest (CRDs and nest-manager) into the cluster")
	cmd.Flags().IntVar(&o.GPUs, "gpus", 0, "advertise this many nvidia.com/gpu (a fake extended resource) on every worker node")
	return cmd
}

func newDevInstallNestCommand(f *devFlags) *cobra.Command {
	var binDir string
	cmd := &cobra.Command{
		Use:   "install-nest",
		Short: "Install or upgrade Nest (CRDs and nest-manager) in the running local host cluster",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir, err := f.resolvedStateDir()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 5*time.Minute)
			defer cancel()
			return devcluster.InstallNest(ctx, dir, binDir, cmd.OutOrStdout())
		},
	}
	cmd.Flags().StringVar(&binDir, "bin-dir", "", "directory of the built binaries (default: the one the cluster was started with)")
	return cmd
}

func newDevDownCommand(f *devFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "down",
		Short: "Stop the local host cluster and remove everything it made, data included",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			a, dir, err := f.resolve()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 5*time.Minute)
			defer cancel()
			return devcluster.Down(ctx, dir, a, cmd.OutOrStdout())
		},
	}
}

func newDevStatusCommand(f *devFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Show the processes and nodes of the local host cluster; exit 1 unless it runs",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir, err := f.resolvedStateDir()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			st, err := devcluster.Status(ctx, dir)
			if err != nil {
				return err
			}
			st.Print(cmd.OutOrStdout())
			if !st.Running() {
				return errors.New("the local host cluster is not running")
			}
			return nil
		},
	}
}

func newDevKubeconfigCommand(f *devFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "kubeconfig",
		Short: "Print the path of the local host cluster's admin kubeconfig",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir, err := f.resolvedStateDir()
			if err != nil {
				return err
			}
			path := devcluster.Layout{Root: dir}.AdminKubeconfig()
			if _, err := os.Stat(path); err != nil {
				return fmt.Errorf("no kubeconfig at %s: start the cluster with `nest dev up`", path)
			}
			fmt.Fprintln(cmd.OutOrStdout(), path)
			return nil
		},
	}
}

func newDevRegistryCommand(f *devFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "registry",
		Short: "Print the address (host:port) of the local host cluster's OCI registry, for oci:// snapshot URLs",
		Long: "Print the address of the local host cluster's OCI registry (the CNCF Distribution registry in the " +
			"namespace nest-registry), such as 198.18.0.200:5000: snapshots go to oci://ADDRESS/REPOSITORY:TAG with " +
			"--plain-http. It fails while the registry's Service has no address.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir, err := f.resolvedStateDir()
			if err != nil {
				return err
			}
			addr, err := devcluster.RegistryAddress(cmd.Context(), dir)
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), addr)
			return nil
		},
	}
}

// newDevProvisionerCommand is started by `nest dev up`; users do not run it.
func newDevProvisionerCommand() *cobra.Command {
	var kubeconfig, dir string
	cmd := &cobra.Command{
		Use:    "provisioner",
		Short:  "Serve the local host cluster's default StorageClass (started by `nest dev up`)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return provisioner.Run(ctx, kubeconfig, dir)
		},
	}
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig of the cluster")
	cmd.Flags().StringVar(&dir, "dir", "", "directory that holds the volumes")
	return cmd
}

// newDevAgentCommand is started by `nest dev up` on each worker; users do not run it.
func newDevAgentCommand(f *devFlags) *cobra.Command {
	var binDir, node string
	cmd := &cobra.Command{
		Use:    "agent",
		Short:  "Serve nest-agent for one worker of the local host cluster (started by `nest dev up`)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			a, dir, err := f.resolve()
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return devcluster.RunAgent(ctx, dir, binDir, node, a)
		},
	}
	cmd.Flags().StringVar(&binDir, "bin-dir", "", "directory that holds the kube binary the agent starts the kubelet and kube-proxy from")
	cmd.Flags().StringVar(&node, "node", "", "the worker node whose agent this is")
	return cmd
}
