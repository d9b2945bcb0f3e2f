package snapshot

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/streaming/pkg/httpstream"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/controlplane"
	"github.com/nestdev/nest/internal/etcdmember"
	"github.com/nestdev/nest/internal/vcops"
	"github.com/nestdev/nest/internal/version"
)

// RestoreOptions say how Restore makes the VirtualCluster.
type RestoreOptions struct {
	// StorageSize, when set, is the clone's or the restored tenant's etcd
	// volume size (spec.datastore.storageSize) instead of the snapshot's.
	StorageSize *resource.Quantity
	// As, when set, restores a clone: the tenant under this name and
	// namespace, beside the original, with the original's authorities and
	// service-account key but leaves and an endpoint of its own.
	As types.NamespacedName
	// CreatedBy labels a namespace Restore makes (vcops.Create).
	CreatedBy string
	// Progress receives a line per step.
	Progress io.Writer
}

// Restore brings back the tenant of s, a snapshot Read checked and
// decrypted, under its own name and namespace, or as o.As: a clone, whose
// PKI Secret holds only the authorities and service-account key and which
// gets neither the original's spec.snapshots nor its spec.externalIPs. The
// namespace must hold no VirtualCluster. In order: the PKI Secret, so the
// tenant keeps its CAs and service-account key (kubeconfigs and tokens
// made before work again); the VirtualCluster marked
// nestv1.AnnotationRestoring, so its first etcd member waits for the
// snapshot instead of starting empty; etcd's snapshot sent into that
// member's helper (etcdmember.Receive, through the host API server's exec)
// and s.EtcdPath removed; the wait until the VirtualCluster is Ready; the
// mark removed. The VirtualCluster is the snapshot's name, namespace,
// labels, annotations and spec, at the Kubernetes version the manifest
// says its control plane ran, refused before anything is made when etcd's
// snapshot does not fit its etcd volume (CheckFits). Between the helper
// running and etcd's snapshot sent, the host claim of each of the
// snapshot's volumes is made and filled with its data (restoreVolumes),
// so the tenant's pods, which come back as the syncer makes their host
// pods again, find their volumes as they were.
//
// Each step finds what an interrupted run did: run again with the same
// snapshot, Restore goes on where it stopped. A VirtualCluster of the name
// that another snapshot, or none, made is refused, and nothing changes.
func Restore(ctx context.Context, host client.Client, cfg *rest.Config, s *Snapshot, o RestoreOptions) error {
	if s.Encrypted && s.PKI == nil {
		return fmt.Errorf("the snapshot's keys are encrypted: give the identity that decrypts them (--identity)")
	}
	decoded := &nestv1.VirtualCluster{}
	if err := json.Unmarshal(s.VirtualCluster, decoded); err != nil {
		return fmt.Errorf("the snapshot's VirtualCluster: %w", err)
	}
	// Only what Take keeps, whatever else the file holds.
	vc := portable(decoded)
	if vc.Name != s.Manifest.VirtualCluster || vc.Namespace != s.Manifest.Namespace {
		return fmt.Errorf("the snapshot's VirtualCluster is %s/%s, its manifest names %s/%s: it was changed", vc.Namespace, vc.Name, s.Manifest.Namespace, s.Manifest.VirtualCluster)
	}
	// A snapshot taken during a CA rotation comes back on the CAs that
	// signed then, the rotation settled.
	pkiData, err := controlplane.SettledPKI(s.PKI)
	if err != nil {
		return fmt.Errorf("the snapshot's PKI: %w", err)
	}
	if o.As.Name != "" {
		vc.Name, vc.Namespace = o.As.Name, o.As.Namespace
		// The clone is the tenant under another name: its CAs and
		// service-account key, and leaves ReconcilePKI issues for it.
		pkiData = controlplane.AuthoritiesOf(pkiData)
		// A schedule would push the clone's snapshots beside the
		// original's, and the original's external addresses are not the
		// clone's: both are the platform team's to give it.
		vc.Spec.Snapshots, vc.Spec.ExternalIPs = nil, nil
		// The original's last applied configuration names it.
		delete(vc.Annotations, "kubectl.kubernetes.io/last-applied-configuration")
	} else if a := s.Manifest.Address; a != nil {
		// The tenant itself: its old address, so kubeconfigs made before
		// work unchanged, if the host can still give it.
		b, err := json.Marshal(a)
		if err != nil {
			return err
		}
		if vc.Annotations == nil {
			vc.Annotations = map[string]string{}
		}
		vc.Annotations[nestv1.AnnotationRequestedAddress] = string(b)
	}
	// The version the control plane ran when the snapshot was taken, which
	// etcd's data is of: a snapshot taken during an upgrade comes back
	// before it, and the upgrade is asked for again.
	vc.Spec.KubernetesVersion = s.Manifest.KubernetesVersion
	if err := version.CheckSupported(vc.Spec.KubernetesVersion); err != nil {
		return fmt.Errorf("the snapshot is of Kubernetes %s, which this Nest does not run: %w", vc.Spec.KubernetesVersion, err)
	}
	if o.StorageSize != nil {
		vc.Spec.Datastore.StorageSize = o.StorageSize
	}
	etcdSize, etcdSum, err := hashFile(s.EtcdPath)
	if err != nil {
		return err
	}
	if err := CheckFits(etcdSize, controlplane.StorageSize(vc)); err != nil {
		return err
	}
	if slices.ContainsFunc(s.VolumePaths, func(p string) bool { return p != "" }) {
		if err := checkVolumesCopyable(vc); err != nil {
			return err
		}
	}
	key := client.ObjectKeyFromObject(vc)
	progress := o.Progress
	if progress == nil {
		progress = io.Discard
	}
	start := time.Now()
	step := func(format string, args ...any) {
		fmt.Fprintf(progress, "%6.1fs  %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	if err := createRestoring(ctx, host, vc, pkiData, etcdSum, o.CreatedBy); err != nil {
		return err
	}
	step("VirtualCluster %s made from the snapshot, its PKI restored", key)
	if o.As.Name != "" && decoded.Spec.Snapshots != nil {
		step("the clone has no snapshot schedule (the original's is %q to %s): set spec.snapshots to give it one", decoded.Spec.Snapshots.Schedule, decoded.Spec.Snapshots.To)
	}
	if o.As.Name != "" && len(decoded.Spec.ExternalIPs) > 0 {
		step("the clone has no external IPs (the original's are %s): set spec.externalIPs to give it its own", strings.Join(decoded.Spec.ExternalIPs, ", "))
	}
	pod, err := waitForHelper(ctx, host, key)
	if err != nil {
		return err
	}
	cp, err := copierOf(pod)
	if err != nil {
		return err
	}
	// The VirtualCluster as made, with its UID: the copy pods' owner.
	live := &nestv1.VirtualCluster{}
	if err := host.Get(ctx, key, live); err != nil {
		return err
	}
	// Before etcd's data: the tenant's pods start only once it is back,
	// and find their volumes filled.
	if err := restoreVolumes(ctx, host, cfg, live, cp, s, step); err != nil {
		return err
	}
	s.removeVolumes()
	if err := sendSnapshot(ctx, cfg, pod, s.EtcdPath, etcdSum); err != nil {
		return err
	}
	// Sent: the plain copy of the tenant's data goes from this machine.
	if err := os.Remove(s.EtcdPath); err != nil {
		return err
	}
	step("etcd's snapshot sent to %s", pod.Name)
	if err := waitRestored(ctx, host, key); err != nil {
		return err
	}
	// One-shot marks of the restore: a merge patch removes them whether
	// they are there or not.
	patch := client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:null,%q:null}}}`, nestv1.AnnotationRestoring, nestv1.AnnotationRequestedAddress)))
	if err := host.Patch(ctx, &nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}, patch); err != nil {
		return fmt.Errorf("remove %s from %s: %w", nestv1.AnnotationRestoring, key, err)
	}
	step("VirtualCluster %s is Ready", key)
	if was := s.Manifest.Address; was != nil && o.As.Name == "" {
		switch now := addressOf(ctx, host, controlplane.NamesOf(vc)); {
		case now != nil && *now == *was:
			step("back at its address (%s): kubeconfigs made before work unchanged", describeAddress(was))
		default:
			step("at a new address (it had %s, which the host could not give again): fetch kubeconfigs again with nest kubeconfig", describeAddress(was))
		}
	}
	return nil
}

// describeAddress is a in words.
func describeAddress(a *nestv1.RequestedAddress) string {
	var parts []string
	if a.LoadBalancerIP != "" {
		parts = append(parts, "LoadBalancer "+a.LoadBalancerIP)
	}
	if a.NodePort != 0 {
		parts = append(parts, fmt.Sprintf("node port %d", a.NodePort))
	}
	return strings.Join(parts, ", ")
}

// RestoreSpaceFactor is how many times the size of etcd's snapshot a
// restore needs on the etcd volume at once: the snapshot as received,
// etcdutl's restored copy of it, and etcd's write-ahead log and growth as
// it starts, with room to spare.
const RestoreSpaceFactor = 2.5

// CheckFits refuses a restore whose etcd snapshot of etcdSize bytes needs
// more than volume, the etcd volume's size (RestoreSpaceFactor), naming
// the size to ask for instead.
func CheckFits(etcdSize int64, volume resource.Quantity) error {
	need := int64(float64(etcdSize) * RestoreSpaceFactor)
	if need <= volume.Value() {
		return nil
	}
	want := resource.NewQuantity((need+(1<<30)-1)/(1<<30)*(1<<30), resource.BinarySI)
	return fmt.Errorf("etcd's snapshot is %d bytes, and a restore needs about %.1f times that on the etcd volume, which is %s (spec.datastore.storageSize): restore with --storage-size %s or more", etcdSize, RestoreSpaceFactor, volume.String(), want.String())
}

// createRestoring makes vc, marked restoring from the etcd snapshot of
// SHA-256 etcdSum, with its PKI Secret, unless an interrupted restore of
// the same snapshot made it already.
func createRestoring(ctx context.Context, host client.Client, vc *nestv1.VirtualCluster, pki map[string][]byte, etcdSum, createdBy string) error {
	key := client.ObjectKeyFromObject(vc)
	existing := &nestv1.VirtualCluster{}
	switch err := host.Get(ctx, key, existing); {
	case err == nil && existing.Annotations[nestv1.AnnotationRestoring] == etcdSum:
		return nil
	case err == nil:
		return fmt.Errorf("VirtualCluster %s exists: delete it first (nest delete %s), then restore", key, key.Name)
	case !apierrors.IsNotFound(err):
		return err
	}
	if vc.Annotations == nil {
		vc.Annotations = map[string]string{}
	}
	vc.Annotations[nestv1.AnnotationRestoring] = etcdSum
	n := controlplane.NamesOf(vc)
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: n.PKISecret(), Labels: n.Labels()},
		Type:       corev1.SecretTypeOpaque, Data: pki,
	}
	created, err := vcops.Create(ctx, host, vc, createdBy, secret)
	if err != nil {
		return err
	}
	if !created {
		return fmt.Errorf("VirtualCluster %s appeared while the restore made it: delete it first (nest delete %s), then restore", key, key.Name)
	}
	return nil
}

// waitForHelper waits until the first control-plane pod's etcd-member
// helper runs, and returns the pod.
func waitForHelper(ctx context.Context, host client.Client, key types.NamespacedName) (*corev1.Pod, error) {
	name := controlplane.Names{VirtualCluster: key.Name, Namespace: key.Namespace}.ControlPlanePodOf(0)
	pod := &corev1.Pod{}
	err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		err := host.Get(ctx, types.NamespacedName{Namespace: key.Namespace, Name: name}, pod)
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil && helperRunning(pod), err
	})
	if err != nil {
		return nil, fmt.Errorf("the etcd-member helper of %s/%s does not run: %w", key.Namespace, name, err)
	}
	return pod, nil
}

func helperRunning(pod *corev1.Pod) bool {
	for _, s := range pod.Status.InitContainerStatuses {
		if s.Name == controlplane.EtcdMemberContainer {
			return s.State.Running != nil
		}
	}
	return false
}

// sendSnapshot streams the etcd snapshot at path into the pod's etcd-member
// helper (etcdmember.ReceiveCommand, its binary and --data-dir read from the
// pod's own spec).
func sendSnapshot(ctx context.Context, cfg *rest.Config, pod *corev1.Pod, path, sum string) error {
	var helper *corev1.Container
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == controlplane.EtcdMemberContainer {
			helper = &pod.Spec.InitContainers[i]
		}
	}
	dataDir := ""
	if helper != nil {
		for _, a := range helper.Args {
			if v, ok := strings.CutPrefix(a, "--data-dir="); ok {
				dataDir = v
			}
		}
	}
	if helper == nil || len(helper.Command) == 0 || dataDir == "" {
		return fmt.Errorf("pod %s/%s has no etcd-member helper with a --data-dir", pod.Namespace, pod.Name)
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return err
	}
	command := []string{helper.Command[0], etcdmember.Command, etcdmember.ReceiveCommand,
		"--data-dir=" + dataDir, fmt.Sprintf("--size=%d", info.Size()), "--sha256=" + sum}
	// A bound of its own, so a stalled stream fails with the helper's
	// words rather than holding the restore: two minutes, and a second a
	// megabyte.
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute+time.Duration(info.Size()>>20)*time.Second)
	defer cancel()
	var out bytes.Buffer
	// The helper answers success for a snapshot it already restored
	// (etcdmember.Receive), and refuses any other data.
	if err := execIn(ctx, cfg, pod, helper.Name, command, f, &out, &out); err != nil {
		return fmt.Errorf("send etcd's snapshot to %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return nil
}

// execIn runs command in container of pod through the host API server's
// exec, with stdin (nil for none) and stdout streamed, and returns its
// error with what it wrote to stderr.
func execIn(ctx context.Context, cfg *rest.Config, pod *corev1.Pod, container string, command []string, stdin io.Reader, stdout io.Writer, stderr *bytes.Buffer) error {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	url := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(pod.Namespace).Name(pod.Name).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: container, Command: command, Stdin: stdin != nil, Stdout: true, Stderr: true}, scheme.ParameterCodec).URL()
	// WebSockets first, as kubectl exec does: the SPDY exec stream through
	// the host API server can stall before the command starts.
	ws, err := remotecommand.NewWebSocketExecutor(cfg, "GET", url.String())
	if err != nil {
		return err
	}
	spdyExec, err := remotecommand.NewSPDYExecutor(cfg, "POST", url)
	if err != nil {
		return err
	}
	exec, err := remotecommand.NewFallbackExecutor(ws, spdyExec, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		return err
	}
	opts := remotecommand.StreamOptions{Stdout: stdout, Stderr: stderr}
	if stdin != nil {
		opts.Stdin = stdin
	}
	if err := exec.StreamWithContext(ctx, opts); err != nil {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// waitRestored waits until the VirtualCluster is Ready.
func waitRestored(ctx context.Context, host client.Client, key types.NamespacedName) error {
	vc := &nestv1.VirtualCluster{}
	err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		if err := host.Get(ctx, key, vc); err != nil {
			return false, err
		}
		return meta.IsStatusConditionTrue(vc.Status.Conditions, nestv1.ConditionReady), nil
	})
	if err != nil {
		return fmt.Errorf("VirtualCluster %s restored but not Ready (phase %q): %w", key, vc.Status.Phase, err)
	}
	return nil
}
