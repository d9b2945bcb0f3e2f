package controlplane

import (
	"path"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/nestdev/nest/internal/addons"
)

// The API server reads the files its flags name, and the policies where the
// admission configuration points, from the ConfigMap's volume: every file
// the volume mounts is a key of the ConfigMap, and the flags and the
// configuration name paths the volume has.
func TestAPIServerReadsTheFilesTheConfigMapHolds(t *testing.T) {
	v := vc(nil)
	cm, err := APIServerConfigMapFor(v)
	if err != nil {
		t.Fatal(err)
	}
	if cm.Name != "alpha-apiserver-config" || cm.Name != names.APIServerConfigMap() {
		t.Errorf("ConfigMap %s, want alpha-apiserver-config", cm.Name)
	}
	pod := StatefulSetFor(v, Options{}, ServiceIPs{}).Spec.Template.Spec
	mounted := mountedAPIServerFiles(t, pod, cm)
	api := containerNamed(t, pod, apiServerName)
	if !slices.ContainsFunc(api.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == APIServerConfigDir && m.ReadOnly }) {
		t.Errorf("kube-apiserver does not mount %s read-only", APIServerConfigDir)
	}
	for flag, file := range map[string]string{
		"admission-control-config-file": addons.AdmissionConfigFile,
		"egress-selector-config-file":   EgressSelectorFile,
	} {
		want := path.Join(APIServerConfigDir, file)
		if !slices.Contains(api.Args, "--"+flag+"="+want) || !slices.Contains(mounted, want) {
			t.Errorf("kube-apiserver args %v and mounted files %v: want --%s at %s", api.Args, mounted, flag, want)
		}
	}
	policies := path.Join(APIServerConfigDir, addons.StaticPoliciesDir)
	if !strings.Contains(cm.Data[addons.AdmissionConfigFile], "staticManifestsDir: "+policies) ||
		!slices.Contains(mounted, path.Join(policies, addons.NodeEndpointsFile)) ||
		!slices.Contains(mounted, path.Join(policies, addons.ClusterAdminsGuardFile)) {
		t.Errorf("the configuration %q does not point at the mounted policies %v", cm.Data[addons.AdmissionConfigFile], mounted)
	}
	for _, file := range []string{addons.NodeEndpointsFile, addons.ClusterAdminsGuardFile} {
		if !strings.Contains(cm.Data[file], "request.userInfo.username != '"+SyncerUser+"'") {
			t.Errorf("the policy %s does not exempt nest-syncer's user %s:\n%s", file, SyncerUser, cm.Data[file])
		}
	}
}

// The egress selector configuration sends cluster and controlplane traffic
// over the socket nest-syncer serves, in the directory both containers
// mount; package egress checks the rest of the file against the API
// server's own reader.
func TestEgressSelectorNamesTheSocketNestSyncerServes(t *testing.T) {
	cm, err := APIServerConfigMapFor(vc(nil))
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		EgressSelections []struct {
			Name       string `json:"name"`
			Connection struct {
				ProxyProtocol string `json:"proxyProtocol"`
				Transport     struct {
					UDS struct {
						UDSName string `json:"udsName"`
					} `json:"uds"`
				} `json:"transport"`
			} `json:"connection"`
		} `json:"egressSelections"`
	}
	if err := yaml.Unmarshal([]byte(cm.Data[EgressSelectorFile]), &cfg); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range cfg.EgressSelections {
		got = append(got, s.Name)
		if s.Connection.ProxyProtocol != "HTTPConnect" || s.Connection.Transport.UDS.UDSName != EgressProxySocket {
			t.Errorf("selection %s: %+v, want HTTPConnect over %s", s.Name, s.Connection, EgressProxySocket)
		}
	}
	if slices.Sort(got); !slices.Equal(got, []string{"cluster", "controlplane"}) {
		t.Errorf("selections %v, want cluster and controlplane", got)
	}
	pod := StatefulSetFor(vc(nil), Options{}, ServiceIPs{}).Spec.Template.Spec
	syncer := containerNamed(t, pod, syncerName)
	if !slices.Contains(syncer.Args, "--egress-proxy-socket="+EgressProxySocket) {
		t.Errorf("nest-syncer args %v lack --egress-proxy-socket=%s", syncer.Args, EgressProxySocket)
	}
}

// Only kube-apiserver and nest-syncer mount the socket's directory, a
// memory-backed emptyDir: any other container could open tunnels. The API
// server's mount is read-only; nest-syncer creates the socket.
func TestOnlyTheAPIServerAndTheSyncerMountTheEgressSocket(t *testing.T) {
	pod := StatefulSetFor(vc(nil), Options{}, ServiceIPs{}).Spec.Template.Spec
	dir := path.Dir(EgressProxySocket)
	var volume string
	for _, v := range pod.Volumes {
		if v.EmptyDir != nil && v.Name == egressVolume {
			volume = v.Name
			if v.EmptyDir.Medium != corev1.StorageMediumMemory {
				t.Errorf("volume %s medium %q, want Memory", v.Name, v.EmptyDir.Medium)
			}
		}
	}
	if volume == "" {
		t.Fatalf("no emptyDir volume %s", egressVolume)
	}
	want := map[string]bool{apiServerName: true, syncerName: false}
	for _, c := range append(pod.InitContainers, pod.Containers...) {
		for _, m := range c.VolumeMounts {
			if m.Name != volume && m.MountPath != dir {
				continue
			}
			readOnly, ok := want[c.Name]
			switch {
			case !ok:
				t.Errorf("container %s mounts the egress socket's volume at %s", c.Name, m.MountPath)
			case m.Name != volume || m.MountPath != dir || m.ReadOnly != readOnly:
				t.Errorf("container %s mounts %s at %s read-only %v, want %s at %s read-only %v", c.Name, m.Name, m.MountPath, m.ReadOnly, volume, dir, readOnly)
			}
			delete(want, c.Name)
		}
	}
	for name := range want {
		t.Errorf("container %s does not mount %s", name, dir)
	}
}

// mountedAPIServerFiles are the paths of the files the ConfigMap's volume
// mounts, each checked to be a key of cm.
func mountedAPIServerFiles(t *testing.T, pod corev1.PodSpec, cm *corev1.ConfigMap) []string {
	t.Helper()
	var mounted []string
	for _, vol := range pod.Volumes {
		if vol.ConfigMap == nil || vol.ConfigMap.Name != cm.Name {
			continue
		}
		for _, item := range vol.ConfigMap.Items {
			if _, ok := cm.Data[item.Key]; !ok {
				t.Errorf("the volume mounts key %s, which ConfigMap %s lacks", item.Key, cm.Name)
			}
			mounted = append(mounted, path.Join(APIServerConfigDir, item.Path))
		}
	}
	if len(mounted) != len(cm.Data) {
		t.Fatalf("the volume mounts %v; the ConfigMap holds %d files", mounted, len(cm.Data))
	}
	return mounted
}

// containerNamed is pod's container or init container name.
func containerNamed(t *testing.T, pod corev1.PodSpec, name string) corev1.Container {
	t.Helper()
	for _, c := range append(pod.InitContainers, pod.Containers...) {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no container %s", name)
	return corev1.Container{}
}
