package virtualcluster

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/controlplane"
	"github.com/nestdev/nest/internal/kube"
	"github.com/nestdev/nest/internal/version"
)

// A serving certificate reissued for a new host node leaves the control-plane
// pod running; any other certificate restarts it.
func TestPKIRestartHashLeavesOutTheServingCertificate(t *testing.T) {
	pki := func(serving, ca string) map[string][]byte {
		return map[string][]byte{
			controlplane.APIServerCert: []byte(serving), controlplane.APIServerKey: []byte(serving + "-key"),
			controlplane.CACert: []byte(ca), controlplane.SyncerServingCert: []byte("syncer"),
		}
	}
	before := pkiRestartHash(pki("names node a", "ca-1"))
	if got := pkiRestartHash(pki("names nodes a and b", "ca-1")); got != before {
		t.Errorf("a reissued serving certificate changes the hash: %s, was %s", got, before)
	}
	if got := pkiRestartHash(pki("names node a", "ca-2")); got == before {
		t.Errorf("a new CA leaves the hash at %s", got)
	}
	withSyncer := pki("names node a", "ca-1")
	withSyncer[controlplane.SyncerServingCert] = []byte("syncer renewed")
	if got := pkiRestartHash(withSyncer); got == before {
		t.Errorf("a renewed syncer certificate leaves the hash at %s", got)
	}
}

// A control plane still starting is looked at every 2 s; one that has not
// been Ready for minutes, every 15 s.
func TestNotReadyRequeueSlowsDownForAStuckControlPlane(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	vc := func(created, readyChanged time.Time) *nestv1.VirtualCluster {
		v := &nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(created)}}
		if !readyChanged.IsZero() {
			v.Status.Conditions = []metav1.Condition{{Type: nestv1.ConditionReady, Status: metav1.ConditionFalse, LastTransitionTime: metav1.NewTime(readyChanged)}}
		}
		return v
	}
	// Ready for an hour, failing now: the prober's next look comes soon.
	wasReady := vc(now.Add(-2*time.Hour), now.Add(-time.Hour))
	wasReady.Status.Conditions[0].Status = metav1.ConditionTrue
	if got := notReadyRequeue(wasReady, now); got != startingRequeue {
		t.Errorf("Ready for an hour: %v, want %v", got, startingRequeue)
	}
	for _, c := range []struct {
		name                  string
		created, readyChanged time.Time
		want                  time.Duration
	}{
		{"just created", now.Add(-10 * time.Second), time.Time{}, startingRequeue},
		{"created long ago, no status yet", now.Add(-time.Hour), time.Time{}, stuckRequeue},
		{"starting", now.Add(-time.Hour), now.Add(-time.Minute), startingRequeue},
		{"stuck", now.Add(-time.Hour), now.Add(-3 * time.Minute), stuckRequeue},
	} {
		if got := notReadyRequeue(vc(c.created, c.readyChanged), now); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// Deletion waits as a start does: every 2 s at first, every 15 s once it
// has waited for minutes.
func TestWaitedRequeue(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	if got := waitedRequeue(now.Add(-30*time.Second), now); got != startingRequeue {
		t.Errorf("waited 30 s: %v, want %v", got, startingRequeue)
	}
	if got := waitedRequeue(now.Add(-10*time.Minute), now); got != stuckRequeue {
		t.Errorf("waited 10 min: %v, want %v", got, stuckRequeue)
	}
}

// A control plane grows only once every replica runs the StatefulSet's
// latest template and is ready: a replica of the old template could not
// answer a new member joining.
func TestGrowthWaitsForTheRollout(t *testing.T) {
	sts := func(replicas, ready, updated int32, generation, observed int64, current, update string) *appsv1.StatefulSet {
		s := &appsv1.StatefulSet{
			ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.Now(), Generation: generation},
			Spec:       appsv1.StatefulSetSpec{Replicas: ptr.To(replicas)},
			Status: appsv1.StatefulSetStatus{ReadyReplicas: ready, UpdatedReplicas: updated, ObservedGeneration: observed,
				CurrentRevision: current, UpdateRevision: update},
		}
		return s
	}
	for _, tt := range []struct {
		name            string
		sts             *appsv1.StatefulSet
		growing, rolled bool
	}{
		{"rolled out", sts(1, 1, 1, 2, 2, "b", "b"), true, true},
		{"template not seen yet", sts(1, 1, 1, 3, 2, "b", "b"), true, false},
		{"rolling", sts(1, 1, 0, 2, 2, "a", "b"), true, false},
		{"new replica not ready", sts(1, 0, 1, 2, 2, "b", "b"), true, false},
		{"already 3", sts(3, 3, 3, 2, 2, "b", "b"), false, true},
	} {
		if got := growing(tt.sts, 3); got != tt.growing {
			t.Errorf("%s: growing %v, want %v", tt.name, got, tt.growing)
		}
		if got := rolledOut(tt.sts); got != tt.rolled {
			t.Errorf("%s: rolled out %v, want %v", tt.name, got, tt.rolled)
		}
	}
	if growing(&appsv1.StatefulSet{}, 3) {
		t.Error("a StatefulSet not made yet is made with every replica, not grown")
	}
}

// The first replica may start a new etcd cluster while the tenant has one
// replica, or several and none was ever ready; never again once withdrawn.
func TestMayBootstrap(t *testing.T) {
	three := &nestv1.VirtualCluster{Spec: nestv1.VirtualClusterSpec{ControlPlane: nestv1.ControlPlaneSpec{Replicas: ptr.To[int32](3)}}}
	ready := three.DeepCopy()
	ready.Status.Conditions = []metav1.Condition{{Type: nestv1.ConditionReady, Status: metav1.ConditionFalse}}
	named := &corev1.ConfigMap{Data: map[string]string{controlplane.EtcdBootstrapKey: "x-0"}}
	withdrawn := &corev1.ConfigMap{Data: map[string]string{controlplane.EtcdBootstrapKey: ""}}
	for _, tt := range []struct {
		name    string
		vc      *nestv1.VirtualCluster
		current *corev1.ConfigMap
		ready   int32
		want    bool
	}{
		{"one replica, always", &nestv1.VirtualCluster{}, withdrawn, 1, true},
		{"three, new", three, nil, 0, true},
		{"three, still bootstrapping", three, named, 0, true},
		{"three, a replica ready", three, named, 1, false},
		{"three, withdrawn, all down", three, withdrawn, 0, false},
		{"three, ConfigMap lost after the tenant had a status", ready, nil, 0, false},
	} {
		if got := mayBootstrap(tt.vc, tt.current, tt.ready); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}

// Node ports the host assigned are kept, unless the Service becomes a
// ClusterIP, which the API server refuses with node ports.
func TestMergePortsKeepsNodePortsButNotForClusterIP(t *testing.T) {
	current := []corev1.ServicePort{{Name: "https", Port: 6443, NodePort: 31000}}
	desired := []corev1.ServicePort{{Name: "https", Port: 6443}}
	if got := mergePorts(current, desired, corev1.ServiceTypeLoadBalancer); got[0].NodePort != 31000 {
		t.Errorf("LoadBalancer: node port %d, want the assigned 31000 kept", got[0].NodePort)
	}
	if got := mergePorts(current, desired, corev1.ServiceTypeClusterIP); got[0].NodePort != 0 {
		t.Errorf("ClusterIP: node port %d, want none", got[0].NodePort)
	}
}

// A control plane whose status names no version yet (made by a Nest without
// upgrades) runs what its StatefulSet's template says, not the spec: a
// spec that moved meanwhile is upgraded step by step, not jumped to.
func TestRunningVersionReadsTheTemplateBeforeTheStatusSaysIt(t *testing.T) {
	from, to := version.Kubernetes, version.Newest()
	vc := &nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "vc-a"}, Spec: nestv1.VirtualClusterSpec{KubernetesVersion: from}}
	sts := controlplane.StatefulSetFor(vc, controlplane.Options{KubeImageRepository: "nest.local/kube"}, controlplane.ServiceIPs{})
	vc.Spec.KubernetesVersion = to
	if got := runningVersion(vc, sts); got != from {
		t.Errorf("no status.version, template at %s, spec %s: running %s, want the template's", from, to, got)
	}
	vc.Status.Version = to
	if got := runningVersion(vc, sts); got != to {
		t.Errorf("status.version %s: running %s", to, got)
	}
}

// The upgrade never goes back: it reads the StatefulSet from the API
// server, not a cache that may lag behind the step written last, and an
// upgrade refused midway leaves the template where it is.
func TestUpgradeNeverWritesOlderVersionsThanTheTemplateRuns(t *testing.T) {
	from, to := version.Kubernetes, version.Newest()
	plan := controlplane.UpgradePlan(from, to, 3)
	vc := &nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "vc-a"},
		Spec: nestv1.VirtualClusterSpec{KubernetesVersion: from, ControlPlane: nestv1.ControlPlaneSpec{Replicas: ptr.To[int32](3)}}}
	at := func(v controlplane.ComponentVersions) *appsv1.StatefulSet {
		sts := controlplane.StatefulSetFor(vc, controlplane.Options{KubeImageRepository: "nest.local/kube", Versions: v}, controlplane.ServiceIPs{})
		sts.Generation, sts.Status = 2, appsv1.StatefulSetStatus{ObservedGeneration: 1, Replicas: 3, ReadyReplicas: 3}
		return sts
	}
	clientWith := func(sts *appsv1.StatefulSet) client.Client {
		return fake.NewClientBuilder().WithScheme(kube.NewScheme()).WithObjects(sts).Build()
	}
	r := &Reconciler{Client: clientWith(at(controlplane.AllAt(from))), APIReader: clientWith(at(plan[1].Versions)), Health: NewHealth()}
	vc.Spec.KubernetesVersion, vc.Status.Version = to, from
	s := newReconcileState(vc)
	if _, err := r.reconcileUpgrade(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	if s.upgrade.reason != plan[1].Reason || s.upgrade.versions != plan[1].Versions {
		t.Errorf("the API server holds step %s, the cache none: %s at %+v, want to stay at %+v", plan[1].Reason, s.upgrade.reason, s.upgrade.versions, plan[1].Versions)
	}

	vc.Spec.KubernetesVersion = "v1.99.0"
	s = newReconcileState(vc)
	if _, err := r.reconcileUpgrade(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	if s.upgrade.reason != ReasonUpgradeRefused || s.upgrade.versions != plan[1].Versions {
		t.Errorf("refused midway: %s at %+v, want %s with the template kept at %+v", s.upgrade.reason, s.upgrade.versions, ReasonUpgradeRefused, plan[1].Versions)
	}
}

// A control plane whose StatefulSet is gone is made again at the version
// it ran, not at the one asked for.
func TestAMissingStatefulSetIsMadeAgainAtTheRunningVersion(t *testing.T) {
	from, to := version.Kubernetes, version.Newest()
	vc := &nestv1.VirtualCluster{Spec: nestv1.VirtualClusterSpec{KubernetesVersion: to}, Status: nestv1.VirtualClusterStatus{Version: from}}
	if got := startAt(vc, to); got.versions != controlplane.AllAt(from) || got.running != from || got.reason != ReasonUpgradePending {
		t.Errorf("running %s, asked %s, no StatefulSet: %+v, want it made at %s and the upgrade pending", from, to, got, from)
	}
	vc.Status.Version = ""
	if got := startAt(vc, to); got.versions != controlplane.AllAt(to) || got.reason != ReasonUpToDate {
		t.Errorf("a new control plane: %+v, want it made at %s", got, to)
	}
}

// The prober runs the pre-flight only while an upgrade waits to start.
func TestUpgradePendingOnlyBeforeTheFirstStep(t *testing.T) {
	from, to := version.Kubernetes, version.Newest()
	vc := &nestv1.VirtualCluster{Spec: nestv1.VirtualClusterSpec{KubernetesVersion: to}, Status: nestv1.VirtualClusterStatus{Version: to}}
	if _, pending := upgradePending(vc); pending {
		t.Error("running the version asked for: an upgrade is pending")
	}
	vc.Status.Version = from
	if got, pending := upgradePending(vc); !pending || got != to {
		t.Errorf("running %s, asked %s: pending %v for %q", from, to, pending, got)
	}
	vc.Status.Conditions = []metav1.Condition{{Type: nestv1.ConditionUpgrading, Status: metav1.ConditionTrue, Reason: controlplane.UpgradeEtcd}}
	if _, pending := upgradePending(vc); pending {
		t.Error("an upgrade under way is still pending its pre-flight")
	}
}

// A LoadBalancer address asked for and not given within addressGrace is
// dropped, so the load balancer picks another; given, or still within the
// grace, it stays.
func TestDropUnmetAddressOnlyAfterTheGrace(t *testing.T) {
	created := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	svc := func(ingress bool) *corev1.Service {
		s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "alpha", Namespace: "vc-alpha", CreationTimestamp: metav1.NewTime(created)},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerIP: "198.18.1.201"}}
		if ingress {
			s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "198.18.1.201"}}
		}
		return s
	}
	vc := &nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: "alpha", Namespace: "vc-alpha"}}
	for _, tc := range []struct {
		name    string
		ingress bool
		after   time.Duration
		dropped bool
	}{
		{"given", true, time.Hour, false},
		{"within the grace", false, addressGrace / 2, false},
		{"not given past the grace", false, addressGrace + time.Second, true},
	} {
		s := svc(tc.ingress)
		c := fake.NewClientBuilder().WithScheme(kube.NewScheme()).WithObjects(s.DeepCopy()).Build()
		rec := events.NewFakeRecorder(10)
		r := &Reconciler{Client: c, Recorder: rec}
		if err := r.dropUnmetAddress(context.Background(), vc, s, created.Add(tc.after)); err != nil {
			t.Fatal(err)
		}
		var got corev1.Service
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(s), &got); err != nil {
			t.Fatal(err)
		}
		if dropped := got.Spec.LoadBalancerIP == ""; dropped != tc.dropped {
			t.Errorf("%s: loadBalancerIP %q, want dropped %v", tc.name, got.Spec.LoadBalancerIP, tc.dropped)
		}
		if warned := len(rec.Events) > 0 && strings.Contains(<-rec.Events, ReasonAddressTaken+" "); warned != tc.dropped {
			t.Errorf("%s: an %s event %v, want %v", tc.name, ReasonAddressTaken, warned, tc.dropped)
		}
	}
}
