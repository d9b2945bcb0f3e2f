package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/atomicfile"
	"github.com/nestdev/nest/internal/controller/virtualcluster"
	"github.com/nestdev/nest/internal/controlplane"
	"github.com/nestdev/nest/internal/syncer/contract"
	"github.com/nestdev/nest/internal/vcops"
	"github.com/nestdev/nest/internal/version"
)

func addVirtualClusterCommands(root *cobra.Command) {
	var host hostFlags
	root.PersistentFlags().StringVar(&host.kubeconfig, "kubeconfig", "", "host cluster kubeconfig (default $KUBECONFIG, else the local host cluster's, else ~/.kube/config)")
	root.AddCommand(newCreateCommand(&host), newListCommand(&host), newKubeconfigCommand(&host), newDeleteCommand(&host), newNodesCommand(&host), newScaleCommand(&host), newUpgradeCommand(&host), newDashboardCommand(&host), newMemberCommand(&host), newUsageCommand(&host), newCertsCommand(&host), newSnapshotCommand(&host), newRestoreCommand(&host))
}

func namespaceFlag(cmd *cobra.Command, ns *string) {
	cmd.Flags().StringVarP(ns, "namespace", "n", "", "host namespace of the virtual cluster (default vc-NAME)")
}

func resolveNamespace(ns, name string) string {
	if ns != "" {
		return ns
	}
	return vcops.DefaultNamespace(name)
}

// withTarget resolves a command's virtual cluster (its name and host
// namespace), connects to the host cluster and runs fn within timeout.
func withTarget(cmd *cobra.Command, host *hostFlags, name, ns string, timeout time.Duration,
	fn func(ctx context.Context, c client.Client, key types.NamespacedName) error) error {
	c, err := host.client()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
	defer cancel()
	return fn(ctx, c, types.NamespacedName{Namespace: resolveNamespace(ns, name), Name: name})
}

// action is what a waiting command does to one virtual cluster.
type action func(ctx context.Context, c client.Client, key types.NamespacedName, wait bool, out io.Writer) error

// newWaitingCommand builds a command that acts on the virtual cluster NAME
// with -n, --wait and --timeout.
func newWaitingCommand(host *hostFlags, use, short, waitHelp string, act action) *cobra.Command {
	var (
		ns      string
		wait    bool
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   use + " NAME",
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withTarget(cmd, host, args[0], ns, timeout, func(ctx context.Context, c client.Client, key types.NamespacedName) error {
				return act(ctx, c, key, wait, cmd.OutOrStdout())
			})
		},
	}
	namespaceFlag(cmd, &ns)
	cmd.Flags().BoolVar(&wait, "wait", false, waitHelp)
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Minute, "give up waiting after this long")
	return cmd
}

// shareFlags are the tenant's share of host capacity, set with nest create.
type shareFlags struct {
	cpu, memory, gpu string
	pods             int
	podSecurity      string
	containerLimits  string
	privileged       string
	virtualNodes     int
	nodeDisk         string
	replicas         int
	// kubernetesVersion is spec.kubernetesVersion; "" leaves the default.
	kubernetesVersion string
	// runtimeConfig is spec.controlPlane.runtimeConfig, as
	// version.ParseRuntimeConfig reads it.
	runtimeConfig []string
	serviceType   string
	storage       string
	storageClaims int
	nodes
}

// nodes are the dedicated host nodes of nest create and nest scale.
type nodes struct {
	count    int
	selector string
}

// bind registers --nodes and --node-selector on cmd.
func (n *nodes) bind(cmd *cobra.Command) {
	cmd.Flags().IntVar(&n.count, "nodes", 0, "dedicated host nodes to move into the virtual cluster: each is drained in the host and joins the tenant cluster as a node of its own (see docs/dedicated-nodes.md)")
	cmd.Flags().StringVar(&n.selector, "node-selector", "", "only host nodes with these labels, such as gpu=true,zone=a")
}

// policy is the promote policy the flags ask for.
func (n *nodes) policy() (nestv1.PromotePolicy, error) {
	if n.selector != "" && n.count == 0 {
		return nestv1.PromotePolicy{}, fmt.Errorf("--node-selector %q: it chooses among dedicated nodes: set --nodes too", n.selector)
	}
	p, err := vcops.PromotePolicy(n.count, n.selector)
	return p, asFlagError(err)
}

// flagOf names the nest create, scale or upgrade flag of each vcops field.
var flagOf = map[string]string{vcops.FieldCPU: "--cpu", vcops.FieldMemory: "--memory", vcops.FieldGPU: "--gpu", vcops.FieldPods: "--pods", vcops.FieldName: "NAME", vcops.FieldNamespace: "--namespace",
	vcops.FieldNodes: "--nodes", vcops.FieldNodeSelector: "--node-selector", vcops.FieldKubernetesVersion: "--version"}

// asFlagError renames a vcops field error after the flag the user typed.
func asFlagError(err error) error {
	var fe *vcops.FieldError
	if errors.As(err, &fe) && flagOf[fe.Field] != "" {
		return fmt.Errorf("%s %q: %s", flagOf[fe.Field], fe.Value, fe.Reason)
	}
	return err
}

// spec returns the VirtualCluster spec the flags ask for, or an error naming
// the flag with a bad value.
func (f *shareFlags) spec() (nestv1.VirtualClusterSpec, error) {
	var spec nestv1.VirtualClusterSpec
	pods := ""
	if f.pods != 0 {
		pods = strconv.Itoa(f.pods)
	}
	res, err := vcops.Share{CPU: f.cpu, Memory: f.memory, GPU: f.gpu, Pods: pods}.Resources()
	if err != nil {
		return spec, asFlagError(err)
	}
	if len(res) > 0 {
		spec.PromoteResources.Resources = res
	}
	spec.VirtualNode.PodSecurityLevel = nestv1.PodSecurityLevel(f.podSecurity)
	if f.virtualNodes != 0 {
		if f.virtualNodes < 1 || f.virtualNodes > contract.MaxVirtualNodes {
			return spec, fmt.Errorf("--virtual-nodes %d: want 1 to %d", f.virtualNodes, contract.MaxVirtualNodes)
		}
		spec.VirtualNode.Count = ptr.To(int32(f.virtualNodes))
	}
	if f.serviceType != "" {
		typ, err := oneOf("--service-type", f.serviceType,
			choice[nestv1.ServiceType]{"NodePort", "a port on every host node, which the kubeconfig names on one of them"},
			choice[nestv1.ServiceType]{"LoadBalancer", "an address from the host's load balancer, which survives a host node"},
			choice[nestv1.ServiceType]{"ClusterIP", "reachable inside the host cluster only"})
		if err != nil {
			return spec, err
		}
		spec.ControlPlane.Service.Type = typ
	}
	if f.kubernetesVersion != "" {
		if err := version.CheckSupported(f.kubernetesVersion); err != nil {
			return spec, fmt.Errorf("--kubernetes-version: %w", err)
		}
		spec.KubernetesVersion = f.kubernetesVersion
	}
	if len(f.runtimeConfig) > 0 {
		v := f.kubernetesVersion
		if v == "" {
			v = version.Newest()
		}
		if spec.ControlPlane.RuntimeConfig, err = version.ParseRuntimeConfig(v, f.runtimeConfig); err != nil {
			return spec, fmt.Errorf("--runtime-config %w", err)
		}
	}
	if f.replicas != 0 {
		if f.replicas != 1 && f.replicas != 3 {
			return spec, fmt.Errorf("--replicas %d: want 1 (one control-plane pod) or 3 (highly available: 3 etcd members, an API server in each)", f.replicas)
		}
		spec.ControlPlane.Replicas = ptr.To(int32(f.replicas))
	}
	if spec.VirtualNode.ContainerLimits, err = oneOf("--container-limits", f.containerLimits,
		choice[nestv1.ContainerLimits]{nestv1.ContainerLimitsDefault, "containers without limits get the host's default limits"},
		choice[nestv1.ContainerLimits]{nestv1.ContainerLimitsNone, "they run without"}); err != nil {
		return spec, err
	}
	if spec.VirtualNode.PrivilegedContainers, err = oneOf("--privileged-containers", f.privileged,
		choice[nestv1.PrivilegedContainers]{nestv1.PrivilegedContainersRefuse, "pods with privileged containers are refused"},
		choice[nestv1.PrivilegedContainers]{nestv1.PrivilegedContainersConfine, "they run without host privileges"}); err != nil {
		return spec, err
	}
	if f.nodeDisk != "" {
		size, err := resource.ParseQuantity(f.nodeDisk)
		if err != nil || size.Sign() <= 0 {
			return spec, fmt.Errorf("--node-disk %q: want the size of each virtual node's disk, such as 1Gi", f.nodeDisk)
		}
		if spec.VirtualNode.PodSecurityLevel == nestv1.PodSecurityRestricted {
			return spec, fmt.Errorf("--node-disk %q: the restricted Pod Security level refuses hostPath volumes, so the disk would go unused: drop --node-disk or use --pod-security baseline", f.nodeDisk)
		}
		spec.VirtualNode.NodeDisk = &nestv1.NodeDiskSpec{Size: size}
	}
	if f.storage != "" {
		size, err := resource.ParseQuantity(f.storage)
		if err != nil || size.Sign() < 0 {
			return spec, fmt.Errorf("--storage %q: want the storage all the tenant's claims may request together, such as 10Gi", f.storage)
		}
		spec.VirtualNode.Storage.Requests = &size
	}
	if f.storageClaims != 0 {
		if f.storageClaims < 0 || f.storageClaims > 10000 {
			return spec, fmt.Errorf("--storage-claims %d: want 0 to 10000 claims", f.storageClaims)
		}
		spec.VirtualNode.Storage.Claims = ptr.To(int32(f.storageClaims))
	}
	p, err := f.policy()
	if err != nil {
		return spec, err
	}
	if p.NodeCount > 0 {
		spec.PromotePolicies = []nestv1.PromotePolicy{p}
	}
	return spec, nil
}

// choice is one value of an API enum a flag takes, in lower case, and what
// it means.
type choice[T ~string] struct {
	value   T
	meaning string
}

// oneOf returns the choice value names, in any case; an empty value is the
// first choice, the API's default. Any other value is an error naming flag
// and every choice with its meaning.
func oneOf[T ~string](flag, value string, choices ...choice[T]) (T, error) {
	if value == "" {
		return choices[0].value, nil
	}
	options := make([]string, len(choices))
	for i, c := range choices {
		if strings.EqualFold(value, string(c.value)) {
			return c.value, nil
		}
		options[i] = fmt.Sprintf("%s (%s)", strings.ToLower(string(c.value)), c.meaning)
	}
	return "", fmt.Errorf("%s %q: use %s", flag, value, strings.Join(options, " or "))
}

func newCreateCommand(host *hostFlags) *cobra.Command {
	share := &shareFlags{}
	cmd := newWaitingCommand(host, "create", "Create a virtual cluster: a tenant control plane in the host cluster",
		"wait until the virtual cluster is Ready, showing its progress",
		func(ctx context.Context, c client.Client, key types.NamespacedName, wait bool, out io.Writer) error {
			spec, err := share.spec()
			if err != nil {
				return err
			}
			return create(ctx, c, key, spec, wait, out)
		})
	cmd.Flags().StringVar(&share.cpu, "cpu", "", "CPU of the virtual node and the host quota (default 2)")
	cmd.Flags().StringVar(&share.memory, "memory", "", "memory of the virtual node and the host quota (default 4Gi)")
	cmd.Flags().StringVar(&share.gpu, "gpu", "", "nvidia.com/gpu of the virtual node and the host quota (default none)")
	cmd.Flags().IntVar(&share.pods, "pods", 0, "pods the virtual node holds (default 110)")
	cmd.Flags().StringVar(&share.podSecurity, "pod-security", "baseline", "Pod Security Standard level of tenant pods: baseline or restricted")
	cmd.Flags().IntVar(&share.virtualNodes, "virtual-nodes", 0, "how many virtual nodes split the share (default 1)")
	cmd.Flags().StringVar(&share.serviceType, "service-type", "", "how the tenant API server is exposed: NodePort, LoadBalancer or ClusterIP (default: the host's, nest-manager's --default-service-type)")
	cmd.Flags().StringVar(&share.kubernetesVersion, "kubernetes-version", "", "Kubernetes version of the tenant control plane, one of "+strings.Join(version.Supported, ", ")+" (default "+version.Newest()+")")
	cmd.Flags().StringSliceVar(&share.runtimeConfig, "runtime-config", nil, "API group versions off by default the tenant API server serves, as kube-apiserver's --runtime-config: "+strings.Join(version.AllOptionalAPIs(), ", ")+", those the --kubernetes-version serves (spec.controlPlane.runtimeConfig)")
	cmd.Flags().IntVar(&share.replicas, "replicas", 0, "control-plane replicas: 1, or 3 for a highly available control plane spread over host nodes (default 1)")
	cmd.Flags().StringVar(&share.containerLimits, "container-limits", "default", "default: tenant containers without cpu or memory limits get the host's default limits; none: they run without, as upstream conformance expects")
	cmd.Flags().StringVar(&share.privileged, "privileged-containers", "refuse", "refuse: pods with privileged containers are refused; confine: such containers run without host privileges (no host devices, no capabilities beyond the Pod Security level), for workloads that ask for privileged without needing it")
	cmd.Flags().StringVar(&share.nodeDisk, "node-disk", "", "size of each virtual node's disk, where tenant hostPath volumes live, such as 1Gi (default none: hostPath volumes are refused)")
	cmd.Flags().StringVar(&share.storage, "storage", "", "storage the tenant's PersistentVolumeClaims may request together on the host, such as 50Gi (default 10Gi)")
	cmd.Flags().IntVar(&share.storageClaims, "storage-claims", 0, "how many PersistentVolumeClaims the tenant may have on the host (default 20)")
	share.nodes.bind(cmd)
	return cmd
}

// newScaleCommand is nest scale NAME --nodes N: the virtual cluster's
// dedicated nodes, claimed or released by node assignment.
func newScaleCommand(host *hostFlags) *cobra.Command {
	var (
		n  nodes
		ns string
	)
	cmd := &cobra.Command{
		Use:   "scale NAME --nodes N",
		Short: "Set how many dedicated host nodes a virtual cluster has (0 releases them all)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("nodes") {
				return fmt.Errorf("--nodes is required: the number of dedicated nodes, 0 to release them all")
			}
			p, err := n.policy()
			if err != nil {
				return err
			}
			return withTarget(cmd, host, args[0], ns, time.Minute, func(ctx context.Context, c client.Client, key types.NamespacedName) error {
				if err := vcops.SetPromotePolicy(ctx, c, key, p); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "virtualcluster %s: %d dedicated nodes asked for; see them with nest nodes\n", key, p.NodeCount)
				return nil
			})
		},
	}
	namespaceFlag(cmd, &ns)
	n.bind(cmd)
	return cmd
}

// newUpgradeCommand is nest upgrade NAME --version V: the control plane
// moves to V in place (docs/upgrades.md).
func newUpgradeCommand(host *hostFlags) *cobra.Command {
	var to string
	cmd := newWaitingCommand(host, "upgrade", "Upgrade a virtual cluster's Kubernetes version in place, rolling",
		"wait until every component runs the new version and the cluster is Ready, showing each step",
		func(ctx context.Context, c client.Client, key types.NamespacedName, wait bool, out io.Writer) error {
			if to == "" {
				return fmt.Errorf("--version is required: one of %s", strings.Join(version.Supported, ", "))
			}
			from, err := vcops.Upgrade(ctx, c, key, to)
			if err != nil {
				return asFlagError(err)
			}
			if from == to {
				fmt.Fprintf(out, "virtualcluster %s already runs %s\n", key, to)
				return nil
			}
			fmt.Fprintf(out, "virtualcluster %s: upgrading from %s to %s\n", key, from, to)
			if !wait {
				return nil
			}
			return waitUpgraded(ctx, c, key, to, time.Now(), out)
		})
	cmd.Flags().StringVar(&to, "version", "", "the Kubernetes version to move to: a later patch, or the next minor, one of "+strings.Join(version.Supported, ", "))
	// Three replicas roll three times, one replica at a time.
	timeout := cmd.Flags().Lookup("timeout")
	timeout.DefValue = upgradeTimeout.String()
	if err := timeout.Value.Set(timeout.DefValue); err != nil {
		panic(err)
	}
	return cmd
}

// upgradeTimeout is nest upgrade's default --timeout.
const upgradeTimeout = 15 * time.Minute

// waitUpgraded prints each change of the Upgrading condition until the
// control plane runs to and the cluster is Ready; a refused upgrade ends
// it with the refusal.
func waitUpgraded(ctx context.Context, c client.Client, key types.NamespacedName, to string, start time.Time, out io.Writer) error {
	last := ""
	err := wait.PollUntilContextCancel(ctx, 300*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		vc := &nestv1.VirtualCluster{}
		if err := c.Get(ctx, key, vc); err != nil {
			return false, err
		}
		u := meta.FindStatusCondition(vc.Status.Conditions, nestv1.ConditionUpgrading)
		if u != nil && u.Message != last {
			fmt.Fprintf(out, "%6.1fs  %s: %s\n", time.Since(start).Seconds(), u.Reason, u.Message)
			last = u.Message
		}
		if u != nil && u.Reason == virtualcluster.ReasonUpgradeRefused {
			return false, fmt.Errorf("virtual cluster %s: the upgrade is refused: %s", key, u.Message)
		}
		return vc.Status.Version == to && meta.IsStatusConditionTrue(vc.Status.Conditions, nestv1.ConditionReady), nil
	})
	if wait.Interrupted(err) {
		return fmt.Errorf("virtual cluster %s does not run %s yet (%s): %w", key, to, last, err)
	}
	return err
}

func newDeleteCommand(host *hostFlags) *cobra.Command {
	return newWaitingCommand(host, "delete", "Delete a virtual cluster and all its host objects, tenant data included",
		"wait until every host object is gone", remove)
}

func create(ctx context.Context, c client.Client, key types.NamespacedName, spec nestv1.VirtualClusterSpec, wait bool, out io.Writer) error {
	vc := &nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace}, Spec: spec}
	created, err := vcops.Create(ctx, c, vc, vcops.CreatedByCLI)
	switch {
	case err != nil:
		return asFlagError(err)
	case created:
		fmt.Fprintf(out, "virtualcluster %s created\n", key)
	default:
		// Like `kubectl apply`, creating what exists is not an error;
		// with --wait it waits for the existing one.
		fmt.Fprintf(out, "virtualcluster %s already exists\n", key)
	}
	if !wait {
		return nil
	}
	start := time.Now()
	if err := waitReady(ctx, c, key, start, out); err != nil {
		return err
	}
	if err := waitReachable(ctx, c, key, start, out); err != nil {
		return err
	}
	fmt.Fprintf(out, "get its kubeconfig with: nest kubeconfig %s -n %s -o %s.kubeconfig\n", key.Name, key.Namespace, key.Name)
	return nil
}

// waitReady prints each phase and condition change until Ready is True.
func waitReady(ctx context.Context, c client.Client, key types.NamespacedName, start time.Time, out io.Writer) error {
	last := ""
	tick := time.NewTicker(300 * time.Millisecond)
	defer tick.Stop()
	for {
		vc := &nestv1.VirtualCluster{}
		if err := c.Get(ctx, key, vc); err != nil {
			return err
		}
		ready := meta.FindStatusCondition(vc.Status.Conditions, nestv1.ConditionReady)
		line := string(vc.Status.Phase)
		if ready != nil {
			line += ": " + ready.Message
		}
		if line != last && vc.Status.Phase != "" {
			fmt.Fprintf(out, "%6.1fs  %s\n", time.Since(start).Seconds(), line)
			last = line
		}
		if ready != nil && ready.Status == metav1.ConditionTrue {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("virtual cluster %s is not ready (%s): %w", key, line, ctx.Err())
		case <-tick.C:
		}
	}
}

// waitReachable waits until the tenant API server answers /readyz through
// the endpoint of the kubeconfig `nest kubeconfig` hands out. Ready is judged
// by nest-manager from inside the host cluster; a NodePort or load balancer
// can take a few more seconds to carry traffic from where the CLI runs
// (kube-proxy programs each node on its own), and the user's next command
// goes there.
// A ClusterIP endpoint answers only inside the host cluster, so it is not
// waited for.
func waitReachable(ctx context.Context, c client.Client, key types.NamespacedName, start time.Time, out io.Writer) error {
	vc := &nestv1.VirtualCluster{}
	if err := c.Get(ctx, key, vc); err != nil {
		return err
	}
	// The Service's own type: an unset spec type is nest-manager's default.
	// A user who may not read Services gets the spec's type.
	n := controlplane.NamesOf(vc)
	svc := &corev1.Service{}
	typ := corev1.ServiceType(vc.Spec.ControlPlane.Service.Type)
	if err := c.Get(ctx, types.NamespacedName{Namespace: n.Namespace, Name: n.Service()}, svc); err == nil {
		typ = svc.Spec.Type
	} else if !apierrors.IsForbidden(err) {
		return fmt.Errorf("the tenant API server's Service: %w", err)
	}
	if typ == corev1.ServiceTypeClusterIP {
		return nil
	}
	kubeconfig, err := vcops.ReadKubeconfig(ctx, c, key, false)
	if err != nil {
		return err
	}
	var last error
	err = wait.PollUntilContextCancel(ctx, 300*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		last = virtualcluster.APITenants{}.Ready(ctx, kubeconfig)
		return last == nil, nil
	})
	if err != nil {
		return fmt.Errorf("virtual cluster %s is Ready, but its kubeconfig's endpoint does not answer from here (%v): check that this machine reaches the host's NodePorts or load balancer, or use spec.controlPlane.service: %w", key, last, err)
	}
	fmt.Fprintf(out, "%6.1fs  the tenant API server answers through its kubeconfig\n", time.Since(start).Seconds())
	return nil
}

func newListCommand(host *hostFlags) *cobra.Command {
	var ns string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List virtual clusters (in every namespace unless -n is given)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := host.client()
			if err != nil {
				return err
			}
			var list nestv1.VirtualClusterList
			if err := c.List(cmd.Context(), &list, client.InNamespace(ns)); err != nil {
				return err
			}
			printList(cmd.OutOrStdout(), list.Items)
			return nil
		},
	}
	cmd.Flags().StringVarP(&ns, "namespace", "n", "", "only this host namespace")
	return cmd
}

func printList(w io.Writer, items []nestv1.VirtualCluster) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE\tNAME\tPHASE\tREADY\tREPLICAS\tVERSION\tENDPOINT\tAGE")
	for _, vc := range items {
		ready := "Unknown"
		if c := meta.FindStatusCondition(vc.Status.Conditions, nestv1.ConditionReady); c != nil {
			ready = string(c.Status)
		}
		age := time.Since(vc.CreationTimestamp.Time).Round(time.Second)
		replicas := fmt.Sprintf("%d/%d", vc.Status.ReadyReplicas, controlplane.Replicas(&vc))
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", vc.Namespace, vc.Name, vc.Status.Phase, ready, replicas, vcops.VersionColumn(&vc), vc.Status.Endpoint, age)
	}
	tw.Flush()
}

func newKubeconfigCommand(host *hostFlags) *cobra.Command {
	var ns, out string
	var internal bool
	cmd := &cobra.Command{
		Use:   "kubeconfig NAME",
		Short: "Print or save the admin kubeconfig of a virtual cluster",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			c, err := host.client()
			if err != nil {
				return err
			}
			return kubeconfig(cmd.Context(), c, types.NamespacedName{Namespace: resolveNamespace(ns, name), Name: name}, internal, out, cmd.OutOrStdout())
		},
	}
	namespaceFlag(cmd, &ns)
	cmd.Flags().StringVarP(&out, "output", "o", "", "write to this file (mode 0600) instead of standard output")
	cmd.Flags().BoolVar(&internal, "internal", false, "the variant for use inside the host cluster (Service DNS name)")
	return cmd
}

// kubeconfig writes the admin kubeconfig of the virtual cluster key (its
// variant for use inside the host cluster with internal) to the file path,
// or to stdout when path is "".
func kubeconfig(ctx context.Context, c client.Client, key types.NamespacedName, internal bool, path string, stdout io.Writer) error {
	data, err := vcops.ReadKubeconfig(ctx, c, key, internal)
	if err != nil {
		return err
	}
	if path == "" {
		_, err := stdout.Write(data)
		return err
	}
	return writePrivateFile(path, data)
}

// writePrivateFile replaces the file at path with data, leaving it with
// mode 0600 whether or not it existed: os.WriteFile keeps an existing
// file's mode, which would leave a credential readable by others.
// atomicfile writes through a temporary file, created 0600, renamed over
// path, so the data is never in a file others may read and a failed write
// leaves the old file as it was. A symbolic link at path is followed: the
// file it points to is replaced, not the link.
func writePrivateFile(path string, data []byte) error {
	if target, err := filepath.EvalSymlinks(path); err == nil {
		path = target
	}
	return atomicfile.Write(path, data, 0o600)
}

func remove(ctx context.Context, c client.Client, key types.NamespacedName, wait bool, out io.Writer) error {
	if err := vcops.Delete(ctx, c, key); err != nil {
		return err
	}
	fmt.Fprintf(out, "virtualcluster %s deleting\n", key)
	if !wait {
		return nil
	}
	if err := waitGone(ctx, c, &nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace}}); err != nil {
		return err
	}
	fmt.Fprintf(out, "virtualcluster %s deleted\n", key)
	return vcops.DeleteOwnNamespace(ctx, c, key.Namespace)
}

func waitGone(ctx context.Context, c client.Client, obj client.Object) error {
	tick := time.NewTicker(300 * time.Millisecond)
	defer tick.Stop()
	for {
		err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s is still being deleted: %w", client.ObjectKeyFromObject(obj), ctx.Err())
		case <-tick.C:
		}
	}
}
