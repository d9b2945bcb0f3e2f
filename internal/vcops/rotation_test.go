package vcops

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/controlplane"
	"github.com/nestdev/nest/internal/kube"
)

// A rotation is over only once served, with every leaf issued since and
// the control plane restarted and ready; each step left is named.
func TestRotationDoneWaitsForEveryStep(t *testing.T) {
	ctx := context.Background()
	n := controlplane.Names{VirtualCluster: "alpha", Namespace: "vc-alpha"}
	key := types.NamespacedName{Namespace: n.Namespace, Name: n.VirtualCluster}
	old, _, err := controlplane.ReconcilePKI(nil, n, controlplane.Endpoints{ServiceIP: "10.96.0.10", HostClusterDomain: "cluster.local", TenantClusterDomain: "cluster.local", TenantServiceCIDR: "10.96.0.0/16"}, controlplane.Renewal{})
	if err != nil {
		t.Fatal(err)
	}
	secrets := func(data map[string][]byte) []*corev1.Secret {
		var out []*corev1.Secret
		for _, name := range n.Secrets() {
			s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: n.Namespace, Name: name}}
			if name == n.PKISecret() {
				s.Data = data
			}
			out = append(out, s)
		}
		return out
	}
	vc := &nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: n.VirtualCluster, Namespace: n.Namespace}}
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: n.StatefulSet(), Namespace: n.Namespace, Generation: 2},
		Spec:   appsv1.StatefulSetSpec{Replicas: ptr.To[int32](1)},
		Status: appsv1.StatefulSetStatus{ObservedGeneration: 2, CurrentRevision: "a", UpdateRevision: "b", UpdatedReplicas: 0, ReadyReplicas: 1}}
	c := fake.NewClientBuilder().WithScheme(kube.NewScheme()).WithObjects(vc, sts).WithStatusSubresource(vc, sts).Build()
	for _, s := range secrets(old) {
		if err := c.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	request, err := RequestRotation(ctx, c, key, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	check := func(want string) {
		t.Helper()
		done, why, err := RotationDone(ctx, c, key, request)
		if err != nil || done != (want == "") || !strings.Contains(why, want) {
			t.Errorf("done %v, why %q, %v; want %q", done, why, err, want)
		}
	}
	check("not served")
	if err := c.Get(ctx, key, vc); err != nil {
		t.Fatal(err)
	}
	served := time.Now().Add(time.Hour)
	vc.Status.Certificates = &nestv1.CertificatesStatus{LastRotation: &nestv1.CertificateRotation{Request: request, Time: metav1.NewTime(served)}}
	if err := c.Status().Update(ctx, vc); err != nil {
		t.Fatal(err)
	}
	check("from before the rotation")
	renewed, _, err := controlplane.ReconcilePKI(old, n, controlplane.Endpoints{ServiceIP: "10.96.0.10", HostClusterDomain: "cluster.local", TenantClusterDomain: "cluster.local", TenantServiceCIDR: "10.96.0.0/16"},
		controlplane.Renewal{IssuedAfter: served.Add(time.Second), Now: served})
	if err != nil {
		t.Fatal(err)
	}
	// The test's leaves were issued now; as if the rotation were served
	// before them.
	vc.Status.Certificates.LastRotation.Time = metav1.NewTime(time.Now().Add(-time.Hour))
	if err := c.Status().Update(ctx, vc); err != nil {
		t.Fatal(err)
	}
	pkiSecret := secrets(renewed)[0]
	if err := c.Update(ctx, pkiSecret); err != nil {
		t.Fatal(err)
	}
	check("control-plane pods restarting")
	sts.Status = appsv1.StatefulSetStatus{ObservedGeneration: 2, CurrentRevision: "b", UpdateRevision: "b", UpdatedReplicas: 1, ReadyReplicas: 1}
	if err := c.Status().Update(ctx, sts); err != nil {
		t.Fatal(err)
	}
	check("")
}

// A CA rotation request is checked before it is written: a bad authority
// or grace is refused naming it, and nothing is patched; a good one is
// written as nest-manager reads it. Finish needs a rotation under way,
// and CARotationReached ranks the phases.
func TestCARotationRequests(t *testing.T) {
	ctx := context.Background()
	vc := &nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "vc-a", Name: "a"}}
	c := fake.NewClientBuilder().WithScheme(kube.NewScheme()).WithObjects(vc).WithStatusSubresource(vc).Build()
	key := types.NamespacedName{Namespace: "vc-a", Name: "a"}
	now := time.Now()
	if _, err := RequestCARotation(ctx, c, key, []nestv1.CAName{"kubelet"}, nil, now); err == nil || !strings.Contains(err.Error(), `authority "kubelet"`) {
		t.Errorf("a bad authority: %v, want it named", err)
	}
	long := 2 * controlplane.MaxCARotationGrace
	if _, err := RequestCARotation(ctx, c, key, nil, &long, now); err == nil || !strings.Contains(err.Error(), "grace") {
		t.Errorf("a grace over the maximum: %v, want refused naming grace", err)
	}
	got := &nestv1.VirtualCluster{}
	if err := c.Get(ctx, key, got); err != nil || got.Annotations[nestv1.AnnotationRotateCA] != "" {
		t.Fatalf("a refused request was written: %v %v", got.Annotations, err)
	}
	if _, err := FinishCARotation(ctx, c, key); err == nil || !strings.Contains(err.Error(), "no CA rotation under way") {
		t.Errorf("finish with no rotation: %v", err)
	}
	grace := time.Hour
	request, err := RequestCARotation(ctx, c, key, []nestv1.CAName{nestv1.CAEtcd}, &grace, now)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, key, got); err != nil {
		t.Fatal(err)
	}
	rot, err := controlplane.ParseCARotationRequest(got.Annotations[nestv1.AnnotationRotateCA], now)
	if err != nil || rot.Request != request || len(rot.Authorities) != 1 || rot.Authorities[0] != nestv1.CAEtcd || rot.Grace.Duration != time.Hour {
		t.Fatalf("written %q: %+v, %v", got.Annotations[nestv1.AnnotationRotateCA], rot, err)
	}
	got.Status.Certificates = &nestv1.CertificatesStatus{CARotation: rot}
	if err := c.Status().Update(ctx, got); err != nil {
		t.Fatal(err)
	}
	for want, reached := range map[nestv1.CARotationPhase]bool{nestv1.CAPhaseTrust: true, nestv1.CAPhaseGrace: false, nestv1.CAPhaseDone: false} {
		if ok, phase, err := CARotationReached(ctx, c, key, request, want); err != nil || ok != reached || phase != nestv1.CAPhaseTrust {
			t.Errorf("reached %s: %v in %s (%v), want %v", want, ok, phase, err, reached)
		}
	}
	if finished, err := FinishCARotation(ctx, c, key); err != nil || finished != request {
		t.Errorf("finish: %q, %v", finished, err)
	}
	if err := c.Get(ctx, key, got); err != nil || got.Annotations[nestv1.AnnotationFinishCARotation] != request {
		t.Errorf("finish wrote %v: %v", got.Annotations, err)
	}
}
