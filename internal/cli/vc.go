package cli

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/controlplane"
)

// createdByLabel marks namespaces `nest create` made, so `nest delete` removes them too.
const createdByLabel = "nest.dev/created-by"

// defaultNamespace is the host namespace of a virtual cluster when -n is not
// given: one namespace per tenant, as vcluster does.
func defaultNamespace(name string) string { return "vc-" + name }

func addVirtualClusterCommands(root *cobra.Command) {
	var host hostFlags
	root.PersistentFlags().StringVar(&host.kubeconfig, "kubeconfig", "", "host cluster kubeconfig (default $KUBECONFIG, else the local host cluster's, else ~/.kube/config)")
	root.AddCommand(newCreateCommand(&host), newListCommand(&host), newKubeconfigCommand(&host), newDeleteCommand(&host))
}

func namespaceFlag(cmd *cobra.Command, ns *string) {
	cmd.Flags().StringVarP(ns, "namespace", "n", "", "host namespace of the virtual cluster (default vc-NAME)")
}

func resolveNamespace(ns, name string) string {
	if ns != "" {
		return ns
	}
	return defaultNamespace(name)
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
}

// spec returns the VirtualCluster spec the flags ask for, or an error naming
// the flag with a bad value.
func (f *shareFlags) spec() (nestv1.VirtualClusterSpec, error) {
	var spec nestv1.VirtualClusterSpec
	res := corev1.ResourceList{}
	for _, q := range []struct {
		flag, value string
		name        corev1.ResourceName
	}{{"--cpu", f.cpu, corev1.ResourceCPU}, {"--memory", f.memory, corev1.ResourceMemory}, {"--gpu", f.gpu, "nvidia.com/gpu"}} {
		if q.value == "" {
			continue
		}
		v, err := resource.ParseQuantity(q.value)
		if err != nil || v.Sign() <= 0 {
			return spec, fmt.Errorf("%s %q: want a positive quantity, such as 4 or 8Gi", q.flag, q.value)
		}
		res[q.name] = v
	}
	if f.pods < 0 {
		return spec, fmt.Errorf("--pods %d: want a positive number", f.pods)
	}
	if f.pods > 0 {
		res[corev1.ResourcePods] = *resource.NewQuantity(int64(f.pods), resource.DecimalSI)
	}
	if len(res) > 0 {
		spec.PromoteResources.Resources = res
	}
	spec.VirtualNode.PodSecurityLevel = nestv1.PodSecurityLevel(f.podSecurity)
	return spec, nil
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
	return cmd
}

func newDeleteCommand(host *hostFlags) *cobra.Command {
	return newWaitingCommand(host, "delete", "Delete a virtual cluster and all its host objects, tenant data included",
		"wait until every host object is gone", remove)
}

func create(ctx context.Context, c client.Client, key types.NamespacedName, spec nestv1.VirtualClusterSpec, wait bool, out io.Writer) error {
	ns, name := key.Namespace, key.Name
	if err := checkNamespaceFree(ctx, c, key); err != nil {
		return err
	}
	if err := ensureNamespace(ctx, c, ns); err != nil {
		return err
	}
	vc := &nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: spec}
	switch err := c.Create(ctx, vc); {
	case apierrors.IsAlreadyExists(err):
		// Like `kubectl apply`, creating what exists is not an error;
		// with --wait it waits for the existing one.
		fmt.Fprintf(out, "virtualcluster %s already exists\n", key)
	case err != nil:
		return fmt.Errorf("create virtual cluster %s: %w", key, err)
	default:
		fmt.Fprintf(out, "virtualcluster %s created\n", key)
	}
	if !wait {
		return nil
	}
	if err := waitReady(ctx, c, key, out); err != nil {
		return err
	}
	fmt.Fprintf(out, "get its kubeconfig with: nest kubeconfig %s -n %s -o %s.kubeconfig\n", name, ns, name)
	return nil
}

// checkNamespaceFree refuses a new VirtualCluster in a namespace that holds
// another: nest-manager would refuse it too, with the same message.
func checkNamespaceFree(ctx context.Context, c client.Client, key types.NamespacedName) error {
	var list nestv1.VirtualClusterList
	if err := c.List(ctx, &list, client.InNamespace(key.Namespace)); err != nil {
		return fmt.Errorf("list virtual clusters in namespace %s: %w", key.Namespace, err)
	}
	for _, vc := range list.Items {
		if vc.Name == key.Name {
			return nil // already there: create reports it
		}
	}
	if holder := controlplane.NamespaceHolder(list.Items); holder != "" {
		return errors.New(controlplane.NamespaceInUseMessage(key.Namespace, holder, key.Name))
	}
	return nil
}

func ensureNamespace(ctx context.Context, c client.Client, name string) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{createdByLabel: "nest-cli"}}}
	if err := c.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", name, err)
	}
	return nil
}

// waitReady prints each phase and condition change until Ready is True.
func waitReady(ctx context.Context, c client.Client, key types.NamespacedName, out io.Writer) error {
	start := time.Now()
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
	fmt.Fprintln(tw, "NAMESPACE\tNAME\tPHASE\tREADY\tVERSION\tENDPOINT\tAGE")
	for _, vc := range items {
		ready := "Unknown"
		if c := meta.FindStatusCondition(vc.Status.Conditions, nestv1.ConditionReady); c != nil {
			ready = string(c.Status)
		}
		age := time.Since(vc.CreationTimestamp.Time).Round(time.Second)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", vc.Namespace, vc.Name, vc.Status.Phase, ready, vc.Spec.KubernetesVersion, vc.Status.Endpoint, age)
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
			ns = resolveNamespace(ns, name)
			c, err := host.client()
			if err != nil {
				return err
			}
			data, err := readKubeconfig(cmd.Context(), c, ns, name, internal)
			if err != nil {
				return err
			}
			if out == "" {
				_, err := cmd.OutOrStdout().Write(data)
				return err
			}
			return os.WriteFile(out, data, 0o600)
		},
	}
	namespaceFlag(cmd, &ns)
	cmd.Flags().StringVarP(&out, "output", "o", "", "write to this file (mode 0600) instead of standard output")
	cmd.Flags().BoolVar(&internal, "internal", false, "the variant for use inside the host cluster (Service DNS name)")
	return cmd
}

func readKubeconfig(ctx context.Context, c client.Client, ns, name string, internal bool) ([]byte, error) {
	vc := &nestv1.VirtualCluster{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, vc); err != nil {
		return nil, fmt.Errorf("virtual cluster %s/%s: %w", ns, name, err)
	}
	if internal {
		var s corev1.Secret
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: controlplane.NamesOf(vc).KubeconfigSecret()}, &s); err != nil {
			return nil, err
		}
		return s.Data[controlplane.KubeconfigInternalKey], nil
	}
	if vc.Spec.Kubeconfig == "" {
		return nil, fmt.Errorf("virtual cluster %s/%s has no kubeconfig yet (phase %q): wait with `nest create --wait`", ns, name, vc.Status.Phase)
	}
	return base64.StdEncoding.DecodeString(vc.Spec.Kubeconfig)
}

func remove(ctx context.Context, c client.Client, key types.NamespacedName, wait bool, out io.Writer) error {
	vc := &nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace}}
	if err := c.Delete(ctx, vc); err != nil {
		return fmt.Errorf("delete virtual cluster %s: %w", key, err)
	}
	fmt.Fprintf(out, "virtualcluster %s deleting\n", key)
	if !wait {
		return nil
	}
	if err := waitGone(ctx, c, vc); err != nil {
		return err
	}
	fmt.Fprintf(out, "virtualcluster %s deleted\n", key)
	return deleteOwnNamespace(ctx, c, key.Namespace)
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

// deleteOwnNamespace removes the namespace if `nest create` made it and no
// other virtual cluster lives there.
func deleteOwnNamespace(ctx context.Context, c client.Client, name string) error {
	var ns corev1.Namespace
	if err := c.Get(ctx, types.NamespacedName{Name: name}, &ns); err != nil {
		return client.IgnoreNotFound(err)
	}
	if ns.Labels[createdByLabel] != "nest-cli" {
		return nil
	}
	var rest nestv1.VirtualClusterList
	if err := c.List(ctx, &rest, client.InNamespace(name)); err != nil || len(rest.Items) > 0 {
		return err
	}
	return client.IgnoreNotFound(c.Delete(ctx, &ns))
}
