package syncer

import (
	"bytes"
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nestdev/nest/internal/syncer/contract"
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

// LabelNodeDisk, on a host pod, names the claim of the virtual node's disk
// it mounts; the pods that mount one claim keep to one host node by it.
const LabelNodeDisk = "nest.dev/node-disk"

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
// mount of its containers, and adds the helper. An ephemeral container may
// mount such a volume only when it is the disk's root. It returns the
// claim, "" when the pod has no hostPath volume.
func (t Translator) translateHostPaths(spec *corev1.PodSpec, nodeName string, ephemeral []corev1.Container) (string, error) {
	claim := contract.NodeDiskClaim(t.VirtualCluster, nodeName)
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
	for _, list := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for i := range list {
			mountOnDisk(list[i].VolumeMounts, onDisk)
		}
	}
	// The API refuses subPaths on ephemeral containers: one may mount the
	// disk only where it is the volume, the disk's root.
	for i, c := range ephemeral {
		for _, m := range c.VolumeMounts {
			if rel, ok := onDisk[m.Name]; ok && (rel != "" || m.SubPath != "" || m.SubPathExpr != "") {
				return "", fmt.Errorf("spec.ephemeralContainers[%d] (%s): volume %s is a path on the virtual node's disk, which an ephemeral container cannot mount (the API refuses subPaths there): debug from a container of the pod instead", i, c.Name, m.Name)
			}
		}
	}
	spec.InitContainers = append([]corev1.Container{t.nodeDiskHelper(nodeName, diskVolume, paths)}, spec.InitContainers...)
	spec.Affinity = sharingDisk(claim)
	return claim, nil
}

// sharingDisk keeps a host pod on the host node of the other pods that mount
// claim: a ReadWriteOnce volume of a network disk is attached to one node
// at a time. (A local volume pins them there anyway; the first pod goes
// where the scheduler finds room, as the term matches its own labels.)
func sharingDisk(claim string) *corev1.Affinity {
	return &corev1.Affinity{PodAffinity: &corev1.PodAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{LabelNodeDisk: claim}},
			TopologyKey:   corev1.LabelHostname,
		}},
	}}
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
	command := append([]string{contract.SyncerBinary, nodeDiskCommand, "--root=" + nodeDiskDir, "--node-name=" + nodeName}, paths...)
	return t.helperContainer(nodeDiskName, command, true, corev1.VolumeMount{Name: volume, MountPath: nodeDiskDir})
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
	c.Labels = map[string]string{contract.LabelTenantOf: t.VirtualCluster}
	if t.NodeDisk.StorageClassName != "" {
		c.Spec.StorageClassName = ptr.To(t.NodeDisk.StorageClassName)
	}
	return c
}

// VirtualNodeEtcHosts is the /etc/hosts of a virtual node's disk: the
// localhost lines and the node's name on 127.0.1.1, as Debian writes a
// machine's.
func VirtualNodeEtcHosts(nodeName string) []byte {
	var b bytes.Buffer
	writeLocalhost(&b)
	b.WriteString("127.0.1.1\t" + nodeName + "\n")
	return b.Bytes()
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
	// Best effort: what pods made of etc/ on the disk is theirs, and must
	// not keep other pods from their own paths.
	if err := seedEtcHosts(root, *nodeName); err != nil {
		fmt.Fprintf(os.Stderr, "nest-syncer node-disk: the node's /etc/hosts not written: %v\n", err)
	}
	for _, p := range paths {
		i := strings.LastIndex(p, "=")
		if i < 0 {
			return fmt.Errorf("--path=%s: want PATH=TYPE", p)
		}
		name, typ := p[:i], p[i+1:]
		err := prepareOnDisk(root, strings.TrimPrefix(path.Clean(name), "/"), corev1.HostPathType(typ))
		var wrong wrongType
		switch {
		case errors.As(err, &wrong):
			// The kubelet's words (pkg/volume/hostpath), which users and
			// tools look for in FailedMount events.
			return fmt.Errorf("hostPath type check failed: %s is not a %s", name, string(wrong))
		case err != nil:
			return fmt.Errorf("hostPath %s (type %q): %w", name, typ, err)
		}
	}
	return nil
}

func seedEtcHosts(root *os.Root, nodeName string) error {
	if err := root.MkdirAll("etc", 0o755); err != nil {
		return err
	}
	return writeIfMissing(root, "etc/hosts", VirtualNodeEtcHosts(nodeName))
}

// wrongType is the kind of file a hostPath type asks for and a path is not:
// "directory" or "file".
type wrongType string

func (w wrongType) Error() string { return "is not a " + string(w) }

// prepareOnDisk makes or checks rel under root as the kubelet does for a
// hostPath volume of type typ on a node. A path of another kind is a
// wrongType.
func prepareOnDisk(root *os.Root, rel string, typ corev1.HostPathType) error {
	if rel == "" {
		rel = "."
	}
	info, err := root.Stat(rel)
	exists := err == nil
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	switch typ {
	case corev1.HostPathUnset:
		if !exists {
			return root.MkdirAll(rel, 0o755)
		}
	case corev1.HostPathDirectoryOrCreate:
		if !exists {
			return root.MkdirAll(rel, 0o755)
		}
		if !info.IsDir() {
			return wrongType("directory")
		}
	case corev1.HostPathDirectory:
		if !exists || !info.IsDir() {
			return wrongType("directory")
		}
	case corev1.HostPathFileOrCreate:
		if !exists {
			if err := root.MkdirAll(path.Dir(rel), 0o755); err != nil {
				return err
			}
			return writeIfMissing(root, rel, nil)
		}
		if info.IsDir() {
			return wrongType("file")
		}
	case corev1.HostPathFile:
		if !exists || !info.Mode().IsRegular() {
			return wrongType("file")
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
