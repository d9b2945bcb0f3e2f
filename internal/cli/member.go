package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/controller/membercluster"
	"github.com/nestdev/nest/internal/install"
	"github.com/nestdev/nest/internal/vcops"
)

// memberSecretPrefix starts the name of the Secret nest member add stores a
// member's kubeconfig in, in nest-manager's namespace.
const memberSecretPrefix = "nest-member-"

// memberLabel marks the Secret nest member add made for a MemberCluster.
const memberLabel = "nest.dev/member-cluster"

// memberSecretKey names the Secret that holds the kubeconfig of member name.
func memberSecretKey(name string) client.ObjectKey {
	return client.ObjectKey{Namespace: install.Namespace, Name: memberSecretPrefix + name}
}

func newMemberCommand(host *hostFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "member",
		Short: "Register, list and remove member clusters: clusters outside the host where Nest may place tenant pods",
	}
	cmd.AddCommand(newMemberAddCommand(), newMemberListCommand(host), newMemberRemoveCommand(host), newMemberGrantCommand(host), newMemberRevokeCommand(host))
	return cmd
}

// memberAdd is what nest member add registers.
type memberAdd struct {
	name string
	// kubeconfig is the member's kubeconfig file.
	kubeconfig                   string
	apiServerAddress, dnsAddress string
	nodePortAddress              string
	selector                     string
	cpu, memory, gpu             string
}

// newMemberAddCommand builds nest member add. Its --kubeconfig is the
// member's, as the issue spells it, so it hides the host's --kubeconfig of
// every other command: the host is chosen with --host-kubeconfig here.
func newMemberAddCommand() *cobra.Command {
	var (
		a    memberAdd
		host hostFlags
	)
	cmd := &cobra.Command{
		Use:   "add NAME --kubeconfig FILE [--api-server-address HOST:PORT] [--dns-address ADDR] [--node-port-address IP]",
		Short: "Register a member cluster: store its kubeconfig in a Secret in nest-system and create the MemberCluster",
		Long: "Register a member cluster: store its kubeconfig (the current context only, with every file it names embedded) in the Secret " +
			"nest-system/nest-member-NAME and create the MemberCluster NAME. nest-manager then probes it (docs/member-clusters.md). " +
			"--kubeconfig here is the member's; --host-kubeconfig chooses the host cluster. " +
			"Member pods of a tenant whose host Service is a LoadBalancer reach it through LoadBalancer addresses; " +
			"the address flags name the platform's own paths instead, and are needed for tenants without one.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			a.name = args[0]
			mc, kubeconfig, err := a.build()
			if err != nil {
				return err
			}
			c, err := host.client()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), time.Minute)
			defer cancel()
			if err := addMember(ctx, c, mc, kubeconfig); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "membercluster/%s created; its kubeconfig is in Secret %s\n", mc.Name, memberSecretKey(mc.Name))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&a.kubeconfig, "kubeconfig", "", "the member cluster's kubeconfig file (its current context is used)")
	f.StringVar(&host.kubeconfig, "host-kubeconfig", "", "host cluster kubeconfig (default $KUBECONFIG, else the local host cluster's, else ~/.kube/config)")
	f.StringVar(&a.apiServerAddress, "api-server-address", "", "host:port of the member's internal load balancer for tenant API servers, such as 10.20.0.5:6443 (default: each tenant's host LoadBalancer address)")
	f.StringVar(&a.dnsAddress, "dns-address", "", "IP or host:port where pods in the member reach tenant DNS, such as 10.20.0.10, for tenants reached neither through --node-port-address nor a host LoadBalancer")
	f.StringVar(&a.nodePortAddress, "node-port-address", "", "IP where the member's nodes reach the host's node ports, such as a host node's; member pods then use the tenant's DNS and reach its NodePort Services through it (default: through a host LoadBalancer, for tenants that have one)")
	f.StringVar(&a.selector, "selector", "", "labels of the VirtualClusters that may use the member, such as team=ml,tier=gpu (default: none may)")
	f.StringVar(&a.cpu, "cpu", "", "the most cpu Nest places in the member, such as 64 (default: no cap)")
	f.StringVar(&a.memory, "memory", "", "the most memory Nest places in the member, such as 256Gi (default: no cap)")
	f.StringVar(&a.gpu, "gpu", "", "the most nvidia.com/gpu Nest places in the member, such as 8 (default: no cap)")
	_ = cmd.MarkFlagRequired("kubeconfig")
	return cmd
}

// build checks the flags and returns the MemberCluster and the kubeconfig
// to store, or an error naming the flag to fix. The API server checks the
// addresses again, with the same rules.
func (a memberAdd) build() (*nestv1.MemberCluster, []byte, error) {
	if msgs := validation.IsDNS1123Subdomain(a.name); len(msgs) > 0 || len(a.name) > validation.DNS1123SubdomainMaxLength-len(memberSecretPrefix) {
		return nil, nil, fmt.Errorf("NAME %q: want lower-case letters, digits, '-' and '.', starting and ending with a letter or digit, at most %d characters, such as gpu-pool",
			a.name, validation.DNS1123SubdomainMaxLength-len(memberSecretPrefix))
	}
	kubeconfig, err := memberKubeconfig(a.kubeconfig)
	if err != nil {
		return nil, nil, fmt.Errorf("--kubeconfig %s: %w", a.kubeconfig, err)
	}
	if a.nodePortAddress != "" {
		if _, err := netip.ParseAddr(a.nodePortAddress); err != nil {
			return nil, nil, fmt.Errorf("--node-port-address %q: want an IP address, such as 10.20.0.1", a.nodePortAddress)
		}
	}
	res, err := vcops.Share{CPU: a.cpu, Memory: a.memory, GPU: a.gpu}.Resources()
	if err != nil {
		return nil, nil, asFlagError(err)
	}
	mc := &nestv1.MemberCluster{
		ObjectMeta: metav1.ObjectMeta{Name: a.name},
		Spec: nestv1.MemberClusterSpec{
			KubeconfigSecretRef: nestv1.SecretKeyRef{Namespace: install.Namespace, Name: memberSecretKey(a.name).Name, Key: nestv1.DefaultKubeconfigKey},
			Network:             nestv1.MemberNetwork{APIServerAddress: a.apiServerAddress, DNSAddress: a.dnsAddress, NodePortAddress: a.nodePortAddress},
		},
	}
	if len(res) > 0 {
		mc.Spec.Resources = res
	}
	if a.selector != "" {
		set, err := labels.ConvertSelectorToLabelsMap(a.selector)
		if err != nil {
			return nil, nil, fmt.Errorf("--selector %q: want label pairs such as team=ml,tier=gpu: %w", a.selector, err)
		}
		mc.Spec.VirtualClusterSelector = &metav1.LabelSelector{MatchLabels: set}
	}
	return mc, kubeconfig, nil
}

// memberKubeconfig reads the kubeconfig file at path and returns what is
// stored for nest-manager: its current context alone, so the user's other
// clusters' credentials are not copied into the host, with the files it
// names embedded, since nest-manager cannot read them. It refuses what
// nest-manager would refuse (exec, auth-provider), so the user hears it now.
func memberKubeconfig(path string) ([]byte, error) {
	if path == "" {
		return nil, errors.New("required: the member cluster's kubeconfig file")
	}
	raw, err := clientcmd.LoadFromFile(path)
	if err != nil {
		return nil, fmt.Errorf("not a kubeconfig: %w", err)
	}
	if err := clientcmdapi.MinifyConfig(raw); err != nil {
		return nil, fmt.Errorf("its current context: %w", err)
	}
	if err := clientcmdapi.FlattenConfig(raw); err != nil {
		return nil, fmt.Errorf("embed the files it names: %w", err)
	}
	data, err := clientcmd.Write(*raw)
	if err != nil {
		return nil, err
	}
	if _, err := membercluster.RESTConfig(data, membercluster.DefaultProbeTimeout); err != nil {
		return nil, err
	}
	return data, nil
}

// addMember stores the kubeconfig, then creates the MemberCluster. A
// Secret or MemberCluster of that name is never overwritten; when the
// MemberCluster cannot be created, the Secret made for it is deleted.
func addMember(ctx context.Context, c client.Client, mc *nestv1.MemberCluster, kubeconfig []byte) error {
	existing := &nestv1.MemberCluster{}
	switch err := c.Get(ctx, client.ObjectKey{Name: mc.Name}, existing); {
	case err == nil:
		return fmt.Errorf("NAME %q: MemberCluster %s already exists: remove it with nest member remove %s, or pick another name", mc.Name, mc.Name, mc.Name)
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("get MemberCluster %s: %w", mc.Name, err)
	}
	key := memberSecretKey(mc.Name)
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, Labels: map[string]string{memberLabel: mc.Name}},
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{nestv1.DefaultKubeconfigKey: kubeconfig},
	}
	if err := c.Create(ctx, secret); apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("NAME %q: Secret %s already exists: delete it (kubectl -n %s delete secret %s) or pick another name", mc.Name, key, key.Namespace, key.Name)
	} else if err != nil {
		return fmt.Errorf("store the member's kubeconfig in Secret %s: %w", key, err)
	}
	if err := c.Create(ctx, mc); err != nil {
		if derr := c.Delete(ctx, secret); derr != nil && !apierrors.IsNotFound(derr) {
			err = errors.Join(err, fmt.Errorf("delete Secret %s made for it: %w", key, derr))
		}
		return fmt.Errorf("create MemberCluster %s: %w", mc.Name, err)
	}
	return nil
}

func newMemberListCommand(host *hostFlags) *cobra.Command {
	return newTableCommand(host, "list", "List member clusters: whether nest-manager reaches them and what they offer", listMembers)
}

// listMembers prints every MemberCluster, by name, with ages as of now.
func listMembers(ctx context.Context, c client.Client, w io.Writer, now time.Time) error {
	var list nestv1.MemberClusterList
	if err := c.List(ctx, &list); err != nil {
		return fmt.Errorf("list MemberClusters: %w", err)
	}
	slices.SortFunc(list.Items, func(a, b nestv1.MemberCluster) int { return strings.Compare(a.Name, b.Name) })
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tREACHABLE\tNODES\tCPU\tMEMORY\tGPU\tAGE")
	for _, mc := range list.Items {
		reachable := "Unknown"
		if c := meta.FindStatusCondition(mc.Status.Conditions, nestv1.ConditionReachable); c != nil {
			reachable = string(c.Status)
		}
		age := now.Sub(mc.CreationTimestamp.Time).Round(time.Second)
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\n", mc.Name, reachable, mc.Status.Nodes,
			quantityOf(mc.Status.Allocatable, corev1.ResourceCPU), quantityOf(mc.Status.Allocatable, corev1.ResourceMemory),
			quantityOf(mc.Status.Allocatable, vcops.GPUResource), age)
	}
	return tw.Flush()
}

// quantityOf is l's amount of name, or "<none>" when l has none.
func quantityOf(l corev1.ResourceList, name corev1.ResourceName) string {
	q, ok := l[name]
	if !ok {
		return "<none>"
	}
	return q.String()
}

func newMemberRemoveCommand(host *hostFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "remove NAME",
		Short: "Remove a member cluster: delete the MemberCluster and the Secret nest member add stored its kubeconfig in",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := host.client()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), time.Minute)
			defer cancel()
			if err := removeMember(ctx, c, args[0]); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "membercluster/%s and Secret %s deleted\n", args[0], memberSecretKey(args[0]))
			return nil
		},
	}
}

// removeMember deletes the MemberCluster name and the Secret nest member
// add made for it. Either may already be gone; both gone is an error, as
// it likely names the wrong member. A Secret the MemberCluster names
// elsewhere is left alone: nest member add did not make it.
func removeMember(ctx context.Context, c client.Client, name string) error {
	var gone int
	if err := c.Delete(ctx, &nestv1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: name}}); apierrors.IsNotFound(err) {
		gone++
	} else if err != nil {
		return fmt.Errorf("delete MemberCluster %s: %w", name, err)
	}
	key := memberSecretKey(name)
	if err := c.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}); apierrors.IsNotFound(err) {
		gone++
	} else if err != nil {
		return fmt.Errorf("delete Secret %s: %w", key, err)
	}
	if gone == 2 {
		return fmt.Errorf("NAME %q: no MemberCluster %s and no Secret %s: nest member list shows the members", name, name, key)
	}
	return nil
}
