package configmap

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"

	"github.com/nestdev/nest/internal/syncer/contract"
	"github.com/nestdev/nest/internal/syncer/kinds/hostcopy"
	"github.com/nestdev/nest/internal/testutil"
)

const hostNamespace = "vc-alpha"

// newKind is the ConfigMap kind of virtual cluster alpha over a fake host
// API server holding live, whose informer cache holds cached, and a tenant
// cluster holding tenant, within a budget of budget bytes. Every tenant
// ConfigMap counts as used by a pod.
func newKind(t *testing.T, budget int64, live, cached, tenant []runtime.Object) (*hostcopy.Kind[*corev1.ConfigMap], *fake.Clientset) {
	t.Helper()
	host := fake.NewClientset(live...)
	hostCMs, hostSecrets := splitByKind(cached)
	cms := corelisters.NewConfigMapLister(testutil.Indexer(t, hostCMs...)).ConfigMaps(hostNamespace)
	secrets := corelisters.NewSecretLister(testutil.Indexer(t, hostSecrets...)).Secrets(hostNamespace)
	return New(Config{
		Target: hostcopy.Target{
			VirtualCluster: "alpha", HostNamespace: hostNamespace, Host: host,
			Budget:     hostcopy.NewBudget(budget, "alpha", cms, secrets),
			Referenced: func(string, string) bool { return true },
			Recorder:   record.NewFakeRecorder(10),
		},
		HostCache: cms, Tenant: corelisters.NewConfigMapLister(testutil.Indexer(t, tenant...)),
	}), host
}

// splitByKind separates ConfigMaps from Secrets: an informer cache holds one kind.
func splitByKind(objs []runtime.Object) (configMaps, secrets []runtime.Object) {
	for _, o := range objs {
		if _, ok := o.(*corev1.Secret); ok {
			secrets = append(secrets, o)
			continue
		}
		configMaps = append(configMaps, o)
	}
	return configMaps, secrets
}

func tenantConfigMap(name string, data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop", UID: types.UID("uid-" + name)}, Data: data}
}

func hostConfigMap(meta metav1.ObjectMeta, data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: meta, Data: data}
}

// bytesOf is data whose configMapSize is n: a one-letter key and n-1 bytes.
func bytesOf(n int) map[string]string {
	return map[string]string{"k": strings.Repeat("x", n-1)}
}

func TestDataBudget(t *testing.T) {
	existing := hostConfigMap(testutil.CopyMeta(hostNamespace, "alpha", "existing"), bytesOf(600))
	grown := hostConfigMap(testutil.CopyMeta(hostNamespace, "alpha", "settings"), bytesOf(300))
	token := &corev1.Secret{ObjectMeta: testutil.CopyMeta(hostNamespace, "alpha", "token"), Data: map[string][]byte{contract.TokenKeyPrefix + "0-0": make([]byte, 900)}}
	token.Labels[contract.LabelTokenSecret] = "true"
	// 400 bytes of the tenant pod's annotations, for a downward API file.
	identity := &corev1.Secret{ObjectMeta: testutil.CopyMeta(hostNamespace, "alpha", "identity"), Data: map[string][]byte{
		contract.TokenKeyPrefix + "0-0": make([]byte, 900), "pod-annotations": make([]byte, 400-len("pod-annotations"))}}
	identity.Labels[contract.LabelTokenSecret] = "true"
	otherCluster := hostConfigMap(testutil.CopyMeta(hostNamespace, "beta", "big"), bytesOf(900))
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
			wantErr: "object budget exceeded: the copy needs 401 bytes, and the other copies of this VirtualCluster's ConfigMaps and Secrets already hold 600 of its 1000-byte object budget (spec.virtualNode.objectBudget.dataBytes)"},
		{name: "growing a copy counts only the growth", budget: 1000, host: []runtime.Object{existing, grown}, size: 400},
		{name: "growing a copy past the budget", budget: 1000, host: []runtime.Object{existing, grown}, size: 401, wantErr: "already hold 600 of"},
		{name: "shrinking a copy over the budget", budget: 500, host: []runtime.Object{existing, grown}, size: 200},
		{name: "tokens and other clusters' copies do not count", budget: 500, host: []runtime.Object{token, otherCluster}, size: 500},
		{name: "a token Secret's tenant identity counts", budget: 500, host: []runtime.Object{identity}, size: 101, wantErr: "already hold 400 of"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k, host := newKind(t, tt.budget, tt.host, tt.host, nil)
			err := k.Apply(context.Background(), tenantConfigMap("settings", bytesOf(tt.size)))
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("err = %v, want %q", err, tt.wantErr)
			}
			got, getErr := host.CoreV1().ConfigMaps(hostNamespace).Get(context.Background(), contract.HostName("alpha", "shop", "settings"), metav1.GetOptions{})
			written := getErr == nil && hostcopy.ConfigMapSize(got) == int64(tt.size)
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
	k, host := newKind(t, 1000, nil, nil, nil)
	ctx := context.Background()
	if err := k.Apply(ctx, tenantConfigMap("first", bytesOf(600))); err != nil {
		t.Fatal(err)
	}
	if err := k.Apply(ctx, tenantConfigMap("second", bytesOf(600))); err == nil || !strings.Contains(err.Error(), "object budget") {
		t.Fatalf("second copy = %v, want refused: the first one already holds 600 of 1000 bytes", err)
	}
	host.PrependReactor("create", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewInternalError(errors.New("etcd unavailable"))
	})
	if err := k.Apply(ctx, tenantConfigMap("third", bytesOf(300))); err == nil {
		t.Fatal("the failing create succeeded")
	}
	if _, err := k.Budget.Reserve(hostcopy.KindConfigMap, &metav1.ObjectMeta{Name: "fourth"}, 400); err != nil {
		t.Errorf("the failed write kept its 300 bytes: %v", err)
	}
}

// A refresh that the budget refuses tells the tenant on the object itself.
func TestRefusedRefreshIsAnEventOnTheTenantObject(t *testing.T) {
	cached := hostConfigMap(testutil.CopyMeta(hostNamespace, "alpha", "settings"), bytesOf(100))
	k, _ := newKind(t, 500, []runtime.Object{cached}, []runtime.Object{cached}, nil)
	k.Tenant = func(namespace, name string) (*corev1.ConfigMap, error) {
		return corelisters.NewConfigMapLister(testutil.Indexer(t, tenantConfigMap("settings", bytesOf(501)))).ConfigMaps(namespace).Get(name)
	}
	if _, err := k.Sync(context.Background(), "shop/settings"); err == nil {
		t.Error("the refused refresh is not an error, so it would not be retried")
	}
	select {
	case ev := <-k.Recorder.(*record.FakeRecorder).Events:
		if !strings.Contains(ev, "Warning HostCopyFailed") || !strings.Contains(ev, "object budget") || strings.Contains(ev, hostNamespace) {
			t.Errorf("event %q: want the budget named, and not the host namespace", ev)
		}
	default:
		t.Error("no event on the tenant ConfigMap")
	}
}

func TestHostCopyOnlyWritesItsOwnCopy(t *testing.T) {
	old, current := map[string]string{"color": "red"}, map[string]string{"color": "blue"}
	ours := hostConfigMap(testutil.CopyMeta(hostNamespace, "alpha", "settings"), old)
	oursCurrent := hostConfigMap(testutil.CopyMeta(hostNamespace, "alpha", "settings"), current)
	otherObject := hostConfigMap(testutil.CopyMeta(hostNamespace, "alpha", "settings"), old)
	otherObject.Annotations[contract.AnnotationTenantName] = "other"
	otherCluster := hostConfigMap(testutil.CopyMeta(hostNamespace, "beta", "settings"), old)
	otherCluster.Name = ours.Name
	foreign := hostConfigMap(testutil.ForeignMeta("alpha", hostNamespace, "settings"), old)
	tests := []struct {
		name         string
		live, cached []runtime.Object
		wantErr      bool
		wantData     map[string]string
		wantWrites   int
	}{
		{name: "missing: created", wantData: current, wantWrites: 1},
		{name: "cached and current: left alone", live: []runtime.Object{oursCurrent}, cached: []runtime.Object{oursCurrent}, wantData: current},
		{name: "cached and stale: updated", live: []runtime.Object{ours}, cached: []runtime.Object{ours}, wantData: current, wantWrites: 1},
		{name: "made meanwhile by another worker: updated", live: []runtime.Object{ours}, wantData: current, wantWrites: 2},
		{name: "an unlabelled host object under the name", live: []runtime.Object{foreign}, wantErr: true, wantData: old, wantWrites: 1},
		{name: "the copy of another tenant object", live: []runtime.Object{otherObject}, cached: []runtime.Object{otherObject}, wantErr: true, wantData: old},
		{name: "another virtual cluster's copy", live: []runtime.Object{otherCluster}, wantErr: true, wantData: old, wantWrites: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k, host := newKind(t, 0, tt.live, tt.cached, nil)
			err := k.Apply(context.Background(), tenantConfigMap("settings", current))
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if err != nil && !strings.Contains(err.Error(), "host ConfigMap vc-alpha/"+ours.Name+" already exists and is not the copy of shop/settings") {
				t.Errorf("error %q does not name the host object", err)
			}
			got, getErr := host.CoreV1().ConfigMaps(hostNamespace).Get(context.Background(), ours.Name, metav1.GetOptions{})
			if getErr != nil || got.Data["color"] != tt.wantData["color"] {
				t.Errorf("host object %+v (%v): want data %v", got, getErr, tt.wantData)
			}
			if writes := testutil.CountActions(host.Actions(), "create", "update"); writes != tt.wantWrites {
				t.Errorf("%d creates and updates, want %d", writes, tt.wantWrites)
			}
		})
	}
}

func TestHostCopyLookupFailure(t *testing.T) {
	broken := errors.New("cache broken")
	h := hostcopy.Copies[*corev1.ConfigMap]{
		Kind: "ConfigMap", Client: fake.NewClientset().CoreV1().ConfigMaps(hostNamespace),
		Cached: func(string) (*corev1.ConfigMap, error) { return nil, broken },
	}
	if err := h.Apply(context.Background(), Translate("alpha", hostNamespace, tenantConfigMap("x", nil))); !errors.Is(err, broken) {
		t.Errorf("apply = %v, want the lookup error", err)
	}
}

func TestTenantObjectDeletedOnlyDeletesItsOwnCopy(t *testing.T) {
	for _, tt := range []struct {
		name     string
		live     runtime.Object
		wantGone bool
	}{
		{name: "our copy", live: hostConfigMap(testutil.CopyMeta(hostNamespace, "alpha", "settings"), nil), wantGone: true},
		{name: "a foreign object under the name", live: hostConfigMap(testutil.ForeignMeta("alpha", hostNamespace, "settings"), nil)},
		{name: "another virtual cluster's copy", live: func() runtime.Object {
			cm := hostConfigMap(testutil.CopyMeta(hostNamespace, "beta", "settings"), nil)
			cm.Name = contract.HostName("alpha", "shop", "settings")
			return cm
		}()},
	} {
		t.Run(tt.name, func(t *testing.T) {
			k, host := newKind(t, 0, []runtime.Object{tt.live}, nil, nil)
			k.Copies.Cached = corelisters.NewConfigMapLister(testutil.Indexer(t, tt.live)).ConfigMaps(hostNamespace).Get
			_, _ = k.Sync(context.Background(), "shop/settings")
			_, err := host.CoreV1().ConfigMaps(hostNamespace).Get(context.Background(), contract.HostName("alpha", "shop", "settings"), metav1.GetOptions{})
			if gone := apierrors.IsNotFound(err); gone != tt.wantGone {
				t.Errorf("deleted %v, want %v (get: %v)", gone, tt.wantGone, err)
			}
		})
	}
}
