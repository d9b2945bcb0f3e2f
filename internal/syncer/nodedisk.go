package syncer

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
)

// A virtual node's disk (spec.virtualNode.nodeDisk) is where the tenant's
// hostPath volumes live: a host PersistentVolumeClaim per virtual node,
// which nest-syncer makes when a pod on that node first mounts one. A tenant
// hostPath volume becomes that claim, and each mount of it a subPath at the
// volume's path, so the pods of one virtual node share what they write there
// as the pods of a node share its directories. The kubelet resolves subPaths
// without following symbolic links out of the volume, and the host never
// gets a hostPath volume.
//
// A subPath the kubelet does not find it makes as a directory, so files are
// made first: the helper init container (`nest-syncer node-disk`) makes
// what the hostPath types ask for (DirectoryOrCreate, FileOrCreate), checks
// what they expect (Directory, File), and writes the virtual node's
// /etc/hosts when the disk has none, so a pod that mounts the node's
// /etc/hosts reads a node's file.

const (
	// nodeDiskName names the disk helper init container; tenant pods may
	// not use it.
	nodeDiskName = "nest-node-disk"
	// nodeDiskDir is where the helper mounts the disk.
	nodeDiskDir = "/nest-node-disk"
	// nodeDiskCommand is the helper's subcommand of nest-syncer.
	nodeDiskCommand = "node-disk"
)

// NodeDisk is the disk each virtual node has (spec.virtualNode.nodeDisk).
type NodeDisk struct {
	// Size is each claim's storage request.
	Size resource.Quantity
	// StorageClassName of the claims; empty is the host's default.
	StorageClassName string
}

// NodeDiskClaim is the host claim holding the disk of virtual node node.
func NodeDiskClaim(vc, node string) string { return HostName(vc, "node-disk", node) }

// nodeDiskTypes are the hostPath types a path on the disk may have: the
// others (sockets, devices) name what only a real node has.
var nodeDiskTypes = map[corev1.HostPathType]bool{
	corev1.HostPathUnset: true, corev1.HostPathDirectoryOrCreate: true, corev1.HostPathDirectory: true,
	corev1.HostPathFileOrCreate: true, corev1.HostPathFile: true,
}

// nodeDiskPath is a hostPath volume's path on the disk: relative, without
// "." or ".." parts. "" is the disk's root.
func nodeDiskPath(p string) (string, error) {
	if !path.IsAbs(p) {
		return "", fmt.Errorf("hostPath.path %q must be absolute", p)
	}
	rel := strings.TrimPrefix(path.Clean(p), "/")
	for part := range strings.SplitSeq(p, "/") {
		if part == ".." {
			return "", fmt.Errorf("hostPath.path %q must not hold \"..\"", p)
		}
	}
	return rel, nil
}

// translateHostPaths turns the pod's hostPath volumes into the claim of
// its virtual node's disk, with a subPath at the volume's path on each
// mount of containers (those and the ephemeral ones), and adds the helper.
// It returns the claim, "" when the pod has no hostPath volume.
func (t Translator) translateHostPaths(spec *corev1.PodSpec, nodeName string, containers ...[]corev1.Container) (string, error) {
	claim := NodeDiskClaim(t.VirtualCluster, nodeName)
	onDisk := map[string]string{}
	var paths []string
	var diskVolume string
	for i := range spec.Volumes {
		v := &spec.Volumes[i]
		if v.HostPath == nil {
			continue
		}
		if t.NodeDisk == nil {
			return "", fmt.Errorf("spec.volumes[%d] (%s): hostPath volumes need a disk on the virtual node, which this virtual cluster has not (spec.virtualNode.nodeDisk on the host): use emptyDir", i, v.Name)
		}
		if v.Name == nodeDiskName {
			return "", fmt.Errorf("spec.volumes[%d].name: %s is reserved for Nest: rename the volume", i, nodeDiskName)
		}
		typ := ptr.Deref(v.HostPath.Type, corev1.HostPathUnset)
		if !nodeDiskTypes[typ] {
			return "", fmt.Errorf("spec.volumes[%d] (%s): hostPath type %s is not supported on the virtual node's disk: use Directory, DirectoryOrCreate, File or FileOrCreate", i, v.Name, typ)
		}
		rel, err := nodeDiskPath(v.HostPath.Path)
		if err != nil {
			return "", fmt.Errorf("spec.volumes[%d] (%s): %w", i, v.Name, err)
		}
		onDisk[v.Name] = rel
		paths = append(paths, "--path=/"+rel+"="+string(typ))
		v.VolumeSource = corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}
		diskVolume = cmp.Or(diskVolume, v.Name)
	}
	if len(onDisk) == 0 {
		return "", nil
	}
	for _, list := range append(containers, spec.InitContainers, spec.Containers) {
		for i := range list {
			if list[i].Name == nodeDiskName {
				return "", fmt.Errorf("container name %s is reserved for Nest: rename the container", nodeDiskName)
			}
			mountOnDisk(list[i].VolumeMounts, onDisk)
		}
	}
	spec.InitContainers = append([]corev1.Container{t.nodeDiskHelper(nodeName, diskVolume, paths)}, spec.InitContainers...)
	return claim, nil
}

// mountOnDisk points each mount of a volume in onDisk at the volume's path
// on the disk, below which the mount's own subPath stays.
func mountOnDisk(mounts []corev1.VolumeMount, onDisk map[string]string) {
	for i := range mounts {
		rel, ok := onDisk[mounts[i].Name]
		if !ok {
			continue
		}
		if mounts[i].SubPathExpr != "" {
			mounts[i].SubPathExpr = path.Join(rel, mounts[i].SubPathExpr)
			continue
		}
		mounts[i].SubPath = path.Join(rel, mounts[i].SubPath)
	}
}

// nodeDiskHelper is the disk helper init container. It runs as root, the
// owner of the disk's directories, with no capabilities, which Pod
// Security's baseline level allows.
func (t Translator) nodeDiskHelper(nodeName, volume string, paths []string) corev1.Container {
	resources := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("64Mi")}
	return corev1.Container{
		Name: nodeDiskName, Image: t.HelperImage, ImagePullPolicy: t.HelperImagePullPolicy,
		Command:                  append([]string{SyncerBinary, nodeDiskCommand, "--root=" + nodeDiskDir, "--node-name=" + nodeName}, paths...),
		VolumeMounts:             []corev1.VolumeMount{{Name: volume, MountPath: nodeDiskDir}},
		Resources:                corev1.ResourceRequirements{Requests: resources, Limits: resources},
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		SecurityContext: &corev1.SecurityContext{
			RunAsUser: ptr.To[int64](0), RunAsGroup: ptr.To[int64](0), RunAsNonRoot: ptr.To(false),
			AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
			Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
	}
}

// NodeDiskClaimFor is the claim of a virtual node's disk as nest-syncer
// makes it: ReadWriteOnce, so the pods that mount it share one host node.
func (t Translator) NodeDiskClaimFor(name string) *corev1.PersistentVolumeClaim {
	c := &corev1.PersistentVolumeClaim{
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: t.NodeDisk.Size}},
		},
	}
	c.Name, c.Namespace = name, t.HostNamespace
	c.Labels = map[string]string{LabelTenantOf: t.VirtualCluster}
	if t.NodeDisk.StorageClassName != "" {
		c.Spec.StorageClassName = ptr.To(t.NodeDisk.StorageClassName)
	}
	return c
}

// VirtualNodeEtcHosts is the /etc/hosts of a virtual node's disk: the
// localhost lines and the node's name on 127.0.1.1, as Debian writes a
// machine's.
func VirtualNodeEtcHosts(nodeName string) []byte {
	var b strings.Builder
	b.WriteString("127.0.0.1\tlocalhost\n127.0.1.1\t" + nodeName + "\n")
	b.WriteString("::1\tlocalhost ip6-localhost ip6-loopback\n")
	return []byte(b.String())
}

// RunNodeDiskHelper is `nest-syncer node-disk`, the disk helper: under
// --root it writes the node's /etc/hosts unless there is one, then, for
// each --path=PATH=TYPE, makes or checks PATH as hostPath TYPE says. It
// never follows a symbolic link out of --root (os.Root).
func RunNodeDiskHelper(args []string) error {
	fset := flag.NewFlagSet(nodeDiskCommand, flag.ContinueOnError)
	rootDir := fset.String("root", nodeDiskDir, "where the disk is mounted")
	nodeName := fset.String("node-name", "", "the virtual node's name (required)")
	var paths []string
	fset.Func("path", "PATH=TYPE: a hostPath volume's path and type (repeated)", func(s string) error {
		paths = append(paths, s)
		return nil
	})
	if err := fset.Parse(args); err != nil {
		return err
	}
	if *nodeName == "" {
		return fmt.Errorf("--node-name is required")
	}
	root, err := os.OpenRoot(*rootDir)
	if err != nil {
		return err
	}
	defer root.Close()
	if err := root.MkdirAll("etc", 0o755); err != nil {
		return err
	}
	if err := writeIfMissing(root, "etc/hosts", VirtualNodeEtcHosts(*nodeName)); err != nil {
		return err
	}
	for _, p := range paths {
		name, typ, ok := strings.Cut(p, "=")
		if !ok {
			return fmt.Errorf("--path=%s: want PATH=TYPE", p)
		}
		if err := prepareOnDisk(root, strings.TrimPrefix(path.Clean(name), "/"), corev1.HostPathType(typ)); err != nil {
			return fmt.Errorf("hostPath %s (type %q): %w", name, typ, err)
		}
	}
	return nil
}

// prepareOnDisk makes or checks rel under root as the kubelet does for a
// hostPath volume of type typ on a node.
func prepareOnDisk(root *os.Root, rel string, typ corev1.HostPathType) error {
	if rel == "" || rel == "." {
		rel = "."
	}
	info, err := root.Stat(rel)
	exists := err == nil
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	switch typ {
	case corev1.HostPathUnset, corev1.HostPathDirectoryOrCreate:
		if !exists {
			return root.MkdirAll(rel, 0o755)
		}
	case corev1.HostPathDirectory:
		if !exists || !info.IsDir() {
			return fmt.Errorf("is not a directory on the virtual node")
		}
	case corev1.HostPathFileOrCreate:
		if !exists {
			if err := root.MkdirAll(path.Dir(rel), 0o755); err != nil {
				return err
			}
			return writeIfMissing(root, rel, nil)
		}
		if info.IsDir() {
			return fmt.Errorf("is a directory on the virtual node, not a file")
		}
	case corev1.HostPathFile:
		if !exists || !info.Mode().IsRegular() {
			return fmt.Errorf("is not a file on the virtual node")
		}
	default:
		return fmt.Errorf("type not supported on the virtual node's disk")
	}
	return nil
}

// writeIfMissing creates name under root with data, unless it exists.
func writeIfMissing(root *os.Root, name string, data []byte) error {
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, fs.ErrExist) {
		return nil
	}
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	return errors.Join(err, f.Close())
}

// NodeDiskMain runs the helper when nest-syncer's arguments ask for it
// (`nest-syncer node-disk ...`) and reports whether they did.
func NodeDiskMain(args []string) (ran bool, err error) {
	if len(args) == 0 || args[0] != nodeDiskCommand {
		return false, nil
	}
	return true, RunNodeDiskHelper(args[1:])
}
