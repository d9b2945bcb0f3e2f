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
