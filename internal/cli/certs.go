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
			"(clients stop trusting it when the CA expires), else ok. A CA rotation under way is printed first, with its phase " +
			"and when the old CAs go; else the last one.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withTarget(cmd, host, args[0], ns, time.Minute, func(ctx context.Context, c client.Client, key types.NamespacedName) error {
				return printCertificates(ctx, c, key, time.Now(), cmd.OutOrStdout())
			})
		},
	}
	namespaceFlag(check, &ns)
	cmd.AddCommand(check, newCertsRotateCommand(host), newCertsRotateCACommand(host))
	return cmd
}

// newCertsRotateCACommand is nest certs rotate-ca NAME [--ca ...] [--grace
// D] [--wait] [--finish]: CAs replaced in phases.
func newCertsRotateCACommand(host *hostFlags) *cobra.Command {
	var (
		ns           string
		cas          []string
		grace        time.Duration
		wait, finish bool
		timeout      time.Duration
	)
	cmd := &cobra.Command{
		Use:   "rotate-ca NAME [--ca cluster,etcd,front-proxy,service-account] [--grace 24h] [--wait] [--finish]",
		Short: "Replace a virtual cluster's CAs and service-account key in phases, with no failed call",
		Long: "Ask nest-manager to replace the CAs of the virtual cluster NAME (--ca: cluster, etcd, front-proxy, " +
			"service-account; all when unset), in phases that status.certificates.caRotation names (annotation " +
			"nest.dev/rotate-ca): Trust adds each new CA beside the old one to every trust bundle (the API servers', " +
			"etcd's, the tenant's kube-root-ca.crt, every kubeconfig's); Reissue issues every leaf and kubeconfig from " +
			"the new CA, and the new service-account key signs; Grace keeps the old CA trusted for --grace; Retire " +
			"removes it. The control-plane pods restart one at a time in each of Trust, Reissue and Retire. Kubeconfigs " +
			"holding the old CA alone keep working until Retire, and fail after it: fetch the new one (nest kubeconfig) " +
			"during Grace. --wait returns once Reissue is over; --finish (alone, on a rotation under way) ends its " +
			"grace now, and with --wait returns once the old CAs are gone. Dedicated nodes rejoin in place with each " +
			"phase's cluster CA bundle (their pods keep running), and each phase waits for them.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if finish && (len(cas) > 0 || cmd.Flags().Changed("grace")) {
				return fmt.Errorf("--finish ends the rotation under way: give it without --ca and --grace")
			}
			return withTarget(cmd, host, args[0], ns, timeout, func(ctx context.Context, c client.Client, key types.NamespacedName) error {
				out := cmd.OutOrStdout()
				var request string
				var err error
				want := nestv1.CAPhaseGrace
				if finish {
					want = nestv1.CAPhaseDone
					request, err = vcops.FinishCARotation(ctx, c, key)
				} else {
					var g *time.Duration
					if cmd.Flags().Changed("grace") {
						g = &grace
					}
					request, err = vcops.RequestCARotation(ctx, c, key, caNames(cas), g, time.Now())
				}
				if err != nil {
					return err
				}
				fmt.Fprintf(out, "CA rotation %s of %s asked for\n", request, key)
				if !wait {
					return nil
				}
				start, phase := time.Now(), nestv1.CARotationPhase("")
				err = apiwait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
					done, p, err := vcops.CARotationReached(ctx, c, key, request, want)
					phase = p
					return done, err
				})
				if err != nil {
					return fmt.Errorf("the CA rotation %s of %s has not reached phase %s (it is in %q): %w", request, key, want, phase, err)
				}
				fmt.Fprintf(out, "CA rotation %s of %s in phase %s after %.1fs\n", request, key, phase, time.Since(start).Seconds())
				return nil
			})
		},
	}
	namespaceFlag(cmd, &ns)
	cmd.Flags().StringSliceVar(&cas, "ca", nil, "the CAs to replace: cluster, etcd, front-proxy, service-account (all when unset)")
	cmd.Flags().DurationVar(&grace, "grace", nestv1.DefaultCARotationGrace, "how long the old CAs stay trusted once every leaf is new")
	cmd.Flags().BoolVar(&wait, "wait", false, "wait until every leaf is issued from the new CAs (with --finish: until the old CAs are gone)")
	cmd.Flags().BoolVar(&finish, "finish", false, "end the grace of the rotation under way now")
	cmd.Flags().DurationVar(&timeout, "timeout", 15*time.Minute, "how long the command may take")
	return cmd
}

func caNames(in []string) []nestv1.CAName {
	out := make([]nestv1.CAName, len(in))
	for i, s := range in {
		out[i] = nestv1.CAName(s)
	}
	return out
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
	printCARotation(w, vc.Status.Certificates, now)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SECRET\tKEY\tSUBJECT\tISSUER\tEXPIRES\tIN\tSTATUS")
	for _, cert := range certs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", cert.Secret, cert.Key, cert.Subject, cert.Issuer,
			cert.NotAfter.UTC().Format(time.RFC3339), remaining(cert.NotAfter.Sub(now)), certStatus(cert))
	}
	return tw.Flush()
}

// printCARotation prints the CA rotation under way, or the last one.
func printCARotation(w io.Writer, st *nestv1.CertificatesStatus, now time.Time) {
	switch {
	case st == nil:
	case st.CARotation != nil:
		r := st.CARotation
		fmt.Fprintf(w, "CA rotation %s of %s: phase %s since %s", r.Request, controlplane.CANameList(r.Authorities), r.Phase, r.PhaseTime.UTC().Format(time.RFC3339))
		if r.RetireAfter != nil {
			fmt.Fprintf(w, "; the old CAs are retired in %s (nest certs rotate-ca --finish: now)", r.RetireAfter.Sub(now).Round(time.Second))
		}
		fmt.Fprintln(w)
	case st.LastCARotation != nil:
		r := st.LastCARotation
		fmt.Fprintf(w, "last CA rotation %s of %s: done %s\n", r.Request, controlplane.CANameList(r.Authorities), r.PhaseTime.UTC().Format(time.RFC3339))
	}
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
