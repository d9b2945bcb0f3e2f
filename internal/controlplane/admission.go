package controlplane

import (
	"fmt"
	"maps"
	"path"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/addons"
	"github.com/nestdev/nest/internal/components"
	"github.com/nestdev/nest/internal/syncer/contract"
)

// AdmissionDir is where the tenant API server reads its static admission
// configuration (addons.StaticAdmission), from AdmissionConfigMapFor's
// ConfigMap: policies no request to the tenant's API server can change.
const AdmissionDir = "/etc/nest/admission"

const admissionVolume = "admission"

// nodeEndpointsRules are the tenant's: nest-syncer owns the virtual and
// member nodes.
var nodeEndpointsRules = addons.NodeEndpointsRules{
	Owner: SyncerUser, VirtualNode: VirtualNodeName, MemberNodePrefix: contract.MemberNodePrefix,
}

// AdmissionConfigMapFor returns the ConfigMap of the tenant API server's
// static admission configuration. A ConfigMap key cannot hold a "/", so the
// keys are the files' base names and the volume (admissionVolumeFor) puts
// each at its path.
func AdmissionConfigMapFor(vc *nestv1.VirtualCluster) (*corev1.ConfigMap, error) {
	files, err := addons.StaticAdmission(AdmissionDir, nodeEndpointsRules)
	if err != nil {
		return nil, fmt.Errorf("static admission files: %w", err)
	}
	n := NamesOf(vc)
	data := map[string]string{}
	for file, content := range files {
		data[path.Base(file)] = string(content)
	}
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: n.AdmissionConfigMap(), Namespace: n.Namespace, Labels: n.Labels()},
		Data:       data,
	}, nil
}

// admissionVolumeFor mounts the static admission files at their paths in
// AdmissionDir.
func admissionVolumeFor(n Names) corev1.Volume {
	files, _ := addons.StaticAdmission(AdmissionDir, nodeEndpointsRules)
	var items []corev1.KeyToPath
	for _, file := range slices.Sorted(maps.Keys(files)) {
		items = append(items, corev1.KeyToPath{Key: path.Base(file), Path: file})
	}
	return corev1.Volume{Name: admissionVolume, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: n.AdmissionConfigMap()}, Items: items,
	}}}
}

// admissionFlags load the static admission files.
func admissionFlags() components.Flags {
	return components.Flags{
		{Name: "feature-gates", Value: addons.NodeEndpointsFeatureGate + "=true"},
		{Name: "admission-control-config-file", Value: path.Join(AdmissionDir, addons.AdmissionConfigFile)},
	}
}

func admissionMount() corev1.VolumeMount {
	return corev1.VolumeMount{Name: admissionVolume, MountPath: AdmissionDir, ReadOnly: true}
}
