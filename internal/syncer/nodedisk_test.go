package syncer

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/nestdev/nest/internal/syncer/contract"
)

// withDisk is withHelper with a disk on each virtual node.
var withDisk = func() Translator {
	t := withHelper
	t.NodeDisk = &contract.NodeDisk{Size: resource.MustParse("1Gi"), StorageClassName: "standard"}
	return t
}()

// hostPathPod mounts the node's /etc/hosts (a file) twice, once with a
// subPath of its own, and a state directory in an init container.
func hostPathPod() *corev1.Pod {
	p := tenantPod()
	p.Spec.Volumes = append(p.Spec.Volumes,
		corev1.Volume{Name: "etc-hosts", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/etc/hosts", Type: ptr.To(corev1.HostPathFileOrCreate)}}},
		corev1.Volume{Name: "state", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/tmp/job-e2e/x1"}}})
	p.Spec.Containers[0].VolumeMounts = append(p.Spec.Containers[0].VolumeMounts,
		corev1.VolumeMount{Name: "etc-hosts", MountPath: "/etc/hosts-original"},
		corev1.VolumeMount{Name: "state", MountPath: "/data", SubPath: "index-0"})
	p.Spec.InitContainers = []corev1.Container{{Name: "prep", Image: "img",
		VolumeMounts: []corev1.VolumeMount{{Name: "state", MountPath: "/data", SubPathExpr: "$(POD_NAME)"}}}}
	return p
}

func TestTranslatePodPutsHostPathsOnTheVirtualNodesDisk(t *testing.T) {
	pt, err := withDisk.TranslatePod(hostPathPod(), defaultMetadata, nil)
	if err != nil {
		t.Fatal(err)
	}
	claim := contract.NodeDiskClaim("alpha", "nest-virtual-node")
	if pt.NodeDiskClaim != claim {
		t.Errorf("NodeDiskClaim = %q, want %q", pt.NodeDiskClaim, claim)
	}
	spec := pt.Pod.Spec
	onDisk := 0
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			t.Errorf("host pod volume %s is a hostPath", v.Name)
		}
		if v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == claim {
			onDisk++
		}
	}
	if onDisk != 2 {
		t.Errorf("%d volumes are the disk %s, want 2 (etc-hosts, state)", onDisk, claim)
	}
	want := map[string]corev1.VolumeMount{
		"/etc/hosts-original": {Name: "etc-hosts", MountPath: "/etc/hosts-original", SubPath: "etc/hosts"},
		"/data":               {Name: "state", MountPath: "/data", SubPath: "tmp/job-e2e/x1/index-0"},
	}
	for _, m := range spec.Containers[0].VolumeMounts {
		if w, ok := want[m.MountPath]; ok {
			if m != w {
				t.Errorf("mount %s = %+v, want %+v", m.MountPath, m, w)
			}
			delete(want, m.MountPath)
		}
	}
	if len(want) > 0 {
		t.Errorf("mounts %v missing from the app container", want)
	}
	if pt.Pod.Labels[LabelNodeDisk] != claim {
		t.Errorf("host pod labels %v, want %s=%s", pt.Pod.Labels, LabelNodeDisk, claim)
	}
	if a := spec.Affinity; a == nil || a.PodAffinity == nil || len(a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution) != 1 ||
		a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution[0].LabelSelector.MatchLabels[LabelNodeDisk] != claim {
		t.Errorf("host pod affinity %+v, want the pods of disk %s together", spec.Affinity, claim)
	}
	helper := spec.InitContainers[0]
	if helper.Name != nodeDiskName {
		t.Fatalf("first init container %s, want the disk helper", helper.Name)
	}
	if got := spec.InitContainers[1].VolumeMounts[0].SubPathExpr; got != "tmp/job-e2e/x1/$(POD_NAME)" {
		t.Errorf("init container's subPathExpr %q, want it below the volume's path", got)
	}
	for _, arg := range []string{"--node-name=nest-virtual-node", "--path=/etc/hosts=FileOrCreate", "--path=/tmp/job-e2e/x1="} {
		if !slices.Contains(helper.Command, arg) {
			t.Errorf("helper command %v lacks %s", helper.Command, arg)
		}
	}
	if len(helper.VolumeMounts) != 1 || helper.VolumeMounts[0].SubPath != "" || helper.VolumeMounts[0].MountPath != nodeDiskDir {
		t.Errorf("helper mounts %v, want the whole disk at %s", helper.VolumeMounts, nodeDiskDir)
	}
	// The host namespace enforces baseline; the helper must meet it.
	baseline, err := NewPodSecurity("baseline")
	if err != nil {
		t.Fatal(err)
	}
	if err := baseline.Check(&corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{helper}, Volumes: spec.Volumes}}); err != nil {
		t.Errorf("the disk helper fails Pod Security baseline: %v", err)
	}
}

func TestTranslatePodRefusesHostPathsItCannotPutOnTheDisk(t *testing.T) {
	withType := func(typ corev1.HostPathType, path string) *corev1.Pod {
		p := tenantPod()
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "h", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path, Type: &typ}}})
		return p
	}
	reserved := withType(corev1.HostPathDirectory, "/x")
	reserved.Spec.Volumes[len(reserved.Spec.Volumes)-1].Name = nodeDiskName
	for name, c := range map[string]struct {
		tr   Translator
		pod  *corev1.Pod
		want string
	}{
		"no disk":       {withHelper, withType(corev1.HostPathDirectory, "/x"), "spec.virtualNode.nodeDisk"},
		"a socket":      {withDisk, withType(corev1.HostPathSocket, "/run/docker.sock"), "hostPath type Socket is not supported"},
		"a device":      {withDisk, withType(corev1.HostPathBlockDev, "/dev/sda"), "hostPath type BlockDevice is not supported"},
		"relative path": {withDisk, withType(corev1.HostPathDirectory, "tmp"), "must be absolute"},
		"dot-dot":       {withDisk, withType(corev1.HostPathDirectory, "/tmp/../.."), `must not hold ".."`},
		"reserved name": {withDisk, reserved, "reserved for Nest"},
		"an ephemeral container below the disk's root": {withDisk, func() *corev1.Pod {
			p := hostPathPod()
			p.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
				Name: "debug", Image: "img", VolumeMounts: []corev1.VolumeMount{{Name: "state", MountPath: "/data"}}}}}
			return p
		}(), "spec.ephemeralContainers[0] (debug): volume state is a path on the virtual node's disk"},
	} {
		_, err := c.tr.TranslatePod(c.pod, defaultMetadata, nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: TranslatePod = %v, want an error with %q", name, err, c.want)
		}
	}
}

func TestPodSecurityReadsHostPathsOnTheDiskAsTheHostPodHasThem(t *testing.T) {
	for _, c := range []struct {
		level  string
		onDisk bool
		ok     bool
	}{{"baseline", true, true}, {"baseline", false, false}, {"restricted", true, false}} {
		s, err := NewPodSecurity(c.level)
		if err != nil {
			t.Fatal(err)
		}
		s.HostPathOnDisk = c.onDisk
		p := hostPathPod()
		nonRoot(p)
		err = s.Check(p)
		if (err == nil) != c.ok {
			t.Errorf("%s, on disk %v: Check = %v, want allowed %v", c.level, c.onDisk, err, c.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "hostPath") {
			t.Errorf("%s, on disk %v: Check = %v, want hostPath named", c.level, c.onDisk, err)
		}
	}
}

// nonRoot makes p meet the restricted level but for its volumes.
func nonRoot(p *corev1.Pod) {
	p.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}
	for _, list := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for i := range list {
			list[i].SecurityContext = &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}
		}
	}
}

func TestNodeDiskHelperMakesWhatTheTypesAskForAndKeepsWhatIsThere(t *testing.T) {
	root := t.TempDir()
	run := func(paths ...string) error {
		return RunNodeDiskHelper(append([]string{"--root=" + root, "--node-name=nest-virtual-node"}, paths...))
	}
	if err := run("--path=/etc/hosts=FileOrCreate", "--path=/tmp/job-e2e/x1=DirectoryOrCreate", "--path=/var/lib/state="); err != nil {
		t.Fatal(err)
	}
	hosts, err := os.ReadFile(filepath.Join(root, "etc/hosts"))
	if err != nil || string(hosts) != string(VirtualNodeEtcHosts("nest-virtual-node")) || !strings.Contains(string(hosts), "127.0.1.1\tnest-virtual-node\n") {
		t.Errorf("etc/hosts = %q (%v), want the virtual node's", hosts, err)
	}
	for _, dir := range []string{"tmp/job-e2e/x1", "var/lib/state"} {
		if info, err := os.Stat(filepath.Join(root, dir)); err != nil || !info.IsDir() {
			t.Errorf("%s: %v, want a directory", dir, err)
		}
	}
	// What pods wrote stays: a second pod's helper neither empties nor
	// rewrites it.
	if err := os.WriteFile(filepath.Join(root, "etc/hosts"), []byte("edited\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run("--path=/etc/hosts=File", "--path=/tmp/job-e2e/x1=Directory"); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(root, "etc/hosts")); string(got) != "edited\n" {
		t.Errorf("etc/hosts = %q after a second run, want what was written", got)
	}
	if err := run("--path=/a=b=DirectoryOrCreate"); err != nil {
		t.Errorf("a path with '=': %v", err)
	} else if info, err := os.Stat(filepath.Join(root, "a=b")); err != nil || !info.IsDir() {
		t.Errorf("a=b: %v, want a directory", err)
	}
	for _, c := range []struct{ path, want string }{
		{"--path=/missing=Directory", "hostPath type check failed: /missing is not a directory"},
		{"--path=/missing=File", "hostPath type check failed: /missing is not a file"},
		{"--path=/tmp/job-e2e/x1=FileOrCreate", "hostPath type check failed: /tmp/job-e2e/x1 is not a file"},
		{"--path=/etc/hosts=DirectoryOrCreate", "hostPath type check failed: /etc/hosts is not a directory"},
	} {
		if err := run(c.path); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.path, err, c.want)
		}
	}
}

// What pods made of etc/ on the disk keeps no pod from its own paths.
func TestNodeDiskHelperSeedsTheNodesFilesAtBestEffort(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "etc"), []byte("a file where etc/ was\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := RunNodeDiskHelper([]string{"--root=" + root, "--node-name=n", "--path=/var/state=DirectoryOrCreate"}); err != nil {
		t.Fatalf("helper with etc/ taken: %v", err)
	}
	if info, err := os.Stat(filepath.Join(root, "var/state")); err != nil || !info.IsDir() {
		t.Errorf("var/state: %v, want a directory", err)
	}
}

// A tenant that made a symbolic link on its disk pointing out of it gets
// nothing made outside.
func TestNodeDiskHelperStaysOnTheDisk(t *testing.T) {
	root, outside := t.TempDir(), t.TempDir()
	if err := os.Symlink(outside, filepath.Join(root, "escape")); err != nil {
		t.Fatal(err)
	}
	err := RunNodeDiskHelper([]string{"--root=" + root, "--node-name=n", "--path=/escape/made=DirectoryOrCreate"})
	if err == nil {
		t.Error("the helper followed a link out of the disk")
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Errorf("made %v outside the disk", entries)
	}
}

func TestNodeDiskClaimAsked(t *testing.T) {
	c := withDisk.NodeDiskClaimFor(contract.NodeDiskClaim("alpha", "nest-virtual-node-1"))
	if c.Namespace != "vc-alpha" || c.Labels[contract.LabelTenantOf] != "alpha" || ptr.Deref(c.Spec.StorageClassName, "") != "standard" {
		t.Errorf("claim %s/%s labels %v class %v", c.Namespace, c.Name, c.Labels, c.Spec.StorageClassName)
	}
	if got := c.Spec.Resources.Requests[corev1.ResourceStorage]; got.Cmp(resource.MustParse("1Gi")) != 0 || !slices.Equal(c.Spec.AccessModes, []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}) {
		t.Errorf("claim asks %v %v", got.String(), c.Spec.AccessModes)
	}
	if contract.NodeDiskClaim("alpha", "nest-virtual-node") == contract.NodeDiskClaim("alpha", "nest-virtual-node-1") {
		t.Error("two virtual nodes share a disk")
	}
}
