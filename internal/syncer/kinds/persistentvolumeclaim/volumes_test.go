package persistentvolumeclaim

import (
	"context"
	"errors"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/nestdev/nest/internal/syncer/contract"
)

// boundClaim is the tenant claim shop/data-db-0 asking for request, bound
// to the tenant volume pv-1 of DriverName that has capacity.
func boundClaim(request, capacity string) (*corev1.PersistentVolumeClaim, *corev1.PersistentVolume) {
	c := claim(func(c *corev1.PersistentVolumeClaim) {
		c.Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse(request)
		c.Spec.VolumeName = "pv-1"
		c.Status = corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound,
			Capacity: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(capacity)}}
	})
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pv-1"},
		Spec: corev1.PersistentVolumeSpec{
			Capacity: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(capacity)},
			ClaimRef: &corev1.ObjectReference{Namespace: c.Namespace, Name: c.Name, UID: c.UID},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: DriverName, VolumeHandle: contract.HostName("alpha", c.Namespace, c.Name)}},
		},
	}
	return c, pv
}

// hostClaimOf is the host claim of c in vc-alpha, requesting request and
// bound with capacity ("" leaves it Pending).
func hostClaimOf(c *corev1.PersistentVolumeClaim, request, capacity string) *corev1.PersistentVolumeClaim {
	hc := (&Provisioner{VirtualCluster: "alpha", HostNamespace: "vc-alpha"}).hostClaim(c, standard)
	hc.Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse(request)
	if capacity != "" {
		hc.Status = corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound,
			Capacity: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(capacity)}}
	}
	return hc
}

// volumes is a Volumes over fake clients whose listers hold the objects.
func volumes(t *testing.T, tenantObjs, hostObjs []runtime.Object) (*Volumes, *fake.Clientset, *fake.Clientset, *record.FakeRecorder) {
	t.Helper()
	tenant, host := fake.NewClientset(tenantObjs...), fake.NewClientset(hostObjs...)
	claims, pvs, hostClaims := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}), cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}), cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, o := range tenantObjs {
		switch o := o.(type) {
		case *corev1.PersistentVolumeClaim:
			_ = claims.Add(o)
		case *corev1.PersistentVolume:
			_ = pvs.Add(o)
		}
	}
	for _, o := range hostObjs {
		_ = hostClaims.Add(o)
	}
	rec := record.NewFakeRecorder(10)
	return &Volumes{VirtualCluster: "alpha", HostNamespace: "vc-alpha", Tenant: tenant, Host: host, Recorder: rec,
		TenantClaims: corelisters.NewPersistentVolumeClaimLister(claims), TenantVolumes: corelisters.NewPersistentVolumeLister(pvs),
		HostClaims: corelisters.NewPersistentVolumeClaimLister(hostClaims).PersistentVolumeClaims("vc-alpha")}, tenant, host, rec
}

func storageOf(l corev1.ResourceList) string {
	q := l[corev1.ResourceStorage]
	return q.String()
}

func TestALargerTenantRequestResizesTheHostClaim(t *testing.T) {
	c, pv := boundClaim("2Gi", "1Gi")
	v, _, host, _ := volumes(t, []runtime.Object{c, pv}, []runtime.Object{hostClaimOf(c, "1Gi", "1Gi")})
	if _, err := v.Sync(context.Background(), "shop/data-db-0"); err != nil {
		t.Fatal(err)
	}
	hc, err := host.CoreV1().PersistentVolumeClaims("vc-alpha").Get(context.Background(), contract.HostName("alpha", "shop", "data-db-0"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := storageOf(hc.Spec.Resources.Requests); got != "2Gi" {
		t.Errorf("host claim request = %s, want 2Gi", got)
	}
}

func TestTheHostCapacityIsShownOnTheTenantClaimAndVolume(t *testing.T) {
	c, pv := boundClaim("2Gi", "1Gi")
	hc := hostClaimOf(c, "2Gi", "2Gi")
	hc.Status.Conditions = []corev1.PersistentVolumeClaimCondition{{Type: corev1.PersistentVolumeClaimFileSystemResizePending, Status: corev1.ConditionTrue}}
	hc.Status.AllocatedResources = corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("2Gi")}
	v, tenant, _, _ := volumes(t, []runtime.Object{c, pv}, []runtime.Object{hc})
	if _, err := v.Sync(context.Background(), "shop/data-db-0"); err != nil {
		t.Fatal(err)
	}
	gotPV, _ := tenant.CoreV1().PersistentVolumes().Get(context.Background(), "pv-1", metav1.GetOptions{})
	if got := storageOf(gotPV.Spec.Capacity); got != "2Gi" {
		t.Errorf("tenant volume capacity = %s, want the host's 2Gi", got)
	}
	gotClaim, _ := tenant.CoreV1().PersistentVolumeClaims("shop").Get(context.Background(), "data-db-0", metav1.GetOptions{})
	if got := storageOf(gotClaim.Status.Capacity); got != "2Gi" {
		t.Errorf("tenant claim capacity = %s, want the host's 2Gi", got)
	}
	if got := storageOf(gotClaim.Status.AllocatedResources); got != "2Gi" {
		t.Errorf("tenant claim allocatedResources = %s, want 2Gi", got)
	}
	if len(gotClaim.Status.Conditions) != 1 || gotClaim.Status.Conditions[0].Type != corev1.PersistentVolumeClaimFileSystemResizePending {
		t.Errorf("tenant claim conditions = %+v, want the host's FileSystemResizePending", gotClaim.Status.Conditions)
	}
}

func TestAHostRefusalIsAWarningOnTheTenantClaim(t *testing.T) {
	c, pv := boundClaim("50Gi", "1Gi")
	v, _, host, rec := volumes(t, []runtime.Object{c, pv}, []runtime.Object{hostClaimOf(c, "1Gi", "1Gi")})
	host.PrependReactor("update", "persistentvolumeclaims", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errForbidden("exceeded quota: requests.storage")
	})
	if _, err := v.Sync(context.Background(), "shop/data-db-0"); err == nil {
		t.Fatal("Sync succeeded although the host refused the resize; it must fail so the key is retried")
	}
	select {
	case ev := <-rec.Events:
		if !strings.Contains(ev, ReasonResizeFailed) || !strings.Contains(ev, "spec.virtualNode.storage.requests") {
			t.Errorf("event = %q, want %s naming the VirtualCluster's storage quota", ev, ReasonResizeFailed)
		}
		if strings.Contains(ev, "requests.storage") {
			t.Errorf("event = %q passes the host quota's own text to the tenant", ev)
		}
	default:
		t.Error("no event on the tenant claim")
	}
}

func TestClaimsNotOursOrNotTheCopyAreLeftAlone(t *testing.T) {
	for name, mutate := range map[string]func(*corev1.PersistentVolumeClaim, *corev1.PersistentVolume, *corev1.PersistentVolumeClaim){
		"volume of another driver": func(_ *corev1.PersistentVolumeClaim, pv *corev1.PersistentVolume, _ *corev1.PersistentVolumeClaim) {
			pv.Spec.CSI.Driver = "other.example.com"
		},
		"volume bound to another claim": func(_ *corev1.PersistentVolumeClaim, pv *corev1.PersistentVolume, _ *corev1.PersistentVolumeClaim) {
			pv.Spec.ClaimRef.UID = "someone-else"
		},
		"host claim of an earlier claim": func(_ *corev1.PersistentVolumeClaim, _ *corev1.PersistentVolume, hc *corev1.PersistentVolumeClaim) {
			hc.Annotations[contract.AnnotationTenantUID] = "earlier"
		},
	} {
		t.Run(name, func(t *testing.T) {
			c, pv := boundClaim("2Gi", "1Gi")
			hc := hostClaimOf(c, "1Gi", "1Gi")
			mutate(c, pv, hc)
			v, tenant, host, _ := volumes(t, []runtime.Object{c, pv}, []runtime.Object{hc})
			if _, err := v.Sync(context.Background(), "shop/data-db-0"); err != nil {
				t.Fatal(err)
			}
			for _, a := range append(host.Actions(), tenant.Actions()...) {
				if a.GetVerb() != "get" && a.GetVerb() != "list" && a.GetVerb() != "watch" {
					t.Errorf("%s %s written: %v", a.GetVerb(), a.GetResource().Resource, a)
				}
			}
		})
	}
}

func TestNothingIsShownBeforeTheHostClaimIsBound(t *testing.T) {
	c, pv := boundClaim("1Gi", "1Gi")
	v, tenant, _, _ := volumes(t, []runtime.Object{c, pv}, []runtime.Object{hostClaimOf(c, "1Gi", "")})
	if _, err := v.Sync(context.Background(), "shop/data-db-0"); err != nil {
		t.Fatal(err)
	}
	if n := len(tenant.Actions()); n != 0 {
		t.Errorf("%d tenant writes before the host claim is bound: %v", n, tenant.Actions())
	}
}

func errForbidden(msg string) error {
	return apierrors.NewForbidden(corev1.Resource("persistentvolumeclaims"), "data", errors.New(msg))
}

func TestTheHostStateIsShownWhileAResizeIsRefused(t *testing.T) {
	c, pv := boundClaim("50Gi", "1Gi")
	v, tenant, host, _ := volumes(t, []runtime.Object{c, pv}, []runtime.Object{hostClaimOf(c, "2Gi", "2Gi")})
	host.PrependReactor("update", "persistentvolumeclaims", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errForbidden("exceeded quota: requests.storage")
	})
	if _, err := v.Sync(context.Background(), "shop/data-db-0"); err == nil {
		t.Fatal("Sync succeeded although the host refused the resize")
	}
	gotClaim, _ := tenant.CoreV1().PersistentVolumeClaims("shop").Get(context.Background(), "data-db-0", metav1.GetOptions{})
	if got := storageOf(gotClaim.Status.Capacity); got != "2Gi" {
		t.Errorf("tenant claim capacity = %s, want the host's 2Gi from an earlier resize", got)
	}
}
