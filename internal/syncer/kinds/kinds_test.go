package kinds

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/nestdev/nest/internal/syncer/contract"
)

func TestQueueNamesCarryTheMember(t *testing.T) {
	if got := (&Context{}).QueueName("secrets"); got != "secrets" {
		t.Errorf("virtual-node queue = %q, want secrets", got)
	}
	if got := (&Context{Member: "gpu"}).QueueName("secrets"); got != "member-gpu-secrets" {
		t.Errorf("member queue = %q, want member-gpu-secrets", got)
	}
}

func TestOnEveryUnwrapsTombstonesAndSkipsOtherTypes(t *testing.T) {
	var got []string
	h := OnEvery(func(p *corev1.Pod) { got = append(got, p.Name) })
	h.OnAdd(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "added"}}, false)
	h.OnUpdate(nil, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "updated"}})
	h.OnDelete(cache.DeletedFinalStateUnknown{Obj: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "tombstone"}}})
	h.OnAdd(&corev1.Secret{}, false)
	if want := []string{"added", "updated", "tombstone"}; len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Errorf("calls = %v, want %v", got, want)
	}
}

func TestAddTenantKeyQueuesTheTenantObjectOfACopyOnly(t *testing.T) {
	q := (&Context{}).NewQueue("test", 1, func(context.Context, string) (time.Duration, error) { return 0, nil }, func() []string { return nil })
	defer q.Queue.ShutDown()
	AddTenantKey(q, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Annotations: contract.HostAnnotations("apps", "settings", "u1")}})
	AddTenantKey(q, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "not-a-copy"}})
	if q.Queue.Len() != 1 {
		t.Fatalf("queue holds %d keys, want 1", q.Queue.Len())
	}
	if key, _ := q.Queue.Get(); key != "apps/settings" {
		t.Errorf("key = %q, want apps/settings", key)
	}
}

func TestModeNames(t *testing.T) {
	for m, want := range map[Mode]string{VirtualNode: "virtual-node", Member: "member", VirtualNode | Member: "virtual-node|member", 0: "none"} {
		if got := m.String(); got != want {
			t.Errorf("Mode(%d) = %q, want %q", m, got, want)
		}
	}
}
