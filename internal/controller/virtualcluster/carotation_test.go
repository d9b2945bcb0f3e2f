package virtualcluster

import (
	"bytes"
	"context"
	"crypto/x509"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/controlplane"
	"github.com/nestdev/nest/internal/pki"
	"github.com/nestdev/nest/internal/syncer/contract"
	"github.com/nestdev/nest/internal/vcops"
)

// rollOut plays the StatefulSet controller, which envtest lacks: once the
// template is that of the PKI Secret as it is, every replica of n's
// control plane runs it and is ready.
func rollOut(t *testing.T, n controlplane.Names) {
	t.Helper()
	eventually(t, "the pod template of the PKI Secret", func() error {
		sts := &appsv1.StatefulSet{}
		if err := k8sClient.Get(context.Background(), types.NamespacedName{Namespace: n.Namespace, Name: n.StatefulSet()}, sts); err != nil {
			return err
		}
		if got, want := sts.Spec.Template.Annotations[annotationPKIHash], pkiRestartHash(pkiOf(t, n)); got != want {
			return fmt.Errorf("template hash %s, the Secret's %s", got, want)
		}
		return nil
	})
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		sts := &appsv1.StatefulSet{}
		if err := k8sClient.Get(context.Background(), types.NamespacedName{Namespace: n.Namespace, Name: n.StatefulSet()}, sts); err != nil {
			return err
		}
		replicas := ptr.Deref(sts.Spec.Replicas, 1)
		rev := fmt.Sprintf("rev-%d", sts.Generation)
		sts.Status = appsv1.StatefulSetStatus{ObservedGeneration: sts.Generation, Replicas: replicas, ReadyReplicas: replicas,
			UpdatedReplicas: replicas, CurrentReplicas: replicas, CurrentRevision: rev, UpdateRevision: rev}
		return k8sClient.Status().Update(context.Background(), sts)
	}); err != nil {
		t.Fatal(err)
	}
}

// waitCAPhase waits until the rotation request of n is in phase want.
func waitCAPhase(t *testing.T, n controlplane.Names, request string, want nestv1.CARotationPhase) *nestv1.CertificatesStatus {
	t.Helper()
	var st *nestv1.CertificatesStatus
	eventually(t, "CA rotation phase "+string(want), func() error {
		reached, phase, err := vcops.CARotationReached(context.Background(), k8sClient, types.NamespacedName{Namespace: n.Namespace, Name: n.VirtualCluster}, request, want)
		if err != nil || phase != want {
			return fmt.Errorf("phase %q (reached %v): %v", phase, reached, err)
		}
		st = getVC(t, n.Namespace, n.VirtualCluster).Status.Certificates
		return nil
	})
	return st
}

func bundleLen(t *testing.T, data []byte) int {
	t.Helper()
	certs, err := pki.ParseCertificates(data)
	if err != nil {
		t.Fatal(err)
	}
	return len(certs)
}

// A CA rotation moves through Trust, Reissue, Grace and Retire, each
// restarting phase waiting for the control plane to roll out; Grace
// waits for its end or --finish; Reissue's end marks the pods' token
// Secrets due; the admin kubeconfig trusts both CAs until Retire.
func TestCARotationMovesThroughItsPhases(t *testing.T) {
	ctx := context.Background()
	n := newCluster(t, "ca-rotated")
	key := types.NamespacedName{Namespace: n.Namespace, Name: n.VirtualCluster}
	before := pkiOf(t, n)
	eventually(t, "the control plane StatefulSet", func() error {
		return k8sClient.Get(ctx, types.NamespacedName{Namespace: n.Namespace, Name: n.StatefulSet()}, &appsv1.StatefulSet{})
	})
	token := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "pod-1-token", Namespace: n.Namespace,
		Labels:      map[string]string{contract.LabelTokenSecret: "true", contract.LabelTenantOf: n.VirtualCluster},
		Annotations: map[string]string{contract.AnnotationTokenRefreshAt: time.Now().Add(time.Hour).UTC().Format(time.RFC3339)}}}
	if err := k8sClient.Create(ctx, token); err != nil {
		t.Fatal(err)
	}

	grace := time.Hour
	request, err := vcops.RequestCARotation(ctx, k8sClient, key, []nestv1.CAName{nestv1.CAServiceAccount, nestv1.CACluster}, &grace, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	st := waitCAPhase(t, n, request, nestv1.CAPhaseTrust)
	if want := []nestv1.CAName{nestv1.CACluster, nestv1.CAServiceAccount}; fmt.Sprint(st.CARotation.Authorities) != fmt.Sprint(want) {
		t.Errorf("authorities %v, want %v", st.CARotation.Authorities, want)
	}
	var trust map[string][]byte
	eventually(t, "the new cluster CA in the bundle", func() error {
		trust = pkiOf(t, n)
		if bundleLen(t, trust[controlplane.CACert]) != 2 {
			return fmt.Errorf("ca.crt holds %d", bundleLen(t, trust[controlplane.CACert]))
		}
		return nil
	})
	if !bytes.Equal(trust[controlplane.EtcdCACert], before[controlplane.EtcdCACert]) {
		t.Error("etcd's CA changed: the rotation asked for cluster and service-account only")
	}
	admin := func() []byte {
		var s corev1.Secret
		if err := k8sClient.Get(ctx, types.NamespacedName{Namespace: n.Namespace, Name: n.KubeconfigSecret()}, &s); err != nil {
			t.Fatal(err)
		}
		return s.Data[controlplane.KubeconfigKey]
	}
	eventually(t, "the admin kubeconfig trusting both CAs", func() error {
		cfg, err := clientcmd.RESTConfigFromKubeConfig(admin())
		if err != nil || !bytes.Equal(cfg.CAData, pkiOf(t, n)[controlplane.CACert]) {
			return fmt.Errorf("its CA is not the bundle: %v", err)
		}
		return nil
	})
	// Not before the control plane rolled out with the new trust.
	if st := getVC(t, n.Namespace, n.VirtualCluster).Status.Certificates; st.CARotation.Phase != nestv1.CAPhaseTrust {
		t.Fatalf("phase %s before the control plane rolled out", st.CARotation.Phase)
	}

	rollOut(t, n)
	waitCAPhase(t, n, request, nestv1.CAPhaseReissue)
	eventually(t, "the new keys signing", func() error {
		data := pkiOf(t, n)
		if !bytes.Equal(data[controlplane.CAKey], trust[controlplane.CAKey+".next"]) || !bytes.Equal(data[controlplane.ServiceAccountKey], trust[controlplane.ServiceAccountKey+".next"]) {
			return fmt.Errorf("ca.key or sa.key is not the new key yet")
		}
		cfg, err := clientcmd.RESTConfigFromKubeConfig(admin())
		if err != nil {
			return err
		}
		ca, err := pki.LoadCA(pki.KeyPair{CertPEM: data[controlplane.CACert], KeyPEM: data[controlplane.CAKey]})
		if err != nil || !controlplane.SignedBy(cfg.CertData, ca.CertificatePEM()) {
			return fmt.Errorf("the admin kubeconfig's certificate is not from the new CA: %v", err)
		}
		return nil
	})

	rollOut(t, n)
	st = waitCAPhase(t, n, request, nestv1.CAPhaseGrace)
	if st.CARotation.RetireAfter == nil || st.CARotation.RetireAfter.Sub(st.CARotation.PhaseTime.Time) != grace {
		t.Errorf("retireAfter %v, want %s after the phase began (%s)", st.CARotation.RetireAfter, grace, st.CARotation.PhaseTime)
	}
	eventually(t, "the token Secret due", func() error {
		var s corev1.Secret
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(token), &s); err != nil {
			return err
		}
		at, err := time.Parse(time.RFC3339, s.Annotations[contract.AnnotationTokenRefreshAt])
		if err != nil || at.After(time.Now()) {
			return fmt.Errorf("refresh at %q: %v", s.Annotations[contract.AnnotationTokenRefreshAt], err)
		}
		return nil
	})
	// A reconcile of a later generation leaves Grace alone.
	reconcileNextGeneration(t, n, 321)
	if st := getVC(t, n.Namespace, n.VirtualCluster).Status.Certificates; st.CARotation == nil || st.CARotation.Phase != nestv1.CAPhaseGrace {
		t.Fatalf("the rotation left Grace before its end: %+v", st.CARotation)
	}

	// Another request while this one runs waits, with a Warning event;
	// withdrawn, it is not served.
	asked := getVC(t, n.Namespace, n.VirtualCluster).Annotations[nestv1.AnnotationRotateCA]
	waiting, err := vcops.RequestCARotation(ctx, k8sClient, key, nil, nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the event saying the second request waits", func() error {
		var events eventsv1.EventList
		if err := k8sClient.List(ctx, &events, client.InNamespace(n.Namespace)); err != nil {
			return err
		}
		for _, e := range events.Items {
			if e.Reason == ReasonCARotationWaiting && strings.Contains(e.Note, "CA rotation "+waiting+" waits") {
				return nil
			}
		}
		return fmt.Errorf("none among %d events", len(events.Items))
	})
	updateVC(t, n.Namespace, n.VirtualCluster, func(vc *nestv1.VirtualCluster) { vc.Annotations[nestv1.AnnotationRotateCA] = asked })
	// --finish ends the grace.
	if finished, err := vcops.FinishCARotation(ctx, k8sClient, key); err != nil || finished != request {
		t.Fatalf("finish: %q, %v", finished, err)
	}
	waitCAPhase(t, n, request, nestv1.CAPhaseRetire)
	eventually(t, "the old CA out of the bundle", func() error {
		if got := bundleLen(t, pkiOf(t, n)[controlplane.CACert]); got != 1 {
			return fmt.Errorf("ca.crt holds %d", got)
		}
		return nil
	})
	rollOut(t, n)
	st = waitCAPhase(t, n, request, nestv1.CAPhaseDone)
	if st.LastCARotation == nil || st.LastCARotation.Request != request {
		t.Errorf("lastCARotation %+v, want request %s", st.LastCARotation, request)
	}
	after := pkiOf(t, n)
	if bundleLen(t, after[controlplane.CACert]) != 1 || bytes.Equal(after[controlplane.CACert], before[controlplane.CACert]) {
		t.Error("after Retire, ca.crt is not the new CA alone")
	}
	if keys, err := pki.ParsePublicKeys(after[controlplane.ServiceAccountPub]); err != nil || len(keys) != 1 {
		t.Errorf("after Retire, sa.pub holds %d keys: %v", len(keys), err)
	}
	eventually(t, "the admin kubeconfig trusting the new CA alone", func() error {
		cfg, err := clientcmd.RESTConfigFromKubeConfig(admin())
		if err != nil || !bytes.Equal(cfg.CAData, after[controlplane.CACert]) {
			return fmt.Errorf("its CA is not the new one alone: %v", err)
		}
		return nil
	})
	// A rotation nest-manager starts by itself ends later: the request
	// the annotation still holds is not served again.
	live := getVC(t, n.Namespace, n.VirtualCluster)
	live.Status.Certificates.LastCARotation = &nestv1.CARotation{Request: "expiring-1", Authorities: []nestv1.CAName{nestv1.CAEtcd}, Phase: nestv1.CAPhaseDone, PhaseTime: metav1.Now()}
	if err := k8sClient.Status().Update(ctx, live); err != nil {
		t.Fatal(err)
	}
	reconcileNextGeneration(t, n, 322)
	if st := getVC(t, n.Namespace, n.VirtualCluster).Status.Certificates; st.CARotation != nil || st.LastCARequest != request {
		t.Errorf("after another rotation ended, the request %s was served again: %+v (last request %q)", request, st.CARotation, st.LastCARequest)
	}
}

// A bad request is refused with a Warning event and starts nothing.
func TestInvalidCARotationIsRefused(t *testing.T) {
	n := newCluster(t, "ca-bad")
	pkiOf(t, n)
	updateVC(t, n.Namespace, n.VirtualCluster, func(vc *nestv1.VirtualCluster) {
		if vc.Annotations == nil {
			vc.Annotations = map[string]string{}
		}
		vc.Annotations[nestv1.AnnotationRotateCA] = `{"request":"x","authorities":["kubelet"]}`
	})
	eventually(t, "the InvalidCARotation event", func() error {
		var events eventsv1.EventList
		if err := k8sClient.List(context.Background(), &events, client.InNamespace(n.Namespace)); err != nil {
			return err
		}
		for _, e := range events.Items {
			if e.Reason == ReasonInvalidCARotation && strings.Contains(e.Note, `authority "kubelet"`) {
				return nil
			}
		}
		return fmt.Errorf("no event naming the bad authority")
	})
	if st := getVC(t, n.Namespace, n.VirtualCluster).Status.Certificates; st != nil && st.CARotation != nil {
		t.Errorf("a bad request started a rotation: %+v", st.CARotation)
	}
}

// waitEvent waits for an event of reason in n's namespace whose note
// holds every one of want.
func waitEvent(t *testing.T, n controlplane.Names, reason string, want ...string) {
	t.Helper()
	eventually(t, "a "+reason+" event naming "+strings.Join(want, ", "), func() error {
		var events eventsv1.EventList
		if err := k8sClient.List(context.Background(), &events, client.InNamespace(n.Namespace)); err != nil {
			return err
		}
		for _, e := range events.Items {
			if e.Reason != reason {
				continue
			}
			missing := false
			for _, w := range want {
				missing = missing || !strings.Contains(e.Note, w)
			}
			if !missing {
				return nil
			}
		}
		return fmt.Errorf("none")
	})
}

// A rotation of the cluster CA records the bundle each phase from Reissue
// on rolled out, and waits for the tenant's dedicated nodes to rejoin with
// it.
func TestACARotationWaitsForDedicatedNodesToRejoin(t *testing.T) {
	ctx := context.Background()
	n := newCluster(t, "ca-nodes")
	key := types.NamespacedName{Namespace: n.Namespace, Name: n.VirtualCluster}
	before := pkiOf(t, n)
	gn := &nestv1.GlobalNode{ObjectMeta: metav1.ObjectMeta{Name: "ca-nodes-worker"}, Spec: nestv1.GlobalNodeSpec{NodeIP: "198.51.100.77", State: nestv1.NodeStateOccupied}}
	if err := k8sClient.Create(ctx, gn); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8sClient.Delete(context.Background(), gn) })
	gn.Status = nestv1.GlobalNodeStatus{VirtualCluster: n.Namespace + "/" + n.VirtualCluster, Phase: nestv1.NodePhaseTenant,
		CABundleHash: pki.BundleHash(before[controlplane.CACert])}
	if err := k8sClient.Status().Update(ctx, gn); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the control plane StatefulSet", func() error {
		return k8sClient.Get(ctx, types.NamespacedName{Namespace: n.Namespace, Name: n.StatefulSet()}, &appsv1.StatefulSet{})
	})
	request, err := vcops.RequestCARotation(ctx, k8sClient, key, []nestv1.CAName{nestv1.CACluster}, nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	waitCAPhase(t, n, request, nestv1.CAPhaseTrust)
	eventually(t, "the new cluster CA in the bundle", func() error {
		if l := bundleLen(t, pkiOf(t, n)[controlplane.CACert]); l != 2 {
			return fmt.Errorf("ca.crt holds %d", l)
		}
		return nil
	})
	// In Trust the old CA still signs: the node need not rejoin.
	rollOut(t, n)
	st := waitCAPhase(t, n, request, nestv1.CAPhaseReissue)
	if st.CARotation.RolledOutCAHash != "" {
		t.Errorf("Reissue starts with rolledOutCAHash %q, want none before it rolled out", st.CARotation.RolledOutCAHash)
	}
	eventually(t, "the new cluster CA signing", func() error {
		if data := pkiOf(t, n); !controlplane.SignedBy(data[controlplane.APIServerCert], pki.EncodeCertificates(mustCerts(t, data[controlplane.CACert])[0])) || len(data[controlplane.CACrossCert]) == 0 {
			return fmt.Errorf("the API server's certificate is not the new CA's yet")
		}
		return nil
	})
	rollOut(t, n)
	reissue := pki.BundleHash(pkiOf(t, n)[controlplane.CACert])
	eventually(t, "the Reissue bundle recorded as rolled out", func() error {
		if got := getVC(t, n.Namespace, n.VirtualCluster).Status.Certificates.CARotation.RolledOutCAHash; got != reissue {
			return fmt.Errorf("rolledOutCAHash %q, want %q", got, reissue)
		}
		return nil
	})
	waitEvent(t, n, ReasonCARotationNodes, request, "ca-nodes-worker")
	if rot := getVC(t, n.Namespace, n.VirtualCluster).Status.Certificates.CARotation; rot.Phase != nestv1.CAPhaseReissue {
		t.Fatalf("phase %s while the node still has a certificate of the old CA", rot.Phase)
	}

	gn.Status.CABundleHash = reissue
	if err := k8sClient.Status().Update(ctx, gn); err != nil {
		t.Fatal(err)
	}
	st = waitCAPhase(t, n, request, nestv1.CAPhaseGrace)
	if st.CARotation.RolledOutCAHash != reissue {
		t.Errorf("Grace, which keeps Reissue's bundle, has rolledOutCAHash %q, want Reissue's %q", st.CARotation.RolledOutCAHash, reissue)
	}
}

func mustCerts(t *testing.T, data []byte) []*x509.Certificate {
	t.Helper()
	certs, err := pki.ParseCertificates(data)
	if err != nil {
		t.Fatal(err)
	}
	return certs
}

// A rotation waits for the holder's nodes in the tenant and those joining
// it, not for one on its way in or out, nor another's.
func TestNodesBehind(t *testing.T) {
	node := func(name, holder string, phase nestv1.NodePhase, hash string) nestv1.GlobalNode {
		return nestv1.GlobalNode{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: nestv1.GlobalNodeStatus{VirtualCluster: holder, Phase: phase, CABundleHash: hash}}
	}
	nodes := []nestv1.GlobalNode{
		node("current", "vc-a/a", nestv1.NodePhaseTenant, "new"),
		node("behind", "vc-a/a", nestv1.NodePhaseTenant, "old"),
		node("rejoining", "vc-a/a", nestv1.NodePhaseJoining, "old"),
		node("first-join", "vc-a/a", nestv1.NodePhaseJoining, ""),
		node("draining", "vc-a/a", nestv1.NodePhaseDraining, ""),
		node("releasing", "vc-a/a", nestv1.NodePhaseReleasing, "old"),
		node("another's", "vc-b/b", nestv1.NodePhaseTenant, "old"),
	}
	if got, want := nodesBehind(nodes, "vc-a/a", "new"), []string{"behind", "rejoining", "first-join"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("nodesBehind = %v, want %v", got, want)
	}
}
