package syncer

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/nestdev/nest/internal/syncer/contract"
)

// A tenant cannot keep a host pod running after its deletion for longer
// than the virtual node's bound, and is told when its pod asks for more.
func TestTranslatePodCutsTheGracePeriod(t *testing.T) {
	year := int64(365 * 24 * 3600)
	for _, tt := range []struct {
		name    string
		asked   *int64
		want    *int64
		warning bool
	}{
		{name: "unset stays unset (the API's 30 s)"},
		{name: "within the bound", asked: ptr.To[int64](30), want: ptr.To[int64](30)},
		{name: "zero", asked: ptr.To[int64](0), want: ptr.To[int64](0)},
		{name: "a year", asked: &year, want: ptr.To(contract.DefaultMaxGracePeriodSeconds), warning: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := tenantPod()
			p.Spec.TerminationGracePeriodSeconds = tt.asked
			pt, err := tr.TranslatePod(p, defaultMetadata, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := pt.Pod.Spec.TerminationGracePeriodSeconds; !ptr.Equal(got, tt.want) {
				t.Errorf("host terminationGracePeriodSeconds %v, want %v", ptr.Deref(got, -1), ptr.Deref(tt.want, -1))
			}
			warned := len(pt.Warnings) == 1 && pt.Warnings[0].Reason == ReasonGracePeriodCut && strings.Contains(pt.Warnings[0].Message, "300")
			if warned != tt.warning {
				t.Errorf("warnings %+v, want a GracePeriodCut warning naming 300: %v", pt.Warnings, tt.warning)
			}
		})
	}
}

// hostDeleteGrace is the grace period of the first host pod deletion the
// client saw, -1 for none and -2 when there was no deletion.
func hostDeleteGrace(client *fake.Clientset) int64 {
	for _, a := range client.Actions() {
		if d, ok := a.(k8stesting.DeleteActionImpl); ok && d.GetResource().Resource == "pods" {
			return ptr.Deref(d.GetDeleteOptions().GracePeriodSeconds, -1)
		}
	}
	return -2
}

// A deletion's grace period is cut to the bound too; a tenant pod that is
// gone from the tenant API (a force delete) ends its host pod at once.
func TestDeletePodGracePeriod(t *testing.T) {
	deleting := simplePod("web", "100m")
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	deleting.DeletionGracePeriodSeconds = ptr.To[int64](365 * 24 * 3600)
	zeroGrace := deleting.DeepCopy()
	zeroGrace.DeletionGracePeriodSeconds = ptr.To[int64](0)
	for _, tt := range []struct {
		name   string
		tenant []runtime.Object
		want   int64
	}{
		{name: "graceful, a year asked", tenant: []runtime.Object{deleting}, want: contract.DefaultMaxGracePeriodSeconds},
		{name: "force-deleted: gone from the tenant API", want: ForcedGracePeriodSeconds},
		{name: "a zero grace period while still listed", tenant: []runtime.Object{zeroGrace}, want: ForcedGracePeriodSeconds},
	} {
		t.Run(tt.name, func(t *testing.T) {
			host := hostPodOf(t, deleting)
			p, client := newProvider(t, nil, []runtime.Object{host}, tt.tenant...)
			pod := deleting
			if len(tt.tenant) > 0 {
				pod = tt.tenant[0].(*corev1.Pod)
			}
			if err := p.DeletePod(context.Background(), pod); err != nil {
				t.Fatal(err)
			}
			if got := hostDeleteGrace(client); got != tt.want {
				t.Errorf("host pod deleted with grace period %d, want %d", got, tt.want)
			}
		})
	}
}

// A host pod still terminating with a long grace period after its tenant
// pod was force-deleted is deleted again with the forced grace period; one
// already ending that fast is left alone.
func TestOrphanSyncerShortensTheDeletionOfAForceDeletedPod(t *testing.T) {
	for _, tt := range []struct {
		name  string
		grace int64
		want  int64
	}{
		{name: "terminating for 300 s", grace: 300, want: ForcedGracePeriodSeconds},
		{name: "already ending", grace: ForcedGracePeriodSeconds, want: -2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			terminating := hostPodFor("gone", "uid-9")
			terminating.DeletionTimestamp = &metav1.Time{Time: time.Now()}
			terminating.DeletionGracePeriodSeconds = ptr.To(tt.grace)
			terminating.Finalizers = []string{"example.com/keep"}
			tenant := fake.NewClientset()
			host := fake.NewClientset(terminating)
			s := runKindSyncers(t, tenant, host)
			s.orphans.Add(terminating.Name)
			drain(t, s.orphans)
			if got := hostDeleteGrace(host); got != tt.want {
				t.Errorf("host pod deleted with grace period %d, want %d", got, tt.want)
			}
		})
	}
}

// A tenant claim in a namespace named node-disk has the host name of a
// virtual node's disk: it is never taken as the disk, nor deleted as one.
func TestATenantClaimIsNeverTheNodeDisk(t *testing.T) {
	name := contract.NodeDiskClaim(tr.VirtualCluster, tr.NodeName)
	squatter := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: tr.HostNamespace,
		Labels: contract.HostLabels(tr.VirtualCluster, "node-disk"), Annotations: contract.HostAnnotations("node-disk", tr.NodeName, "uid-x")}}
	p, client := newProvider(t, nil, []runtime.Object{squatter})
	if err := p.ensureNodeDisk(context.Background(), name); err == nil || !strings.Contains(err.Error(), "node-disk/"+tr.NodeName) {
		t.Errorf("ensureNodeDisk = %v, want a refusal naming the tenant claim", err)
	}
	if err := p.deleteNodeDisk(context.Background(), tr.NodeName); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().PersistentVolumeClaims(tr.HostNamespace).Get(context.Background(), name, metav1.GetOptions{}); err != nil {
		t.Errorf("the tenant's claim was deleted as a disk: %v", err)
	}
}
