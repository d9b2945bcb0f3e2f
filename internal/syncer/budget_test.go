package syncer

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	corelisters "k8s.io/client-go/listers/core/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"

	"github.com/nestdev/nest/internal/syncer/contract"
)

// bytesOf is data whose configMapSize is n: a one-letter key and n-1 bytes.
func bytesOf(n int) map[string]string {
	return map[string]string{"k": strings.Repeat("x", n-1)}
}

func TestDataBudget(t *testing.T) {
	existing := hostConfigMap(hostMeta("alpha", "existing"), bytesOf(600))
	grown := hostConfigMap(hostMeta("alpha", "settings"), bytesOf(300))
	token := &corev1.Secret{ObjectMeta: hostMeta("alpha", "token"), Data: map[string][]byte{tokenKeyPrefix + "0-0": make([]byte, 900)}}
	token.Labels[LabelTokenSecret] = "true"
	// 400 bytes of the tenant pod's annotations, for a downward API file.
	identity := &corev1.Secret{ObjectMeta: hostMeta("alpha", "identity"), Data: map[string][]byte{
		tokenKeyPrefix + "0-0": make([]byte, 900), identityAnnotations: make([]byte, 400-len(identityAnnotations))}}
	identity.Labels[LabelTokenSecret] = "true"
	otherCluster := hostConfigMap(hostMeta("beta", "big"), bytesOf(900))
	tests := []struct {
		name    string
		budget  int64
		host    []runtime.Object
		size    int
		wantErr string
	}{
		{name: "no bound", budget: 0, host: []runtime.Object{existing}, size: 10_000},
		{name: "within the budget", budget: 1000, host: []runtime.Object{existing}, size: 400},
		{name: "past the budget", budget: 1000, host: []runtime.Object{existing}, size: 401,
			wantErr: "object budget exceeded: the host copy needs 401 bytes, and the other host copies of this virtual cluster's ConfigMaps and Secrets already hold 600 of its 1000-byte object budget"},
		{name: "growing a copy counts only the growth", budget: 1000, host: []runtime.Object{existing, grown}, size: 400},
		{name: "growing a copy past the budget", budget: 1000, host: []runtime.Object{existing, grown}, size: 401, wantErr: "already hold 600 of"},
		{name: "shrinking a copy over the budget", budget: 500, host: []runtime.Object{existing, grown}, size: 200},
		{name: "tokens and other clusters' copies do not count", budget: 500, host: []runtime.Object{token, otherCluster}, size: 500},
		{name: "a token Secret's tenant identity counts", budget: 500, host: []runtime.Object{identity}, size: 101, wantErr: "already hold 400 of"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, host := newObjectSyncer(t, tt.budget, tt.host, tt.host, nil)
			err := o.applyConfigMap(context.Background(), tenantConfigMap("settings", bytesOf(tt.size)))
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("err = %v, want %q", err, tt.wantErr)
			}
			got, getErr := host.CoreV1().ConfigMaps(tr.HostNamespace).Get(context.Background(), contract.HostName("alpha", "shop", "settings"), metav1.GetOptions{})
			written := getErr == nil && configMapSize(got) == int64(tt.size)
			if written != (tt.wantErr == "") {
				t.Errorf("host copy written %v, want %v", written, tt.wantErr == "")
			}
		})
	}
}

// The informer cache lags behind the syncer's own writes: copies admitted a
// moment ago count before the cache shows them, and a failed write gives its
// bytes back.
func TestDataBudgetCountsWritesTheCacheHasNotSeen(t *testing.T) {
	o, host := newObjectSyncer(t, 1000, nil, nil, nil)
	ctx := context.Background()
	if err := o.applyConfigMap(ctx, tenantConfigMap("first", bytesOf(600))); err != nil {
		t.Fatal(err)
	}
	if err := o.applyConfigMap(ctx, tenantConfigMap("second", bytesOf(600))); err == nil || !strings.Contains(err.Error(), "object budget") {
		t.Fatalf("second copy = %v, want refused: the first one already holds 600 of 1000 bytes", err)
	}
	host.PrependReactor("create", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewInternalError(errors.New("etcd unavailable"))
	})
	if err := o.applyConfigMap(ctx, tenantConfigMap("third", bytesOf(300))); err == nil {
		t.Fatal("the failing create succeeded")
	}
	if _, err := o.budget.reserve(configMapKind, &metav1.ObjectMeta{Name: "fourth"}, 400); err != nil {
		t.Errorf("the failed write kept its 300 bytes: %v", err)
	}
}

// A refresh that the budget refuses tells the tenant on the object itself.
func TestRefusedRefreshIsAnEventOnTheTenantObject(t *testing.T) {
	cached := hostConfigMap(hostMeta("alpha", "settings"), bytesOf(100))
	o, _ := newObjectSyncer(t, 500, []runtime.Object{cached}, []runtime.Object{cached}, nil)
	o.tenantConfigMaps = corelisters.NewConfigMapLister(indexerOf(t, tenantConfigMap("settings", bytesOf(501))))
	if _, err := o.syncConfigMap(context.Background(), "shop/settings"); err == nil {
		t.Error("the refused refresh is not an error, so it would not be retried")
	}
	select {
	case ev := <-o.recorder.(*record.FakeRecorder).Events:
		if !strings.Contains(ev, "Warning HostCopyFailed") || !strings.Contains(ev, "object budget") {
			t.Errorf("event %q", ev)
		}
	default:
		t.Error("no event on the tenant ConfigMap")
	}
}
