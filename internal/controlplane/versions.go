package controlplane

import (
	"strings"

	appsv1 "k8s.io/api/apps/v1"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/version"
)

// ComponentVersions are the Kubernetes versions of a control plane's kube
// images, by the groups an upgrade moves one at a time. Each is one of
// version.Supported.
type ComponentVersions struct {
	// Etcd is the version whose image runs the etcd member (etcd's own
	// version is version.Etcd of it).
	Etcd string
	// APIServer is kube-apiserver's.
	APIServer string
	// Controllers is kube-controller-manager's and kube-scheduler's, and
	// the kubelet version the virtual nodes report: upstream's skew policy
	// lets neither be newer than the API server they talk to.
	Controllers string
}

// AllAt is every component at version v.
func AllAt(v string) ComponentVersions {
	return ComponentVersions{Etcd: v, APIServer: v, Controllers: v}
}

// Upgrade step reasons, the Upgrading condition's reason while a step rolls
// out.
const (
	// UpgradeEtcd rolls the etcd members to the new version, the rest staying.
	UpgradeEtcd = "UpgradeEtcd"
	// UpgradeAPIServer rolls the API servers (and etcd, when its version
	// does not change), the controllers staying.
	UpgradeAPIServer = "UpgradeAPIServer"
	// UpgradeControllers rolls kube-controller-manager, kube-scheduler and
	// the virtual nodes' kubelet version.
	UpgradeControllers = "UpgradeControllers"
	// UpgradeControlPlane rolls every component of a single replica at
	// once: one restart.
	UpgradeControlPlane = "UpgradeControlPlane"
)

// UpgradeStep is one rollout of an upgrade: the control-plane StatefulSet's
// template moves to Versions, and every replica runs it, ready, before the
// next step.
type UpgradeStep struct {
	// Reason names the step (UpgradeEtcd, ...).
	Reason string
	// Versions are the component versions once the step rolled out.
	Versions ComponentVersions
}

// UpgradePlan is the steps that move a control plane of replicas from from
// to to (version.CheckUpgrade allows the move), in the order upstream
// upgrades (kubeadm's): the etcd members first where etcd's version
// changes, then the API servers, then controller-manager and scheduler.
// Each step is one rolling restart of the replicas, one at a time, each
// Ready before the next. A single replica has one step: every component
// at once, one restart, as its pod restarts whichever of its containers
// changes. Nil when from is to.
func UpgradePlan(from, to string, replicas int32) []UpgradeStep {
	if from == to {
		return nil
	}
	if replicas <= 1 {
		return []UpgradeStep{{UpgradeControlPlane, AllAt(to)}}
	}
	var steps []UpgradeStep
	if version.Etcd[from] != version.Etcd[to] {
		steps = append(steps, UpgradeStep{UpgradeEtcd, ComponentVersions{Etcd: to, APIServer: from, Controllers: from}})
	}
	// etcd moves with the API servers when its own version does not: the
	// pod restarts anyway.
	return append(steps,
		UpgradeStep{UpgradeAPIServer, ComponentVersions{Etcd: to, APIServer: to, Controllers: from}},
		UpgradeStep{UpgradeControllers, AllAt(to)})
}

// RunningVersion is the version the control plane of vc runs, as far as
// the VirtualCluster alone tells: status.version, or, before the controller
// first wrote it (a new VirtualCluster, or one made by a Nest without
// upgrades, whose version could not change), spec.kubernetesVersion. The
// CLI, the dashboard and the pre-flight show and check with it; the
// upgrade itself also reads the StatefulSet's template, which says for
// sure before the status does.
func RunningVersion(vc *nestv1.VirtualCluster) string {
	if vc.Status.Version != "" {
		return vc.Status.Version
	}
	return KubernetesVersion(vc)
}

// VersionsOf reads the component versions of the control-plane
// StatefulSet's template from its containers' kube images (their tags);
// false when a component's image names no supported version.
func VersionsOf(sts *appsv1.StatefulSet) (ComponentVersions, bool) {
	tags := map[string]string{}
	spec := sts.Spec.Template.Spec
	for _, c := range append(append(spec.InitContainers[:0:0], spec.InitContainers...), spec.Containers...) {
		if i := strings.LastIndex(c.Image, ":"); i >= 0 {
			tags[c.Name] = c.Image[i+1:]
		}
	}
	v := ComponentVersions{Etcd: tags[etcdName], APIServer: tags[apiServerName], Controllers: tags[controllerManagerName]}
	ok := version.IsSupported(v.Etcd) && version.IsSupported(v.APIServer) && version.IsSupported(v.Controllers) &&
		tags[schedulerName] == v.Controllers
	return v, ok
}

// versionsOf are the component versions StatefulSetFor builds for: o's, or
// every component at spec.kubernetesVersion when o names none.
func versionsOf(vc *nestv1.VirtualCluster, o Options) ComponentVersions {
	if o.Versions == (ComponentVersions{}) {
		return AllAt(KubernetesVersion(vc))
	}
	return o.Versions
}
