package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	apiwait "k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/controlplane"
	"github.com/nestdev/nest/internal/vcops"
)

// newCertsCommand builds nest certs and its subcommands.
func newCertsCommand(host *hostFlags) *cobra.Command {
	cmd := &cobra.Command{Use: "certs", Short: "Inspect a virtual cluster's certificates and issue them anew"}
	var ns string
	check := &cobra.Command{
		Use:   "check NAME",
		Short: "List every certificate and CA of a virtual cluster with its expiry",
		Long: "List every certificate and CA of a virtual cluster, soonest to expire first: those of its PKI Secret " +
			"(NAME-pki) and the client certificates of its kubeconfigs (NAME-kubeconfig, NAME-component-kubeconfigs). " +
			"STATUS is EXPIRING within 30 days, OUTLIVES-CA when a certificate expires after the CA that signed it " +
			"(clients stop trusting it when the CA expires), else ok.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withTarget(cmd, host, args[0], ns, time.Minute, func(ctx context.Context, c client.Client, key types.NamespacedName) error {
				return printCertificates(ctx, c, key, time.Now(), cmd.OutOrStdout())
			})
		},
	}
	namespaceFlag(check, &ns)
	cmd.AddCommand(check, newCertsRotateCommand(host))
	return cmd
}

// newCertsRotateCommand is nest certs rotate NAME [--wait]: every leaf
// certificate issued anew.
func newCertsRotateCommand(host *hostFlags) *cobra.Command {
	var (
		ns      string
		wait    bool
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "rotate NAME [--wait]",
		Short: "Issue every leaf certificate of a virtual cluster anew, restarting its control-plane pods one at a time",
		Long: "Ask nest-manager to issue every leaf certificate of the virtual cluster NAME anew, now: the API server's, " +
			"etcd's, the front proxy's, the kubelet client's and nest-syncer's, and the client certificates of the " +
			"component, nest-manager and admin kubeconfigs, from the same CAs (annotation nest.dev/rotate-certificates; " +
			"status.certificates.lastRotation shows it served). The control-plane pods restart onto them one at a time, " +
			"as for any renewal. The CAs and the service-account key stay, so other kubeconfigs and tokens keep " +
			"working; the admin kubeconfig's new certificate is in spec.kubeconfig (nest kubeconfig). With --wait it " +
			"returns once every leaf is new and every control-plane pod restarted and ready.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withTarget(cmd, host, args[0], ns, timeout, func(ctx context.Context, c client.Client, key types.NamespacedName) error {
				request, err := vcops.RequestRotation(ctx, c, key, time.Now())
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "rotation of %s asked for (%s)\n", key, request)
				if !wait {
					return nil
				}
				start, why := time.Now(), ""
				err = apiwait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
					done, w, err := vcops.RotationDone(ctx, c, key, request)
					why = w
					return done, err
				})
				if err != nil {
					return fmt.Errorf("the rotation of %s is not over (%s): %w", key, why, err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "every leaf certificate of %s issued anew and its control plane restarted in %.1fs\n", key, time.Since(start).Seconds())
				return nil
			})
		},
	}
	namespaceFlag(cmd, &ns)
	cmd.Flags().BoolVar(&wait, "wait", false, "wait until every leaf is new and the control plane restarted")
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Minute, "how long the command may take")
	return cmd
}

// printCertificates prints the certificates of the VirtualCluster key as of
// now, one a line.
func printCertificates(ctx context.Context, c client.Client, key types.NamespacedName, now time.Time, w io.Writer) error {
	vc := &nestv1.VirtualCluster{}
	if err := c.Get(ctx, key, vc); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("NAME %q: no VirtualCluster %s: nest list shows them; -n names the host namespace", key.Name, key)
		}
		return fmt.Errorf("get VirtualCluster %s: %w", key, err)
	}
	var secrets []corev1.Secret
	for _, name := range controlplane.NamesOf(vc).Secrets() {
		s := corev1.Secret{}
		err := c.Get(ctx, types.NamespacedName{Namespace: key.Namespace, Name: name}, &s)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("get Secret %s/%s: %w", key.Namespace, name, err)
		}
		secrets = append(secrets, s)
	}
	if len(secrets) == 0 {
		return fmt.Errorf("VirtualCluster %s has no PKI Secret yet: nest-manager makes it first thing; see nest list", key)
	}
	certs, err := controlplane.Certificates(secrets, now)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SECRET\tKEY\tSUBJECT\tISSUER\tEXPIRES\tIN\tSTATUS")
	for _, cert := range certs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", cert.Secret, cert.Key, cert.Subject, cert.Issuer,
			cert.NotAfter.UTC().Format(time.RFC3339), remaining(cert.NotAfter.Sub(now)), certStatus(cert))
	}
	return tw.Flush()
}

// certStatus is a certificate's STATUS column.
func certStatus(c controlplane.Certificate) string {
	var s []string
	if c.Expiring {
		s = append(s, "EXPIRING")
	}
	if c.OutlivesIssuer {
		s = append(s, "OUTLIVES-CA")
	}
	if len(s) == 0 {
		return "ok"
	}
	return strings.Join(s, ",")
}

// remaining is d in days, or hours under two days; "expired" when past.
func remaining(d time.Duration) string {
	switch {
	case d <= 0:
		return "expired"
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}
