package controlplane

import (
	"fmt"
	"maps"
	"path"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/addons"
	"github.com/nestdev/nest/internal/components"
	"github.com/nestdev/nest/internal/syncer/contract"
	"github.com/nestdev/nest/internal/syncer/egress"
)

// APIServerConfigDir is where the tenant API server reads the files of
// APIServerConfigMapFor's ConfigMap: its static admission configuration
// (addons.StaticAdmission), policies no request to the tenant's API server
// can change, and its egress selector configuration (EgressSelectorFile).
const APIServerConfigDir = "/etc/nest/apiserver"

// EgressSelectorFile is the API server's egress selector configuration
// (egress.EgressSelectorConfiguration), relative to APIServerConfigDir.
const EgressSelectorFile = "egress-selector.yaml"

// EgressProxySocket is the Unix socket where nest-syncer serves the tenant
// API server's egress proxy (package egress), in a memory-backed emptyDir
// that only the kube-apiserver and nest-syncer containers mount
// (egressVolumeFor). Both the API server's egress selector configuration
// and nest-syncer's --egress-proxy-socket name it from here.
const EgressProxySocket = "/run/nest-egress/proxy.sock"

const (
	apiServerConfigVolume = "apiserver-config"
	egressVolume          = "egress"
)

// nodeEndpointsRules are the tenant's: nest-syncer owns the virtual and
// member nodes.
var nodeEndpointsRules = addons.NodeEndpointsRules{
	Owner: SyncerUser, VirtualNode: VirtualNodeName, MemberNodePrefix: contract.MemberNodePrefix,
}

// apiServerConfigFiles are the files the tenant API server reads from
// APIServerConfigDir, by their path relative to it. It fails if a builder
// does, or if two files share a base name, which a ConfigMap key could not
// tell apart.
func apiServerConfigFiles() (map[string][]byte, error) {
	files, err := addons.StaticAdmission(APIServerConfigDir, nodeEndpointsRules)
	if err != nil {
		return nil, fmt.Errorf("static admission files: %w", err)
	}
	selector, err := egress.EgressSelectorConfiguration(EgressProxySocket)
	if err != nil {
		return nil, fmt.Errorf("egress selector configuration: %w", err)
	}
	files[EgressSelectorFile] = selector
	bases := map[string]string{}
	for file := range files {
		if other, ok := bases[path.Base(file)]; ok {
			return nil, fmt.Errorf("API server files %s and %s share a base name", other, file)
		}
		bases[path.Base(file)] = file
	}
	return files, nil
}

// APIServerConfigMapFor returns the ConfigMap of the files the tenant API
// server reads from APIServerConfigDir (apiServerConfigFiles). A ConfigMap
// key cannot hold a "/", so the keys are the files' base names and the
// volume (apiServerConfigVolumeFor) puts each at its path.
func APIServerConfigMapFor(vc *nestv1.VirtualCluster) (*corev1.ConfigMap, error) {
	files, err := apiServerConfigFiles()
	if err != nil {
		return nil, err
	}
	n := NamesOf(vc)
	data := map[string]string{}
	for file, content := range files {
		data[path.Base(file)] = string(content)
	}
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: n.APIServerConfigMap(), Namespace: n.Namespace, Labels: n.Labels()},
		Data:       data,
	}, nil
}

// apiServerConfigVolumeFor mounts the API server's files at their paths in
// APIServerConfigDir. The builders are pure, so an error here is one
// APIServerConfigMapFor returns too, and the controller stops there.
func apiServerConfigVolumeFor(n Names) corev1.Volume {
	files, _ := apiServerConfigFiles()
	var items []corev1.KeyToPath
	for _, file := range slices.Sorted(maps.Keys(files)) {
		items = append(items, corev1.KeyToPath{Key: path.Base(file), Path: file})
	}
	return corev1.Volume{Name: apiServerConfigVolume, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: n.APIServerConfigMap()}, Items: items,
	}}}
}

// apiServerConfigFlags load the static admission files and send the API
// server's traffic to nodes and pods through nest-syncer's egress proxy.
func apiServerConfigFlags() components.Flags {
	return components.Flags{
		{Name: "feature-gates", Value: addons.NodeEndpointsFeatureGate + "=true"},
		{Name: "admission-control-config-file", Value: path.Join(APIServerConfigDir, addons.AdmissionConfigFile)},
		{Name: "egress-selector-config-file", Value: path.Join(APIServerConfigDir, EgressSelectorFile)},
	}
}

func apiServerConfigMount() corev1.VolumeMount {
	return corev1.VolumeMount{Name: apiServerConfigVolume, MountPath: APIServerConfigDir, ReadOnly: true}
}

// egressVolumeFor holds EgressProxySocket: in memory, as a socket needs no
// disk, and mounted by the kube-apiserver and nest-syncer containers only
// (egressMount), so no other container can open tunnels.
func egressVolumeFor() corev1.Volume {
	return corev1.Volume{Name: egressVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
		Medium: corev1.StorageMediumMemory, SizeLimit: ptr.To(resource.MustParse("1Mi")),
	}}}
}

// egressMount mounts EgressProxySocket's directory. nest-syncer creates the
// socket; the API server only connects to it, which a read-only mount
// allows (the kernel refuses writes to regular files, directories and
// links there, not connecting to a socket).
func egressMount(readOnly bool) corev1.VolumeMount {
	return corev1.VolumeMount{Name: egressVolume, MountPath: path.Dir(EgressProxySocket), ReadOnly: readOnly}
}
