package virtualcluster

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/controlplane"
	"github.com/nestdev/nest/internal/version"
)

// standInRolledOut marks the StatefulSet's current template rolled out on
// every replica, ready, standing in for the StatefulSet controller and
// kubelets that envtest does not run, and returns the versions it holds.
func standInRolledOut(t *testing.T, n controlplane.Names) controlplane.ComponentVersions {
	t.Helper()
	ctx := context.Background()
	var sts appsv1.StatefulSet
	eventually(t, "StatefulSet of "+n.VirtualCluster, func() error {
		return k8sClient.Get(ctx, types.NamespacedName{Namespace: n.Namespace, Name: n.StatefulSet()}, &sts)
	})
	// The reconciler may patch it in between: read again and retry.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(&sts), &sts); err != nil {
			return err
		}
		r := ptr.Deref(sts.Spec.Replicas, 1)
		rev := fmt.Sprintf("rev-%d", sts.Generation)
		sts.Status = appsv1.StatefulSetStatus{ObservedGeneration: sts.Generation, Replicas: r, ReadyReplicas: r, AvailableReplicas: r,
			UpdatedReplicas: r, CurrentReplicas: r, CurrentRevision: rev, UpdateRevision: rev}
		return k8sClient.Status().Update(ctx, &sts)
	})
	if err != nil {
		t.Fatal(err)
	}
	v, ok := controlplane.VersionsOf(&sts)
	if !ok {
		t.Fatalf("the StatefulSet's template names no supported versions: %+v", v)
	}
	return v
}

// templateVersions reads the versions the StatefulSet's template holds.
func templateVersions(n controlplane.Names) (controlplane.ComponentVersions, error) {
	var sts appsv1.StatefulSet
	if err := k8sClient.Get(context.Background(), types.NamespacedName{Namespace: n.Namespace, Name: n.StatefulSet()}, &sts); err != nil {
		return controlplane.ComponentVersions{}, err
	}
	v, _ := controlplane.VersionsOf(&sts)
	return v, nil
}

// waitUpgrading waits for the Upgrading condition with status and reason,
// the template at want, and returns the VirtualCluster.
func waitUpgrading(t *testing.T, n controlplane.Names, status metav1.ConditionStatus, reason string, want controlplane.ComponentVersions) *nestv1.VirtualCluster {
	t.Helper()
	var vc *nestv1.VirtualCluster
	eventually(t, fmt.Sprintf("Upgrading %s %s, template at %+v", status, reason, want), func() error {
		vc = getVC(t, n.Namespace, n.VirtualCluster)
		c := meta.FindStatusCondition(vc.Status.Conditions, nestv1.ConditionUpgrading)
		if c == nil || c.Status != status || c.Reason != reason {
			return fmt.Errorf("Upgrading is %+v", c)
		}
		got, err := templateVersions(n)
		if err != nil {
			return err
		}
		if got != want {
			return fmt.Errorf("the template runs %+v", got)
		}
		return nil
	})
	return vc
}

// A 3-replica control plane moves to the new version one step at a time,
// each once the one before rolled out, after the pre-flight lets it; the
// status says what runs and an event tells each step.
func TestUpgradeRollsOneStepAtATimeAfterThePreflight(t *testing.T) {
	tenants.ready.Store(true)
	defer tenants.ready.Store(false)
	ctx := context.Background()
	from, to := version.Kubernetes, version.Newest()
	ensureNode(t)
	n := controlplane.Names{VirtualCluster: "upgrade", Namespace: newNamespace(t)}
	vc := &nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: n.VirtualCluster, Namespace: n.Namespace},
		Spec: nestv1.VirtualClusterSpec{KubernetesVersion: from, ControlPlane: nestv1.ControlPlaneSpec{Replicas: ptr.To[int32](3)}}}
	if err := k8sClient.Create(ctx, vc); err != nil {
		t.Fatal(err)
	}
	standInRolledOut(t, n)
	vc = waitUpgrading(t, n, metav1.ConditionFalse, ReasonUpToDate, controlplane.AllAt(from))
	if vc.Status.Version != from {
		t.Fatalf("status.version %q, want %s", vc.Status.Version, from)
	}

	tenants.blockers.Store(n.Namespace, "clients requested ipaddresses.v1beta1.networking.k8s.io (removed in 1.37)")
	defer tenants.blockers.Delete(n.Namespace)
	setVersion(t, n, to)
	vc = waitUpgrading(t, n, metav1.ConditionFalse, ReasonUpgradeBlocked, controlplane.AllAt(from))
	if c := meta.FindStatusCondition(vc.Status.Conditions, nestv1.ConditionUpgrading); !strings.Contains(c.Message, "ipaddresses.v1beta1.networking.k8s.io") {
		t.Errorf("the blocked upgrade's message %q does not name the API", c.Message)
	}

	annotate := client.MergeFrom(vc.DeepCopy())
	vc.Annotations = map[string]string{nestv1.AnnotationIgnoreRemovedAPIs: "true"}
	if err := k8sClient.Patch(ctx, vc, annotate); err != nil {
		t.Fatal(err)
	}
	for _, step := range controlplane.UpgradePlan(from, to, 3) {
		vc = waitUpgrading(t, n, metav1.ConditionTrue, step.Reason, step.Versions)
		if vc.Status.Version != from {
			t.Errorf("during %s: status.version %s, want %s until the last step rolled out", step.Reason, vc.Status.Version, from)
		}
		if got := standInRolledOut(t, n); got != step.Versions {
			t.Fatalf("rolled out %+v, want %+v", got, step.Versions)
		}
	}
	vc = waitUpgrading(t, n, metav1.ConditionFalse, ReasonUpToDate, controlplane.AllAt(to))
	if vc.Status.Version != to {
		t.Errorf("status.version %s after the upgrade, want %s", vc.Status.Version, to)
	}
	if ignored, _ := tenants.ignored.Load(n.Namespace); ignored != true {
		t.Error("the pre-flight was not asked to ignore removed APIs after the annotation")
	}
	// The recorder writes events in the background.
	eventually(t, "an event for the block, each step and the end", func() error {
		var events corev1.EventList
		if err := k8sClient.List(ctx, &events, client.InNamespace(n.Namespace)); err != nil {
			return err
		}
		var reasons []string
		for _, e := range events.Items {
			reasons = append(reasons, e.Reason)
		}
		for _, want := range []string{ReasonUpgradeBlocked, controlplane.UpgradeEtcd, controlplane.UpgradeAPIServer, controlplane.UpgradeControllers, ReasonUpToDate} {
			if !slices.Contains(reasons, want) {
				return fmt.Errorf("no %s event among %v", want, reasons)
			}
		}
		return nil
	})
}

func setVersion(t *testing.T, n controlplane.Names, v string) {
	t.Helper()
	vc := getVC(t, n.Namespace, n.VirtualCluster)
	patch := client.MergeFrom(vc.DeepCopy())
	vc.Spec.KubernetesVersion = v
	if err := k8sClient.Patch(context.Background(), vc, patch); err != nil {
		t.Fatal(err)
	}
}

// The CRD's transition rules refuse exactly what version.CheckUpgrade
// refuses, for every pair of supported versions.
func TestCRDRulesAgreeWithCheckUpgrade(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	for _, from := range version.Supported {
		vc := &nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: "rules-" + strings.ReplaceAll(from, ".", "-"), Namespace: ns},
			Spec: nestv1.VirtualClusterSpec{KubernetesVersion: from}}
		if err := k8sClient.Create(ctx, vc); err != nil {
			t.Fatal(err)
		}
		for _, to := range version.Supported {
			// A merge patch carries no resourceVersion: the reconciler's
			// own writes (the finalizer) do not conflict with it.
			moved := vc.DeepCopy()
			moved.Spec.KubernetesVersion = to
			err := k8sClient.Patch(ctx, moved, client.MergeFrom(vc), client.DryRunAll)
			want := version.CheckUpgrade(from, to)
			if (err == nil) != (want == nil) {
				t.Errorf("%s -> %s: the CRD says %v, CheckUpgrade %v", from, to, err, want)
			}
			if err != nil && !strings.Contains(err.Error(), "spec.kubernetesVersion") {
				t.Errorf("%s -> %s: the refusal %v does not name spec.kubernetesVersion", from, to, err)
			}
		}
	}
}
