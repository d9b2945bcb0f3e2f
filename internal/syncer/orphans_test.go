package syncer

import (
	"context"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/nestdev/nest/internal/syncer/contract"
)

// hostPodFor is the host pod the syncer made for the tenant pod
// default/name with uid.
func hostPodFor(name, uid string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Name: contract.HostName(tr.VirtualCluster, "default", name), Namespace: tr.HostNamespace, UID: types.UID("host-" + uid),
		Labels: contract.HostLabels(tr.VirtualCluster, "default"), Annotations: contract.HostAnnotations("default", name, uid),
	}}
}

func podWithUID(name, uid string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID(uid)}, Spec: corev1.PodSpec{NodeName: tr.NodeName}}
}

func hostPodExists(t *testing.T, host *fake.Clientset, name string) bool {
	t.Helper()
	_, err := host.CoreV1().Pods(tr.HostNamespace).Get(context.Background(), contract.HostName(tr.VirtualCluster, "default", name), metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	return err == nil
}

// A tenant pod deleted while the syncer's watch was down leaves its host pod
// behind (virtual-kubelet drops the tombstone): the orphan syncer deletes it,
// through failed checks of the tenant API.
func TestOrphanSyncerDeletesAHostPodWhoseTenantPodIsGone(t *testing.T) {
	tenant := fake.NewClientset()
	host := fake.NewClientset(hostPodFor("gone", "uid-1"))
	failed := failFirst(tenant, "get", "pods", 2)
	runKindSyncers(t, tenant, host)
	eventually(t, "orphan host pod deleted", func() (bool, error) { return !hostPodExists(t, host, "gone"), nil })
	if failed.Load() != 2 {
		t.Errorf("the live check failed %d times, want 2 (retried through them)", failed.Load())
	}
}

// A tenant pod deleted and made again under its name has a new UID: the old
// host pod is an orphan.
func TestOrphanSyncerDeletesTheHostPodOfAReplacedPod(t *testing.T) {
	tenant := fake.NewClientset(podWithUID("again", "uid-new"))
	host := fake.NewClientset(hostPodFor("again", "uid-old"))
	runKindSyncers(t, tenant, host)
	eventually(t, "old host pod deleted", func() (bool, error) { return !hostPodExists(t, host, "again"), nil })
}

// The host pod of a tenant pod that exists is kept, whether the informer
// cache has the pod or only the live check finds it.
func TestOrphanSyncerKeepsTheHostPodsOfLivePods(t *testing.T) {
	tenant := fake.NewClientset(podWithUID("live", "uid-2"))
	host := fake.NewClientset(hostPodFor("live", "uid-2"))
	s := runKindSyncers(t, tenant, host)
	s.orphans.Add(contract.HostName(tr.VirtualCluster, "default", "live"))
	drain(t, s.orphans)
	if !hostPodExists(t, host, "live") {
		t.Error("the host pod of a live tenant pod was deleted")
	}
}

// A host pod deleted from outside deletes its tenant pod (so its controller
// replaces it), through refused deletes, with the tenant pod's UID as a
// precondition.
func TestHostPodDeletedFromOutsideDeletesItsTenantPodThroughFailures(t *testing.T) {
	tenant := fake.NewClientset(podWithUID("lost", "uid-3"))
	host := fake.NewClientset(hostPodFor("lost", "uid-3"))
	failed := failFirst(tenant, "delete", "pods", 2)
	s := runKindSyncers(t, tenant, host)
	eventually(t, "the tenant pod in the informer cache", func() (bool, error) {
		_, err := s.provider.tenantPods.Pods("default").Get("lost")
		return err == nil, nil
	})
	if err := host.CoreV1().Pods(tr.HostNamespace).Delete(context.Background(), contract.HostName(tr.VirtualCluster, "default", "lost"), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "tenant pod deleted", func() (bool, error) {
		_, err := tenant.CoreV1().Pods("default").Get(context.Background(), "lost", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if failed.Load() != 2 {
		t.Errorf("the delete was refused %d times, want 2 (retried through them)", failed.Load())
	}
}

// A syncer stopped between creating a host pod and writing its token Secret
// leaves the pod waiting for the volume: the host pod check writes it.
func TestHostPodCheckWritesAMissingTokenSecret(t *testing.T) {
	tenantPod := podWithUID("web", "uid-4")
	// What the tenant API server's ServiceAccount admission adds.
	tenantPod.Spec = corev1.PodSpec{
		ServiceAccountName: "default",
		Containers:         []corev1.Container{{Name: "app", Image: "app"}},
		Volumes: []corev1.Volume{{Name: "kube-api-access", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}}},
		}}}},
	}
	pt, err := tr.TranslatePod(tenantPod, contract.MetadataAllowList{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !pt.UsesTokenSecret {
		t.Fatal("the translated pod mounts no token Secret: the test needs one")
	}
	host := pt.Pod.DeepCopy()
	host.UID = "host-uid-4"
	tenant := fake.NewClientset(tenantPod)
	tenant.PrependReactor("create", "serviceaccounts", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, &authenticationv1.TokenRequest{Status: authenticationv1.TokenRequestStatus{
			Token: "fresh", ExpirationTimestamp: metav1.NewTime(time.Now().Add(time.Hour)),
		}}, nil
	})
	hostClient := fake.NewClientset(host)
	runKindSyncers(t, tenant, hostClient)
	eventually(t, "token Secret written", func() (bool, error) {
		s, err := hostClient.CoreV1().Secrets(tr.HostNamespace).Get(context.Background(), contract.TokenSecretName(host.Name), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil && len(s.OwnerReferences) == 1 && s.OwnerReferences[0].UID == host.UID, err
	})
}
