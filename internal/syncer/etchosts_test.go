package syncer

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// withHelper is tr with a helper image.
var withHelper = func() Translator {
	t := tr
	t.HelperImage, t.HelperImagePullPolicy = "nest.local/nest-syncer:dev", corev1.PullNever
	return t
}()

// subdomainPod is a tenant pod named as a StatefulSet's pod is, in
// subdomain "db", with a sidecar that mounts its own /etc/hosts.
func subdomainPod() *corev1.Pod {
	p := tenantPod()
	p.Spec.Hostname, p.Spec.Subdomain = "web-1", "db"
	p.Spec.HostAliases = []corev1.HostAlias{{IP: "10.1.2.3", Hostnames: []string{"foo.local", "bar.local"}}}
	p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "own-hosts", Image: "img",
		VolumeMounts: []corev1.VolumeMount{{Name: "kube-api-access", MountPath: "/etc/hosts", SubPath: "token"}}})
	return p
}

func TestTranslatePodWritesTheTenantsEtcHostsForASubdomain(t *testing.T) {
	pt, err := withHelper.TranslatePod(subdomainPod(), defaultMetadata, nil)
	if err != nil {
		t.Fatal(err)
	}
	spec := pt.Pod.Spec
	if len(spec.InitContainers) == 0 || spec.InitContainers[0].Name != etcHostsName {
		t.Fatalf("init containers %v, want the helper first", spec.InitContainers)
	}
	helper := spec.InitContainers[0]
	if helper.Image != withHelper.HelperImage || helper.ImagePullPolicy != corev1.PullNever {
		t.Errorf("helper image %s %s", helper.Image, helper.ImagePullPolicy)
	}
	if want := "--domain=db.shop.svc.cluster.local"; !slices.Contains(helper.Command, want) || !slices.Contains(helper.Command, "--hostname=web-1") {
		t.Errorf("helper command %v, want %s and --hostname=web-1", helper.Command, want)
	}
	var aliases string
	for _, e := range helper.Env {
		if e.Name == envHostAliases {
			aliases = e.Value
		}
	}
	if !strings.Contains(aliases, "foo.local") {
		t.Errorf("helper env %v lacks the host aliases", helper.Env)
	}
	if !hasVolume(spec.Volumes, etcHostsName) {
		t.Errorf("no %s volume", etcHostsName)
	}
	mounts := func(c corev1.Container) (etcHosts []corev1.VolumeMount) {
		for _, m := range c.VolumeMounts {
			if m.MountPath == etcHostsPath {
				etcHosts = append(etcHosts, m)
			}
		}
		return etcHosts
	}
	if m := mounts(spec.Containers[0]); len(m) != 1 || m[0].Name != etcHostsName || m[0].SubPath != etcHostsFile {
		t.Errorf("app container /etc/hosts mounts %v, want the helper's file", m)
	}
	if m := mounts(spec.Containers[1]); len(m) != 1 || m[0].Name != "kube-api-access" {
		t.Errorf("a container that mounts its own /etc/hosts got %v", m)
	}
	// The host namespace enforces the tenant's level; the helper must pass
	// the strictest.
	restricted, err := NewPodSecurity("restricted")
	if err != nil {
		t.Fatal(err)
	}
	helperOnly := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{helper}, Volumes: spec.Volumes}}
	helperOnly.Spec.Volumes = []corev1.Volume{{Name: etcHostsName, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	if err := restricted.Check(helperOnly); err != nil {
		t.Errorf("the helper fails Pod Security restricted: %v", err)
	}
}

func TestTranslatePodLeavesEtcHostsToTheHostKubeletWithoutASubdomain(t *testing.T) {
	plain := subdomainPod()
	plain.Spec.Subdomain = ""
	for name, c := range map[string]struct {
		tr  Translator
		pod *corev1.Pod
	}{"no subdomain": {withHelper, plain}, "no helper image": {tr, subdomainPod()}} {
		pt, err := c.tr.TranslatePod(c.pod, defaultMetadata, nil)
		if err != nil {
			t.Fatal(err)
		}
		if hasVolume(pt.Pod.Spec.Volumes, etcHostsName) || len(pt.Pod.Spec.InitContainers) != 0 {
			t.Errorf("%s: host pod has the helper: %v", name, pt.Pod.Spec.InitContainers)
		}
	}
}

// A pod on the node's network reads the node's /etc/hosts, not a pod's:
// the helper writes the virtual node's under the kubelet's host-network
// header, naming the node.
func TestTranslatePodWritesTheNodesEtcHostsForAHostNetworkPod(t *testing.T) {
	p := subdomainPod()
	p.Spec.HostNetwork = true
	pt, err := withHelper.TranslatePod(p, defaultMetadata, nil)
	if err != nil {
		t.Fatal(err)
	}
	spec := pt.Pod.Spec
	if len(spec.InitContainers) == 0 || spec.InitContainers[0].Name != etcHostsName {
		t.Fatalf("init containers %v, want the helper first", spec.InitContainers)
	}
	cmd := spec.InitContainers[0].Command
	if !slices.Contains(cmd, "--host-network") || !slices.Contains(cmd, "--hostname="+withHelper.NodeName) {
		t.Errorf("helper command %v, want --host-network and the node's name", cmd)
	}
	if slices.ContainsFunc(cmd, func(a string) bool { return strings.HasPrefix(a, "--domain") }) {
		t.Errorf("helper command %v names a pod domain", cmd)
	}
}

// The node's name goes to the helper whatever it is, and the disk's
// helper is not given the /etc/hosts helper's file.
func TestTranslatePodNamesTheNodeEvenWhenItIsNoHostname(t *testing.T) {
	p := hostPathPod()
	p.Spec.HostNetwork = true
	p.Spec.NodeName = "node.example"
	pt, err := withDisk.TranslatePod(p, defaultMetadata, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range pt.Pod.Spec.InitContainers {
		names = append(names, c.Name)
		switch c.Name {
		case etcHostsName:
			if !slices.Contains(c.Command, "--hostname=node.example") {
				t.Errorf("etc-hosts helper command %v, want the node's name", c.Command)
			}
		case nodeDiskName:
			if len(c.VolumeMounts) != 1 {
				t.Errorf("disk helper mounts %v, want the disk alone", c.VolumeMounts)
			}
		}
	}
	if !slices.Contains(names, etcHostsName) || !slices.Contains(names, nodeDiskName) {
		t.Errorf("init containers %v, want both helpers", names)
	}
}

func TestEtcHostsHelperWritesTheNodesFileForTheHostNetwork(t *testing.T) {
	env := map[string]string{envPodIPs: "10.244.1.7", envHostAliases: `[{"ip":"10.1.2.3","hostnames":["foo.local"]}]`}
	got := runEtcHostsHelper(t, env, "--hostname=nest-node-0", "--host-network")
	want := "# Kubernetes-managed hosts file (host network).\n" +
		"127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n" +
		"10.244.1.7\tnest-node-0\n" +
		"\n# Entries added by HostAliases.\n10.1.2.3\tfoo.local\n"
	if string(got) != want {
		t.Errorf("hosts file:\n%s\nwant:\n%s", got, want)
	}
}

// runEtcHostsHelper runs the helper with args and env and returns the file
// it wrote.
func runEtcHostsHelper(t *testing.T, env map[string]string, args ...string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "hosts")
	if err := RunEtcHostsHelper(append([]string{"--out=" + out}, args...), func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return string(got)
}

// Every helper's name is refused on any volume and container, whether
// the pod would get that helper or not: the tenant pod's status hides
// containers of those names.
func TestTranslatePodRefusesTheHelpersNames(t *testing.T) {
	volume := subdomainPod()
	volume.Spec.Volumes = append(volume.Spec.Volumes, corev1.Volume{Name: etcHostsName, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	container := subdomainPod()
	container.Spec.InitContainers = []corev1.Container{{Name: etcHostsName, Image: "img"}}
	diskInit := tenantPod()
	diskInit.Spec.InitContainers = []corev1.Container{{Name: nodeDiskName, Image: "img"}}
	ephemeral := tenantPod()
	ephemeral.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: nodeDiskName, Image: "img"}}}
	for name, p := range map[string]*corev1.Pod{"spec.volumes[": volume, "spec.initContainers[0].name": container,
		"spec.initContainers[0].name: " + nodeDiskName: diskInit, "spec.ephemeralContainers[0].name": ephemeral} {
		if _, err := withHelper.TranslatePod(p, defaultMetadata, nil); err == nil || !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), "reserved") {
			t.Errorf("%s: TranslatePod = %v, want the field named as reserved", name, err)
		}
	}
}

func TestEtcHostsHelperWritesTheKubeletsFile(t *testing.T) {
	env := map[string]string{envPodIPs: "10.244.1.7,fd00::7", envHostAliases: `[{"ip":"10.1.2.3","hostnames":["foo.local","bar.local"]}]`}
	got := runEtcHostsHelper(t, env, "--hostname=web-1", "--domain=db.shop.svc.cluster.local")
	want := "# Kubernetes-managed hosts file.\n" +
		"127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n" +
		"10.244.1.7\tweb-1.db.shop.svc.cluster.local\tweb-1\n" +
		"fd00::7\tweb-1.db.shop.svc.cluster.local\tweb-1\n" +
		"\n# Entries added by HostAliases.\n10.1.2.3\tfoo.local\tbar.local\n"
	if string(got) != want {
		t.Errorf("hosts file:\n%s\nwant:\n%s", got, want)
	}
	out := filepath.Join(t.TempDir(), "hosts")
	if err := RunEtcHostsHelper([]string{"--out=" + out, "--hostname=web-1"}, func(string) string { return "" }); err == nil || !strings.Contains(err.Error(), envPodIPs) {
		t.Errorf("without pod IPs: %v", err)
	}
}

func TestTenantStatusHidesTheHelper(t *testing.T) {
	tenant := subdomainPod()
	host := &corev1.Pod{Status: corev1.PodStatus{InitContainerStatuses: []corev1.ContainerStatus{{Name: etcHostsName}}}}
	if s := TenantStatus(tenant, host); len(s.InitContainerStatuses) != 0 {
		t.Errorf("tenant init container statuses %v", s.InitContainerStatuses)
	}
}

func hasVolume(vs []corev1.Volume, name string) bool {
	for _, v := range vs {
		if v.Name == name {
			return true
		}
	}
	return false
}
