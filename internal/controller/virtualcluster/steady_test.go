package virtualcluster

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/testutil"
)

// standInReady marks the cluster's StatefulSet ready, standing in for the
// StatefulSet controller and kubelet that envtest does not run.
func standInReady(t *testing.T, ns, name string) {
	t.Helper()
	ctx := context.Background()
	var sts appsv1.StatefulSet
	eventually(t, "StatefulSet "+ns+"/"+name+" created", func() error {
		return k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &sts)
	})
	sts.Status.Replicas, sts.Status.ReadyReplicas, sts.Status.AvailableReplicas = 1, 1, 1
	if err := k8sClient.Status().Update(ctx, &sts); err != nil {
		t.Fatal(err)
	}
}

func isReady(vc *nestv1.VirtualCluster) bool {
	return vc.Status.Phase == nestv1.PhaseCompleted && meta.IsStatusConditionTrue(vc.Status.Conditions, nestv1.ConditionReady)
}

func phaseEvents(t *testing.T, ns string) int {
	t.Helper()
	var list corev1.EventList
	if err := k8sClient.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range list.Items {
		if e.InvolvedObject.Kind == "VirtualCluster" {
			n++
		}
	}
	return n
}

// A transient error in one reconcile is not an observation: a Completed
// cluster stays Completed and Ready, its conditions keep their status, the
// error shows on the condition it belongs to, and no phase event fires.
func TestTransientErrorLeavesACompletedClusterSteady(t *testing.T) {
	tenants.ready.Store(true)
	defer tenants.ready.Store(false)
	n := newCluster(t, "steady")
	standInReady(t, n.Namespace, "steady")
	eventually(t, "steady Ready", func() error {
		if vc := getVC(t, n.Namespace, "steady"); !isReady(vc) {
			return fmt.Errorf("phase %q", vc.Status.Phase)
		}
		return nil
	})
	before := getVC(t, n.Namespace, "steady")
	events := phaseEvents(t, n.Namespace)

	faults.hits.Store(0)
	faults.namespace.Store(n.Namespace)
	defer faults.namespace.Store("")
	// A label change triggers a reconcile without changing the spec.
	patch := client.MergeFrom(before.DeepCopy())
	touched := before.DeepCopy()
	touched.Labels = map[string]string{"touched": "yes"}
	if err := k8sClient.Patch(context.Background(), touched, patch); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "the injected error to be hit twice (a retry)", func() error {
		if h := faults.hits.Load(); h < 2 {
			return fmt.Errorf("%d hits", h)
		}
		return nil
	})
	var during *nestv1.VirtualCluster
	eventually(t, "the error on CertificatesReady", func() error {
		during = getVC(t, n.Namespace, "steady")
		c := meta.FindStatusCondition(during.Status.Conditions, nestv1.ConditionCertificatesReady)
		if c == nil || !strings.Contains(c.Message, "injected: etcdserver: request timed out") {
			return fmt.Errorf("CertificatesReady = %+v", c)
		}
		return nil
	})
	if during.Status.Phase != nestv1.PhaseCompleted {
		t.Errorf("phase went from Completed to %s on a transient error", during.Status.Phase)
	}
	for _, c := range before.Status.Conditions {
		got := meta.FindStatusCondition(during.Status.Conditions, c.Type)
		if got == nil || got.Status != c.Status || got.Reason != c.Reason || !got.LastTransitionTime.Equal(&c.LastTransitionTime) {
			t.Errorf("condition %s changed on a transient error: %+v -> %+v", c.Type, c, got)
		}
	}
	if got := phaseEvents(t, n.Namespace); got != events {
		t.Errorf("%d phase events before the error, %d after: no transition happened", events, got)
	}

	faults.namespace.Store("")
	eventually(t, "the error cleared once the reads succeed", func() error {
		c := meta.FindStatusCondition(getVC(t, n.Namespace, "steady").Status.Conditions, nestv1.ConditionCertificatesReady)
		if c == nil || strings.Contains(c.Message, "last reconcile failed") {
			return fmt.Errorf("CertificatesReady = %+v", c)
		}
		return nil
	})
}

// readyTime creates the clusters, stands in for their control planes, and
// returns how long until every one of want is Ready.
func readyTime(t *testing.T, names []string, want []string) (map[string]string, time.Duration) {
	t.Helper()
	ensureNode(t)
	start := time.Now()
	namespaces := map[string]string{}
	for _, name := range names {
		ns := newNamespace(t)
		namespaces[name] = ns
		createVC(t, ns, name)
	}
	for _, name := range names {
		standInReady(t, namespaces[name], name)
	}
	testutil.Eventually(t, 2*time.Minute, "clusters Ready", func() error {
		for _, name := range want {
			if vc := getVC(t, namespaces[name], name); !isReady(vc) {
				return fmt.Errorf("%s: phase %q", name, vc.Status.Phase)
			}
		}
		return nil
	})
	return namespaces, time.Since(start)
}

// A tenant whose API server hangs holds one prober worker at a time and
// never the reconciler: the other tenants become Ready about as fast as
// they do without it.
func TestADeadTenantDoesNotDelayTheOthers(t *testing.T) {
	tenants.ready.Store(true)
	defer tenants.ready.Store(false)
	healthy := []string{"h0", "h1", "h2", "h3", "h4", "h5", "h6", "h7", "h8"}
	_, alone := readyTime(t, healthy, healthy)

	// The dead tenant's namespace is known only once made, so it is made
	// first and marked before its cluster exists.
	deadNS := newNamespace(t)
	tenants.unreachable.Store(deadNS, true)
	defer tenants.unreachable.Delete(deadNS)
	createVC(t, deadNS, "dead")
	standInReady(t, deadNS, "dead")
	names := []string{"d0", "d1", "d2", "d3", "d4", "d5", "d6", "d7", "d8"}
	_, withDead := readyTime(t, names, names)

	t.Logf("9 tenants Ready in %s alone, %s beside a dead tenant (probe timeout %s)", alone.Round(time.Millisecond), withDead.Round(time.Millisecond), probeTimeout)
	if limit := 2*alone + 2*probeTimeout; withDead > limit {
		t.Errorf("beside a dead tenant the others took %s, over %s (twice the %s they take alone, plus two probe timeouts)", withDead, limit, alone)
	}
	eventually(t, "the dead tenant to say why it is not available", func() error {
		dead := getVC(t, deadNS, "dead")
		if meta.IsStatusConditionTrue(dead.Status.Conditions, nestv1.ConditionReady) {
			return fmt.Errorf("the dead tenant is Ready")
		}
		if c := meta.FindStatusCondition(dead.Status.Conditions, nestv1.ConditionControlPlaneAvailable); c == nil || !strings.Contains(c.Message, "deadline") {
			return fmt.Errorf("ControlPlaneAvailable = %+v", c)
		}
		return nil
	})
}
