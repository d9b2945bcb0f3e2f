package controlplane

import (
	"path"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/nestdev/nest/internal/addons"
)

// The API server reads the admission configuration the flag names, and the
// policies where that configuration points, from the ConfigMap's volume:
// every file the volume mounts is a key of the ConfigMap, and the flag and
// the configuration name paths the volume has.
func TestAPIServerReadsTheStaticAdmissionFilesTheConfigMapHolds(t *testing.T) {
	v := vc(nil)
	cm, err := AdmissionConfigMapFor(v)
	if err != nil {
		t.Fatal(err)
	}
	pod := StatefulSetFor(v, Options{}, ServiceIPs{}).Spec.Template.Spec
	var mounted []string
	for _, vol := range pod.Volumes {
		if vol.ConfigMap == nil || vol.ConfigMap.Name != names.AdmissionConfigMap() {
			continue
		}
		for _, item := range vol.ConfigMap.Items {
			if _, ok := cm.Data[item.Key]; !ok {
				t.Errorf("the volume mounts key %s, which ConfigMap %s lacks", item.Key, cm.Name)
			}
			mounted = append(mounted, path.Join(AdmissionDir, item.Path))
		}
	}
	if len(mounted) != len(cm.Data) {
		t.Fatalf("the volume mounts %v; the ConfigMap holds %d files", mounted, len(cm.Data))
	}
	var api []string
	for _, c := range pod.InitContainers {
		if c.Name == apiServerName {
			api = c.Args
			if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == AdmissionDir }) {
				t.Errorf("kube-apiserver does not mount %s", AdmissionDir)
			}
		}
	}
	configFile := path.Join(AdmissionDir, addons.AdmissionConfigFile)
	if !slices.Contains(api, "--admission-control-config-file="+configFile) || !slices.Contains(mounted, configFile) {
		t.Errorf("kube-apiserver args %v and mounted files %v: want the admission configuration at %s", api, mounted, configFile)
	}
	policies := path.Join(AdmissionDir, addons.StaticPoliciesDir)
	if !strings.Contains(cm.Data[addons.AdmissionConfigFile], "staticManifestsDir: "+policies) ||
		!slices.Contains(mounted, path.Join(policies, addons.NodeEndpointsFile)) {
		t.Errorf("the configuration %q does not point at the mounted policies %v", cm.Data[addons.AdmissionConfigFile], mounted)
	}
	if !strings.Contains(cm.Data[addons.NodeEndpointsFile], "request.userInfo.username != '"+SyncerUser+"'") {
		t.Errorf("the node endpoints policy does not exempt nest-syncer's user %s:\n%s", SyncerUser, cm.Data[addons.NodeEndpointsFile])
	}
}
