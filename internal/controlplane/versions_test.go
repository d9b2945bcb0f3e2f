package controlplane

import (
	"slices"
	"testing"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/version"
)

// The steps of an upgrade follow upstream's order, one group at a time,
// and a single replica takes one step.
func TestUpgradePlan(t *testing.T) {
	from, to := version.Kubernetes, version.Newest()
	if version.Etcd[from] == version.Etcd[to] {
		t.Fatalf("this test expects etcd to change between %s and %s", from, to)
	}
	reasons := func(steps []UpgradeStep) []string {
		var out []string
		for _, s := range steps {
			out = append(out, s.Reason)
		}
		return out
	}
	three := UpgradePlan(from, to, 3)
	if got, want := reasons(three), []string{UpgradeEtcd, UpgradeAPIServer, UpgradeControllers}; !slices.Equal(got, want) {
		t.Fatalf("3 replicas: steps %v, want %v", got, want)
	}
	want := []ComponentVersions{{to, from, from}, {to, to, from}, AllAt(to)}
	for i, s := range three {
		if s.Versions != want[i] {
			t.Errorf("3 replicas, step %s: versions %+v, want %+v", s.Reason, s.Versions, want[i])
		}
	}
	if got := UpgradePlan(from, to, 1); len(got) != 1 || got[0].Reason != UpgradeControlPlane || got[0].Versions != AllAt(to) {
		t.Errorf("1 replica: %+v, want one step to %s", got, to)
	}
	// A patch release with the same etcd skips the etcd step.
	version.Etcd["v1.37.9"] = version.Etcd[to]
	defer delete(version.Etcd, "v1.37.9")
	if got := reasons(UpgradePlan(to, "v1.37.9", 3)); !slices.Equal(got, []string{UpgradeAPIServer, UpgradeControllers}) {
		t.Errorf("same etcd: steps %v, want no etcd step", got)
	}
	if UpgradePlan(to, to, 3) != nil {
		t.Error("no upgrade: want no step")
	}
}

// The template's images say which step an upgrade reached, and the virtual
// nodes report the controllers' version.
func TestStatefulSetRunsTheStepsVersions(t *testing.T) {
	from, to := version.Kubernetes, version.Newest()
	for _, step := range UpgradePlan(from, to, 3) {
		o := Options{KubeImageRepository: "registry.example:5000/kube", SyncerImage: "syncer", CoreDNSImage: "coredns", Versions: step.Versions}
		sts := StatefulSetFor(vc(func(v *nestv1.VirtualCluster) {
			v.Spec.KubernetesVersion = to
			v.Status.Version = from
		}), o, ServiceIPs{})
		got, ok := VersionsOf(sts)
		if !ok || got != step.Versions {
			t.Errorf("step %s: the template reads as %+v (%v), want %+v", step.Reason, got, ok, step.Versions)
		}
		for _, c := range sts.Spec.Template.Spec.Containers {
			if c.Name == syncerName && !slices.Contains(c.Args, "--kubernetes-version="+step.Versions.Controllers) {
				t.Errorf("step %s: nest-syncer args %v lack --kubernetes-version=%s", step.Reason, c.Args, step.Versions.Controllers)
			}
		}
	}
	sts := StatefulSetFor(vc(nil), Options{KubeImageRepository: "nest.local/kube"}, ServiceIPs{})
	sts.Spec.Template.Spec.Containers[0].Image = "nest.local/kube:v0.0.1"
	if _, ok := VersionsOf(sts); ok {
		t.Error("a template with an unsupported image reads as known versions")
	}
}

func TestRunningVersion(t *testing.T) {
	if got := RunningVersion(vc(func(v *nestv1.VirtualCluster) { v.Spec.KubernetesVersion = version.Newest() })); got != version.Newest() {
		t.Errorf("no status.version: running %s, want the spec's %s", got, version.Newest())
	}
	if got := RunningVersion(vc(func(v *nestv1.VirtualCluster) {
		v.Spec.KubernetesVersion, v.Status.Version = version.Newest(), version.Kubernetes
	})); got != version.Kubernetes {
		t.Errorf("status.version %s: running %s", version.Kubernetes, got)
	}
}
