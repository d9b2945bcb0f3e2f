package snapshot

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/controlplane"
	"github.com/nestdev/nest/internal/syncer/contract"
	"github.com/nestdev/nest/internal/volumearchive"
)

// Volume is a tenant PersistentVolumeClaim as a snapshot keeps it: the
// tenant claim its host claim stands for (contract.HostAnnotations), the
// host claim's spec, and, when the snapshot includes volumes, the part that
// holds its files.
type Volume struct {
	// Namespace, Name and UID are the tenant claim's. The UID is etcd's,
	// which comes back with it: the restored host claim carries it, so the
	// syncer takes it for that claim's.
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
	// StorageClassName is the host class, AccessModes, VolumeMode and
	// Request the host claim's.
	StorageClassName string                              `json:"storageClassName"`
	AccessModes      []corev1.PersistentVolumeAccessMode `json:"accessModes"`
	VolumeMode       *corev1.PersistentVolumeMode        `json:"volumeMode,omitempty"`
	Request          resource.Quantity                   `json:"request"`
	// Part names the archive entry of its files, "" when the snapshot
	// does not hold them (taken without volumes, or a claim never bound):
	// the claim comes back empty.
	Part string `json:"part,omitempty"`
	// Stats counts what the part holds.
	Stats volumearchive.Stats `json:"stats"`
}

// AnnotationVolumeRestored marks a host claim Restore made and filled: its
// value is the SHA-256 of the part it was filled from, so a restore run
// again skips it.
const AnnotationVolumeRestored = "nest.dev/volume-restored"

// copyContainer is the copy pod's one container.
const copyContainer = "copy"

// CopyPodComponent is the app.kubernetes.io/component label of the copy
// pods.
const CopyPodComponent = "volume-copy"

// copyPodLifetime bounds a copy pod whose maker was lost and had no
// deadline (holdFor): its main process and the pod end by then. A copy that
// takes longer is cut off.
const copyPodLifetime = 6 * time.Hour

// copyPodStartTimeout bounds the wait for a copy pod to run: its volume
// bound and mounted, its image there.
const copyPodStartTimeout = 5 * time.Minute

// volumeMountPath is where a copy pod mounts the claim.
const volumeMountPath = "/volume"

// tenantClaims returns the host claims of vc that stand for tenant claims,
// by name.
func tenantClaims(ctx context.Context, host client.Client, vc *nestv1.VirtualCluster) ([]corev1.PersistentVolumeClaim, error) {
	var list corev1.PersistentVolumeClaimList
	if err := host.List(ctx, &list, client.InNamespace(vc.Namespace), client.MatchingLabels{contract.LabelTenantOf: vc.Name}); err != nil {
		return nil, fmt.Errorf("list the host claims of %s: %w", vc.Name, err)
	}
	var out []corev1.PersistentVolumeClaim
	for _, c := range list.Items {
		if _, _, ok := contract.TenantKey(c.Annotations); ok && c.Annotations[contract.AnnotationTenantUID] != "" {
			out = append(out, c)
		}
	}
	slices.SortFunc(out, func(a, b corev1.PersistentVolumeClaim) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// volumeOf is the Volume a host claim stands for, without data.
func volumeOf(c *corev1.PersistentVolumeClaim) Volume {
	ns, name, _ := contract.TenantKey(c.Annotations)
	return Volume{
		Namespace: ns, Name: name, UID: c.Annotations[contract.AnnotationTenantUID],
		StorageClassName: ptr.Deref(c.Spec.StorageClassName, ""),
		AccessModes:      slices.Clone(c.Spec.AccessModes), VolumeMode: c.Spec.VolumeMode,
		Request: c.Spec.Resources.Requests[corev1.ResourceStorage],
	}
}

// copier is the image and binary of the copy pods: the tenant's own
// nest-syncer, read from its control-plane pod's etcd-member helper.
type copier struct {
	image, binary string
	pullPolicy    corev1.PullPolicy
}

func copierOf(pod *corev1.Pod) (copier, error) {
	for _, c := range pod.Spec.InitContainers {
		if c.Name == controlplane.EtcdMemberContainer && len(c.Command) > 0 {
			return copier{image: c.Image, binary: c.Command[0], pullPolicy: c.ImagePullPolicy}, nil
		}
	}
	return copier{}, fmt.Errorf("pod %s/%s has no etcd-member helper to take the copier's image from", pod.Namespace, pod.Name)
}

// checkVolumesCopyable refuses volumes of a tenant whose host namespace
// enforces the restricted Pod Security level: a copy pod there may not run
// as root, so it could not read or write every file of a volume.
func checkVolumesCopyable(vc *nestv1.VirtualCluster) error {
	if controlplane.PodSecurityLevel(vc) == string(nestv1.PodSecurityRestricted) {
		return fmt.Errorf("%s enforces the restricted Pod Security level (spec.virtualNode.podSecurityLevel), under which no pod may read every file of a volume as root: take the snapshot without --include-volumes, or use the baseline level", vc.Name)
	}
	return nil
}

// packVolumes writes the data of each bound claim to a file in dir and
// returns the claims' Volumes and the files' paths ("" for a claim never
// bound: it has no data, and binding it now would pick its node). A raw
// block claim is refused: its data is no files. On an error the files are
// removed.
func packVolumes(ctx context.Context, host client.Client, cfg *rest.Config, vc *nestv1.VirtualCluster, cp copier, claims []corev1.PersistentVolumeClaim, dir string) (vols []Volume, paths []string, err error) {
	defer func() {
		if err != nil {
			for _, p := range paths {
				if p != "" {
					os.Remove(p)
				}
			}
		}
	}()
	for i := range claims {
		if ptr.Deref(claims[i].Spec.VolumeMode, corev1.PersistentVolumeFilesystem) == corev1.PersistentVolumeBlock {
			v := volumeOf(&claims[i])
			return nil, nil, fmt.Errorf("claim %s/%s is a raw block volume (volumeMode Block): --include-volumes copies file systems only; take the snapshot without it", v.Namespace, v.Name)
		}
	}
	for i := range claims {
		v := volumeOf(&claims[i])
		path := ""
		if claims[i].Status.Phase == corev1.ClaimBound {
			if path, v.Stats, err = packVolume(ctx, host, cfg, vc, cp, &claims[i], dir); err != nil {
				return vols, paths, fmt.Errorf("copy the data of claim %s/%s: %w", v.Namespace, v.Name, err)
			}
		}
		vols, paths = append(vols, v), append(paths, path)
	}
	return vols, paths, nil
}

// packVolume copies the files of claim into a new file in dir through a
// copy pod that mounts it read-only, on the node of a pod that mounts it
// already if there is one.
func packVolume(ctx context.Context, host client.Client, cfg *rest.Config, vc *nestv1.VirtualCluster, cp copier, claim *corev1.PersistentVolumeClaim, dir string) (string, volumearchive.Stats, error) {
	node, err := nodeMounting(ctx, host, claim)
	if err != nil {
		return "", volumearchive.Stats{}, err
	}
	pod, err := startCopyPod(ctx, host, copyPod(vc, cp, claim.Name, false, node, holdFor(ctx)))
	if err != nil {
		return "", volumearchive.Stats{}, err
	}
	defer deleteCopyPod(host, pod)
	f, err := os.CreateTemp(dir, "nest-volume-*.tar")
	if err != nil {
		return "", volumearchive.Stats{}, err
	}
	var stderr bytes.Buffer
	limit := packLimit(claim)
	out := &cappedWriter{w: f, left: limit}
	err = execIn(ctx, cfg, pod, copyContainer, []string{cp.binary, volumearchive.Command, volumearchive.PackCommand, "--dir=" + volumeMountPath}, nil, out, &stderr)
	if out.over {
		err = fmt.Errorf("the volume's files take more than %d bytes, twice its capacity and 64 MiB: the tenant wrote past its claim (sparse files and hard links count in full); the snapshot is refused", limit)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	var st volumearchive.Stats
	if err == nil {
		st, err = statsIn(stderr.Bytes())
	}
	if err != nil {
		os.Remove(f.Name())
		return "", st, err
	}
	return f.Name(), st, nil
}

// packLimit bounds the stream of a claim's files the taker writes to disk:
// twice the claim's capacity (or request) and 64 MiB for the entries'
// headers. A tenant's files are within its claim unless the host class does
// not enforce sizes, or sparse files and hard links, stored in full, make
// them larger: such a volume is refused rather than filling the taker's
// disk.
func packLimit(claim *corev1.PersistentVolumeClaim) int64 {
	size := claim.Spec.Resources.Requests[corev1.ResourceStorage]
	if c, ok := claim.Status.Capacity[corev1.ResourceStorage]; ok && c.Cmp(size) > 0 {
		size = c
	}
	return 2*size.Value() + 64<<20
}

// cappedWriter writes to w until left bytes are written, then fails.
type cappedWriter struct {
	w    io.Writer
	left int64
	over bool
}

func (c *cappedWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > c.left {
		c.over = true
		return 0, errors.New("past the volume's size limit")
	}
	c.left -= int64(len(p))
	return c.w.Write(p)
}

// holdFor is how long a copy pod holds: until ctx's deadline and a minute,
// or copyPodLifetime when ctx has none; so a pod whose maker was lost ends
// soon after the operation would have.
func holdFor(ctx context.Context) time.Duration {
	if d, ok := ctx.Deadline(); ok {
		return min(time.Until(d)+time.Minute, copyPodLifetime)
	}
	return copyPodLifetime
}

// nodeMounting is the node of a scheduled pod that mounts claim, or "":
// a volume that attaches to one node at a time is read there.
func nodeMounting(ctx context.Context, host client.Client, claim *corev1.PersistentVolumeClaim) (string, error) {
	var pods corev1.PodList
	if err := host.List(ctx, &pods, client.InNamespace(claim.Namespace)); err != nil {
		return "", err
	}
	for _, p := range pods.Items {
		if p.Spec.NodeName == "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		for _, v := range p.Spec.Volumes {
			if v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == claim.Name {
				if slices.Contains(claim.Spec.AccessModes, corev1.ReadWriteOncePod) {
					return "", fmt.Errorf("the claim is ReadWriteOncePod and pod %s mounts it, so no other pod can: stop that pod (scale its workload to 0) for the snapshot", p.Name)
				}
				return p.Spec.NodeName, nil
			}
		}
	}
	return "", nil
}

// statsIn reads the Stats the copier prints as its last line of stderr.
func statsIn(stderr []byte) (volumearchive.Stats, error) {
	var st volumearchive.Stats
	lines := strings.Split(strings.TrimSpace(string(stderr)), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &st); err != nil {
		return st, fmt.Errorf("the copier's report %q: %w", stderr, err)
	}
	return st, nil
}

// copyPod is the pod that copies the host claim's files: it runs the
// copier's HoldCommand as root, with only the capabilities the copy needs,
// all within the baseline Pod Security level: reading every file
// (DAC_OVERRIDE) and, to fill a volume, giving files their owners, modes
// and times back (CHOWN, FOWNER, FSETID). It is not a tenant pod: no
// tenant label, the VirtualCluster its owner, outside the tenant's quota.
func copyPod(vc *nestv1.VirtualCluster, cp copier, claim string, fill bool, node string, hold time.Duration) *corev1.Pod {
	hold = hold.Round(time.Second)
	caps := []corev1.Capability{"DAC_OVERRIDE"}
	if fill {
		caps = append(caps, "CHOWN", "FOWNER", "FSETID")
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			// A name of its own: two snapshots may copy the same claim at
			// once.
			GenerateName: vc.Name + "-volume-copy-", Namespace: vc.Namespace,
			Labels: map[string]string{
				controlplane.LabelVirtualCluster: vc.Name, controlplane.LabelManagedBy: controlplane.ManagedByValue,
				controlplane.LabelComponent: CopyPodComponent,
			},
			OwnerReferences: []metav1.OwnerReference{copyPodOwner(vc)},
		},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			ActiveDeadlineSeconds:         ptr.To(int64(hold.Seconds())),
			TerminationGracePeriodSeconds: ptr.To(int64(1)),
			AutomountServiceAccountToken:  ptr.To(false),
			EnableServiceLinks:            ptr.To(false),
			SecurityContext: &corev1.PodSecurityContext{
				RunAsUser: ptr.To(int64(0)), RunAsGroup: ptr.To(int64(0)),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name: copyContainer, Image: cp.image, ImagePullPolicy: cp.pullPolicy,
				Command: []string{cp.binary, volumearchive.Command, volumearchive.HoldCommand, "--for=" + hold.String()},
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: caps},
				},
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("32Mi")},
					Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("128Mi")},
				},
				VolumeMounts: []corev1.VolumeMount{{Name: "volume", MountPath: volumeMountPath, ReadOnly: !fill}},
			}},
			Volumes: []corev1.Volume{{Name: "volume", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim, ReadOnly: !fill},
			}}},
		},
	}
	if node != "" {
		pod.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
			}}},
		}}
	}
	return pod
}

// copyPodOwner makes the VirtualCluster the copy pod's owner, so the
// garbage collector removes a pod its maker lost with the tenant. It does
// not block the owner's deletion, which would ask the maker for update
// rights on virtualclusters/finalizers.
func copyPodOwner(vc *nestv1.VirtualCluster) metav1.OwnerReference {
	ref := *metav1.NewControllerRef(vc, nestv1.GroupVersion.WithKind(nestv1.VirtualClusterKind))
	ref.BlockOwnerDeletion = nil
	return ref
}

// startCopyPod creates pod and waits until it runs. A pod that does not
// run is deleted.
func startCopyPod(ctx context.Context, host client.Client, pod *corev1.Pod) (*corev1.Pod, error) {
	if err := host.Create(ctx, pod); err != nil {
		return nil, fmt.Errorf("create a copy pod in %s: %w", pod.Namespace, err)
	}
	got := &corev1.Pod{}
	err := wait.PollUntilContextTimeout(ctx, time.Second, copyPodStartTimeout, true, func(ctx context.Context) (bool, error) {
		if err := host.Get(ctx, client.ObjectKeyFromObject(pod), got); err != nil {
			return false, err
		}
		switch got.Status.Phase {
		case corev1.PodRunning:
			return true, nil
		case corev1.PodFailed, corev1.PodSucceeded:
			return false, fmt.Errorf("it ended (%s): %s", got.Status.Phase, got.Status.Message)
		}
		return false, nil
	})
	if err != nil {
		deleteCopyPod(host, pod)
		return nil, fmt.Errorf("copy pod %s/%s does not run (%s): %w", pod.Namespace, pod.Name, podWaiting(got), err)
	}
	return got, nil
}

// podWaiting says what a pod that does not run waits for.
func podWaiting(p *corev1.Pod) string {
	for _, c := range p.Status.Conditions {
		if c.Status != corev1.ConditionTrue && c.Message != "" {
			return fmt.Sprintf("%s: %s", c.Type, c.Message)
		}
	}
	for _, s := range p.Status.ContainerStatuses {
		if s.State.Waiting != nil {
			return s.State.Waiting.Reason + ": " + s.State.Waiting.Message
		}
	}
	return "phase " + string(p.Status.Phase)
}

// deleteCopyPod deletes a copy pod this run made, by name and UID,
// whatever the context of the copy says: it must not outlive the copy.
func deleteCopyPod(host client.Client, pod *corev1.Pod) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = host.Delete(ctx, pod, client.GracePeriodSeconds(0), client.Preconditions{UID: &pod.UID})
}

// restoreVolumes makes the host claim of every volume of s under vc, the
// VirtualCluster being restored, and fills it with its part, before the
// tenant's etcd, and so its pods, come back. A claim an interrupted run
// filled (AnnotationVolumeRestored) is left as it is.
func restoreVolumes(ctx context.Context, host client.Client, cfg *rest.Config, vc *nestv1.VirtualCluster, cp copier, s *Snapshot, step func(string, ...any)) error {
	for i, v := range s.Manifest.Volumes {
		path := s.VolumePaths[i]
		claim, done, err := ensureClaim(ctx, host, vc, v, path)
		if err != nil {
			return err
		}
		switch {
		case done:
			continue
		case path == "":
			step("claim %s/%s back, empty: the snapshot holds no data for it", v.Namespace, v.Name)
			continue
		}
		start := time.Now()
		if err := fillVolume(ctx, host, cfg, vc, cp, claim, path, v.Stats.Bytes); err != nil {
			return fmt.Errorf("fill the volume of claim %s/%s: %w", v.Namespace, v.Name, err)
		}
		step("claim %s/%s back with its data: %d files, %d bytes in %.1fs", v.Namespace, v.Name, v.Stats.Files, v.Stats.Bytes, time.Since(start).Seconds())
	}
	return nil
}

// ensureClaim makes the host claim of v under vc unless an interrupted run
// made it, and says whether that run filled it already. A claim of the
// name that is not v's copy is refused.
func ensureClaim(ctx context.Context, host client.Client, vc *nestv1.VirtualCluster, v Volume, path string) (*corev1.PersistentVolumeClaim, bool, error) {
	want := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name: contract.HostName(vc.Name, v.Namespace, v.Name), Namespace: vc.Namespace,
			Labels: contract.HostLabels(vc.Name, v.Namespace), Annotations: contract.HostAnnotations(v.Namespace, v.Name, v.UID),
		},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: slices.Clone(v.AccessModes), VolumeMode: v.VolumeMode, StorageClassName: ptr.To(v.StorageClassName),
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: v.Request}},
		},
	}
	sum := ""
	if path != "" {
		_, s, err := hashFile(path)
		if err != nil {
			return nil, false, err
		}
		sum = s
	} else {
		// Nothing to fill: made is done.
		want.Annotations[AnnotationVolumeRestored] = ""
	}
	err := host.Create(ctx, want)
	if err == nil {
		return want, false, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return nil, false, fmt.Errorf("make host claim %s for claim %s/%s: %w", want.Name, v.Namespace, v.Name, err)
	}
	have := &corev1.PersistentVolumeClaim{}
	if err := host.Get(ctx, client.ObjectKeyFromObject(want), have); err != nil {
		return nil, false, err
	}
	if !contract.IsCopyOfUID(have, vc.Name, v.Namespace, v.Name, v.UID) {
		return nil, false, fmt.Errorf("host claim %s/%s exists and is not the snapshot's claim %s/%s: delete it, then restore", have.Namespace, have.Name, v.Namespace, v.Name)
	}
	mark, marked := have.Annotations[AnnotationVolumeRestored]
	return have, marked && mark == sum, nil
}

// fillVolume unpacks the data at path into claim through a copy pod, at
// most limit bytes of contents, and marks the claim filled.
func fillVolume(ctx context.Context, host client.Client, cfg *rest.Config, vc *nestv1.VirtualCluster, cp copier, claim *corev1.PersistentVolumeClaim, path string, limit int64) error {
	_, sum, err := hashFile(path)
	if err != nil {
		return err
	}
	pod, err := startCopyPod(ctx, host, copyPod(vc, cp, claim.Name, true, "", holdFor(ctx)))
	if err != nil {
		return err
	}
	defer deleteCopyPod(host, pod)
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	var stderr bytes.Buffer
	command := []string{cp.binary, volumearchive.Command, volumearchive.UnpackCommand, "--dir=" + volumeMountPath, fmt.Sprintf("--limit=%d", max(limit, 1))}
	if err := execIn(ctx, cfg, pod, copyContainer, command, bufio.NewReader(f), io.Discard, &stderr); err != nil {
		return err
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{AnnotationVolumeRestored: sum}}})
	if err != nil {
		return err
	}
	return host.Patch(ctx, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: claim.Namespace, Name: claim.Name}},
		client.RawPatch(types.MergePatchType, patch))
}
