package cli

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"text/tabwriter"
	"time"

	"filippo.io/age"
	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/snapshot"
	"github.com/nestdev/nest/internal/vcops"
	"github.com/nestdev/nest/internal/version"
)

// newSnapshotCommand is nest snapshot: create and verify a virtual
// cluster's snapshots.
func newSnapshotCommand(host *hostFlags) *cobra.Command {
	cmd := &cobra.Command{Use: "snapshot", Short: "Take and check snapshots of a virtual cluster: its etcd, VirtualCluster, PKI and (with --include-volumes) volumes in one file or OCI artifact"}
	cmd.AddCommand(newSnapshotCreateCommand(host), newSnapshotVerifyCommand(), newSnapshotListCommand(host), newSnapshotRequestCommand(host))
	return cmd
}

// newRestoreCommand is nest restore NAME --from URL: a deleted virtual
// cluster back from its snapshot.
func newRestoreCommand(host *hostFlags) *cobra.Command {
	var (
		from, identityFile string
		as, ns             string
		storageSize        string
		plainHTTP          bool
		timeout            time.Duration
	)
	cmd := &cobra.Command{
		Use:   "restore NAME --from URL --identity FILE [--as NEWNAME [-n NAMESPACE]]",
		Short: "Bring a virtual cluster back from its snapshot, under its own name, with its CAs and every tenant object",
		Long: "Bring the virtual cluster NAME back from a snapshot of it (nest snapshot create), in the host namespace " +
			"it was taken from, which must hold no VirtualCluster. The snapshot is checked whole, and decrypted, " +
			"before anything on the host changes. The tenant keeps its CAs and service-account key, and its address " +
			"where the host can give it again, so kubeconfigs and tokens made before work again, and its etcd starts " +
			"from the snapshot's data; its pods come back " +
			"with new host pods. Run again after an interruption, it goes on where it stopped. URL is file://PATH or " +
			"oci://REGISTRY/REPOSITORY:TAG (credentials from the Docker config). With --as, the tenant is restored " +
			"as a clone beside the original, under NEWNAME in the namespace -n names (default vc-NEWNAME): the same " +
			"CAs and service-account key, so the tenant's tokens and client certificates work there too, but its own " +
			"endpoint and serving certificates, and neither the original's snapshot schedule nor its external IPs. " +
			"The tenant's PersistentVolumeClaims get their host volumes back before its etcd: filled with their files " +
			"when the snapshot holds them (--include-volumes), else empty.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if as == "" && ns != "" {
				return fmt.Errorf("-n %s: the namespace of a clone goes with --as; the tenant itself comes back in the namespace it was taken from", ns)
			}
			var size *resource.Quantity
			if storageSize != "" {
				q, err := resource.ParseQuantity(storageSize)
				if err != nil || q.Sign() <= 0 {
					return fmt.Errorf("--storage-size %q: want a positive size, such as 4Gi", storageSize)
				}
				size = &q
			}
			ctx, cancel := signalContext(cmd.Context(), timeout)
			defer cancel()
			s, path, err := readSnapshot(ctx, from, identityFile, plainHTTP)
			if err != nil {
				return err
			}
			defer s.Remove()
			if s.Encrypted && identityFile == "" {
				return fmt.Errorf("%s: its keys are encrypted: give the identity that decrypts them (--identity)", path)
			}
			if !s.Encrypted && identityFile != "" {
				// A sealed snapshot was expected: this one may have been
				// put in its place.
				return fmt.Errorf("%s: its keys and etcd's data are not encrypted although --identity was given: it is not the sealed snapshot expected", path)
			}
			if s.Manifest.VirtualCluster != args[0] {
				return fmt.Errorf("NAME %q: the snapshot is of %s/%s: name it, and give another name with --as to restore a clone", args[0], s.Manifest.Namespace, s.Manifest.VirtualCluster)
			}
			var clone types.NamespacedName
			if as != "" {
				clone = types.NamespacedName{Namespace: resolveNamespace(ns, as), Name: as}
				if clone.Namespace == s.Manifest.Namespace && clone.Name == s.Manifest.VirtualCluster {
					return fmt.Errorf("--as %s: that is the snapshot's own name and namespace: leave --as out to restore the tenant itself", as)
				}
			}
			c, err := host.client()
			if err != nil {
				return err
			}
			cfg, err := host.restConfig()
			if err != nil {
				return err
			}
			return snapshot.Restore(ctx, c, cfg, s, snapshot.RestoreOptions{As: clone, StorageSize: size, CreatedBy: vcops.CreatedByCLI, Progress: cmd.OutOrStdout()})
		},
	}
	cmd.Flags().StringVar(&from, "from", "", "the snapshot: file://PATH or oci://REGISTRY/REPOSITORY:TAG")
	plainHTTPFlag(cmd, &plainHTTP)
	cmd.Flags().StringVar(&identityFile, "identity", "", "age identity file (AGE-SECRET-KEY-...) that decrypts the snapshot")
	cmd.Flags().StringVar(&as, "as", "", "restore a clone under this name, beside the original")
	cmd.Flags().StringVarP(&ns, "namespace", "n", "", "host namespace of the clone (with --as; default vc-NEWNAME)")
	cmd.Flags().StringVar(&storageSize, "storage-size", "", fmt.Sprintf("etcd volume size of the restored tenant (spec.datastore.storageSize), instead of the snapshot's; a restore needs about %.1f times etcd's snapshot", snapshot.RestoreSpaceFactor))
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Minute, "how long the restore may take")
	return cmd
}

// readSnapshot reads and checks the snapshot the --from URL names
// (snapshot.Read), decrypting it with the identity file's identities when
// one is given, staging etcd's snapshot in the system's temporary
// directory; it returns the snapshot and its URL.
func readSnapshot(ctx context.Context, from, identityFile string, plainHTTP bool) (*snapshot.Snapshot, string, error) {
	l, err := snapshot.ParseLocation(from, plainHTTP)
	if err != nil {
		return nil, "", fmt.Errorf("--from: %w", err)
	}
	var ids []age.Identity
	if identityFile != "" {
		if ids, err = parseIdentities(identityFile); err != nil {
			return nil, "", err
		}
	}
	rc, err := l.Open(ctx)
	if err != nil {
		return nil, "", fmt.Errorf("--from: %w", err)
	}
	defer rc.Close()
	// Staged in the system's temporary directory, mode 0600, not beside
	// the snapshot: decrypted, it holds the tenant's Secrets, and a backup
	// mount may be read-only.
	s, err := snapshot.Read(bufio.NewReader(rc), "", ids)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", l.URL, err)
	}
	return s, l.URL, nil
}

func newSnapshotCreateCommand(host *hostFlags) *cobra.Command {
	var (
		ns, to         string
		recipients     []string
		recipientsFile string
		plaintextKeys  bool
		plainHTTP      bool
		includeVolumes bool
		timeout        time.Duration
	)
	cmd := &cobra.Command{
		Use:   "create NAME --to URL [--include-volumes]",
		Short: "Write a snapshot of a virtual cluster: etcd's snapshot from a Ready member, the VirtualCluster and the PKI",
		Long: "Write a snapshot of the virtual cluster NAME to a file (mode 0600): etcd's snapshot, taken from a Ready " +
			"member through etcd's maintenance API with no pause and no restart, the VirtualCluster's spec, and the PKI " +
			"(every CA, certificate and key). etcd's snapshot and the PKI are encrypted with age to the recipients given " +
			"(--recipient, --recipients-file); etcd holds the tenant's Secrets. A manifest gives Nest's and Kubernetes' " +
			"versions and each part's size and SHA-256. URL is file://PATH, or oci://REGISTRY/REPOSITORY:TAG for an OCI " +
			"artifact pushed once whole, with the Docker config's credentials (plain HTTP to a loopback or private address, " +
			"or with --plain-http). With --include-volumes, the files of every bound PersistentVolumeClaim of the tenant " +
			"go in too, encrypted the same way, each copied by a short-lived host pod that mounts its volume read-only " +
			"while the tenant runs (a tenant whose host namespace enforces the restricted Pod Security level is refused).",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			l, err := snapshot.ParseLocation(to, plainHTTP)
			if err != nil {
				return fmt.Errorf("--to: %w", err)
			}
			rs, err := parseRecipients(recipients, recipientsFile)
			if err != nil {
				return err
			}
			if err := snapshot.CheckKeys(rs, plaintextKeys); err != nil {
				return err
			}
			cfg, err := host.restConfig()
			if err != nil {
				return err
			}
			ctx, cancel := signalContext(cmd.Context(), timeout)
			defer cancel()
			cmd.SetContext(ctx)
			return withTarget(cmd, host, args[0], ns, timeout, func(ctx context.Context, c client.Client, key types.NamespacedName) error {
				m, err := l.Save(ctx, "", func(w io.Writer) (snapshot.Manifest, error) {
					return snapshot.Take(ctx, c, cfg, key, w, snapshot.TakeOptions{
						Recipients: rs, PlaintextKeys: plaintextKeys, NestVersion: version.Nest, IncludeVolumes: includeVolumes,
					})
				})
				if err != nil {
					return err
				}
				printManifest(cmd.OutOrStdout(), l.URL, m)
				return nil
			})
		},
	}
	namespaceFlag(cmd, &ns)
	cmd.Flags().StringVar(&to, "to", "", "where the snapshot goes: file://PATH or oci://REGISTRY/REPOSITORY:TAG")
	plainHTTPFlag(cmd, &plainHTTP)
	cmd.Flags().StringArrayVar(&recipients, "recipient", nil, "age recipient (age1...) the keys and etcd's data are encrypted to; repeatable")
	cmd.Flags().StringVar(&recipientsFile, "recipients-file", "", "file of age recipients, one a line (# comments)")
	cmd.Flags().BoolVar(&plaintextKeys, "insecure-plaintext-keys", false, "with no recipient, store the CA and service-account keys and etcd's data unencrypted")
	cmd.Flags().BoolVar(&includeVolumes, "include-volumes", false, "copy the files of the tenant's PersistentVolumeClaims into the snapshot")
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Minute, "how long the snapshot may take")
	return cmd
}

func newSnapshotVerifyCommand() *cobra.Command {
	var (
		from, identityFile string
		plainHTTP          bool
	)
	cmd := &cobra.Command{
		Use:   "verify --from URL",
		Short: "Check a snapshot: its manifest, every part's size and SHA-256, and with --identity that its keys decrypt",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, path, err := readSnapshot(cmd.Context(), from, identityFile, plainHTTP)
			if err != nil {
				return err
			}
			s.Remove()
			printManifest(cmd.OutOrStdout(), path, s.Manifest)
			switch {
			case !s.Encrypted:
				fmt.Fprintln(cmd.OutOrStdout(), "keys: stored unencrypted")
			case identityFile == "":
				fmt.Fprintln(cmd.OutOrStdout(), "keys: encrypted, not checked (no --identity)")
			default:
				fmt.Fprintf(cmd.OutOrStdout(), "keys: decrypted with %s (%d files)\n", identityFile, len(s.PKI))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&from, "from", "", "the snapshot: file://PATH or oci://REGISTRY/REPOSITORY:TAG")
	plainHTTPFlag(cmd, &plainHTTP)
	cmd.Flags().StringVar(&identityFile, "identity", "", "age identity file (AGE-SECRET-KEY-...) that decrypts the snapshot's keys")
	return cmd
}

// plainHTTPFlag is --plain-http, for a registry that serves plain HTTP at
// an address go-containerregistry would reach over HTTPS.
func plainHTTPFlag(cmd *cobra.Command, v *bool) {
	cmd.Flags().BoolVar(v, "plain-http", false, "reach an oci:// registry over plain HTTP when HTTPS fails (loopback and private addresses need not say so)")
}

func newSnapshotListCommand(host *hostFlags) *cobra.Command {
	var (
		ns, in    string
		plainHTTP bool
		timeout   time.Duration
	)
	cmd := &cobra.Command{
		Use:   "list NAME [--in oci://REGISTRY/REPOSITORY]",
		Short: "List a virtual cluster's snapshots in an OCI repository: its schedule's (spec.snapshots.to) unless --in names another",
		Long: "List the snapshots of the virtual cluster NAME in an OCI repository, oldest first: the repository of its " +
			"snapshot schedule (spec.snapshots.to), or the one --in names. Each line gives the tag, when etcd's snapshot " +
			"was taken, its etcd revision, its size and its digest; scheduled ones (tags auto-...) are those the " +
			"schedule prunes to spec.snapshots.keep. The schedule's last outcome follows.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withTarget(cmd, host, args[0], ns, timeout, func(ctx context.Context, c client.Client, key types.NamespacedName) error {
				vc := &nestv1.VirtualCluster{}
				if err := c.Get(ctx, key, vc); err != nil && (in == "" || !apierrors.IsNotFound(err)) {
					return err
				}
				repo, plain := in, plainHTTP
				if repo == "" {
					if vc.Spec.Snapshots == nil {
						return fmt.Errorf("virtual cluster %s has no snapshot schedule (spec.snapshots): name a repository with --in oci://REGISTRY/REPOSITORY", key)
					}
					repo, plain = vc.Spec.Snapshots.To, vc.Spec.Snapshots.PlainHTTP || plainHTTP
				}
				r, err := snapshot.ParseRepository(repo, plain)
				if err != nil {
					return fmt.Errorf("--in: %w", err)
				}
				listed, err := snapshot.List(ctx, r)
				if err != nil {
					return err
				}
				printListed(cmd.OutOrStdout(), key, listed)
				if c := meta.FindStatusCondition(vc.Status.Conditions, nestv1.ConditionSnapshotsSucceeding); c != nil && vc.Spec.Snapshots != nil {
					fmt.Fprintf(cmd.OutOrStdout(), "schedule %q: %s %s: %s\n", vc.Spec.Snapshots.Schedule, c.Reason, c.Status, c.Message)
				}
				return nil
			})
		},
	}
	namespaceFlag(cmd, &ns)
	cmd.Flags().StringVar(&in, "in", "", "the OCI repository to list, oci://REGISTRY/REPOSITORY (default: spec.snapshots.to)")
	plainHTTPFlag(cmd, &plainHTTP)
	cmd.Flags().DurationVar(&timeout, "timeout", time.Minute, "how long listing may take")
	return cmd
}

func newSnapshotRequestCommand(host *hostFlags) *cobra.Command {
	var (
		ns      string
		wait    bool
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "request NAME [--wait]",
		Short: "Ask nest-manager for a snapshot now, to the virtual cluster's schedule's repository (spec.snapshots)",
		Long: "Ask nest-manager for a snapshot of the virtual cluster NAME now, outside its schedule: taken as a scheduled " +
			"one is, sealed to the schedule's recipients, pushed to spec.snapshots.to tagged auto-<time>, and counted in " +
			"its keep (annotation nest.dev/snapshot-requested). With --wait, return once it is pushed and print it.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withTarget(cmd, host, args[0], ns, timeout, func(ctx context.Context, c client.Client, key types.NamespacedName) error {
				req, err := vcops.RequestSnapshot(ctx, c, key, time.Now())
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "snapshot of %s requested (%s)\n", key, req)
				if !wait {
					return nil
				}
				return waitRequestServed(ctx, c, key, req, cmd.OutOrStdout())
			})
		},
	}
	namespaceFlag(cmd, &ns)
	cmd.Flags().BoolVar(&wait, "wait", false, "wait until the snapshot is pushed")
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Minute, "how long to wait")
	return cmd
}

// waitRequestServed polls until status.snapshots.lastRequest is req and
// prints the snapshot, or fails with the schedule's condition when it says
// the snapshot failed.
func waitRequestServed(ctx context.Context, c client.Client, key types.NamespacedName, req string, out io.Writer) error {
	vc := &nestv1.VirtualCluster{}
	err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, key, vc); err != nil {
			return false, err
		}
		st := vc.Status.Snapshots
		return st != nil && st.LastRequest == req && st.LastSnapshot != nil, nil
	})
	if err != nil {
		if cond := meta.FindStatusCondition(vc.Status.Conditions, nestv1.ConditionSnapshotsSucceeding); cond != nil && cond.Status == metav1.ConditionFalse {
			return fmt.Errorf("the snapshot of %s was not taken: %s: %s", key, cond.Reason, cond.Message)
		}
		return fmt.Errorf("the snapshot of %s was not taken: %w", key, err)
	}
	last := vc.Status.Snapshots.LastSnapshot
	fmt.Fprintf(out, "%s: taken %s, etcd revision %d, %d bytes\n", last.URL, last.Time.Format(time.RFC3339), last.EtcdRevision, last.Size)
	return nil
}

// printListed prints the snapshots of key among listed, a line each.
func printListed(w io.Writer, key types.NamespacedName, listed []snapshot.Listed) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TAG\tTAKEN\tETCD REVISION\tSIZE\tDIGEST")
	for _, l := range snapshot.OfVirtualCluster(listed, key) {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\n", l.Tag, l.Manifest.Created.Format(time.RFC3339), l.Manifest.EtcdRevision, l.Size, l.Digest)
	}
	tw.Flush()
}

// signalContext is parent bound by timeout and ended by SIGINT or SIGTERM,
// so a stopped command still removes the unencrypted copy of etcd's data
// it staged.
func signalContext(parent context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	ctx, stop := signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	return ctx, func() { cancel(); stop() }
}

// printManifest prints what a snapshot holds, a line each.
func printManifest(w io.Writer, path string, m snapshot.Manifest) {
	fmt.Fprintf(w, "snapshot %s: virtual cluster %s/%s, Kubernetes %s, etcd revision %d from %s, taken %s by Nest %s\n",
		path, m.Namespace, m.VirtualCluster, m.KubernetesVersion, m.EtcdRevision, m.Member, m.Created.Format(time.RFC3339), m.NestVersion)
	for _, p := range m.Parts {
		fmt.Fprintf(w, "  %-16s %12d bytes  sha256:%s\n", p.Name, p.Size, p.SHA256)
	}
	for _, v := range m.Volumes {
		data := "no data: comes back empty"
		if v.Part != "" {
			data = fmt.Sprintf("%d files, %d bytes of contents in %s", v.Stats.Files, v.Stats.Bytes, v.Part)
		}
		fmt.Fprintf(w, "  claim %s/%s (%s, %s): %s\n", v.Namespace, v.Name, v.StorageClassName, v.Request.String(), data)
	}
}

// parseRecipients reads age recipients from the flags and a file.
func parseRecipients(flags []string, file string) ([]age.Recipient, error) {
	var out []age.Recipient
	for _, r := range flags {
		rec, err := age.ParseX25519Recipient(r)
		if err != nil {
			return nil, fmt.Errorf("--recipient %q: want an age recipient (age1...): %w", r, err)
		}
		out = append(out, rec)
	}
	if file != "" {
		f, err := os.Open(file)
		if err != nil {
			return nil, fmt.Errorf("--recipients-file: %w", err)
		}
		defer f.Close()
		rs, err := age.ParseRecipients(f)
		if err != nil {
			return nil, fmt.Errorf("--recipients-file %s: %w", file, err)
		}
		out = append(out, rs...)
	}
	return out, nil
}

// parseIdentities reads the age identities of an identity file.
func parseIdentities(file string) ([]age.Identity, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("--identity: %w", err)
	}
	defer f.Close()
	ids, err := age.ParseIdentities(f)
	if err != nil {
		return nil, fmt.Errorf("--identity %s: %w", file, err)
	}
	return ids, nil
}
