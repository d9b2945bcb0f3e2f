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
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/nestdev/nest/internal/kindsync"
	"github.com/nestdev/nest/internal/syncer/contract"
)

// newObjectSyncer is an objectSyncer over a fake host API server holding
// live, whose informer cache holds cached, and a tenant cluster holding
// tenant.
func newObjectSyncer(t *testing.T, budget int64, live, cached, tenant []runtime.Object) (*objectSyncer, *fake.Clientset) {
	t.Helper()
	host := fake.NewClientset(live...)
	hostCMs, hostSecrets := splitByKind(cached)
	tenantCMs, tenantSecrets := splitByKind(tenant)
	cms := corelisters.NewConfigMapLister(indexerOf(t, hostCMs...)).ConfigMaps(tr.HostNamespace)
	secrets := corelisters.NewSecretLister(indexerOf(t, hostSecrets...)).Secrets(tr.HostNamespace)
	return &objectSyncer{
		tr: tr, host: host, recorder: record.NewFakeRecorder(10),
		budget:           newDataBudget(budget, tr.VirtualCluster, cms, secrets),
		tenantConfigMaps: corelisters.NewConfigMapLister(indexerOf(t, tenantCMs...)), tenantSecrets: corelisters.NewSecretLister(indexerOf(t, tenantSecrets...)),
		hostConfigMaps: cms, hostSecrets: secrets,
		pods: cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{referencesIndex: tr.podReferences}),
	}, host
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

func hostConfigMap(meta metav1.ObjectMeta, data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: meta, Data: data}
}

func TestHostCopyOnlyWritesItsOwnCopy(t *testing.T) {
	old, current := map[string]string{"color": "red"}, map[string]string{"color": "blue"}
	ours := hostConfigMap(hostMeta("alpha", "settings"), old)
	oursCurrent := hostConfigMap(hostMeta("alpha", "settings"), current)
	otherObject := hostConfigMap(hostMeta("alpha", "settings"), old)
	otherObject.Annotations[contract.AnnotationTenantName] = "other"
	otherCluster := hostConfigMap(hostMeta("beta", "settings"), old)
	otherCluster.Name = ours.Name
	foreign := hostConfigMap(foreignMeta("settings"), old)
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
			o, host := newObjectSyncer(t, 0, tt.live, tt.cached, nil)
			err := o.applyConfigMap(context.Background(), tenantConfigMap("settings", current))
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if err != nil && !strings.Contains(err.Error(), "host ConfigMap vc-alpha/"+ours.Name+" already exists and is not the copy of shop/settings") {
				t.Errorf("error %q does not name the host object", err)
			}
			got, getErr := host.CoreV1().ConfigMaps(tr.HostNamespace).Get(context.Background(), ours.Name, metav1.GetOptions{})
			if getErr != nil || got.Data["color"] != tt.wantData["color"] {
				t.Errorf("host object %+v (%v): want data %v", got, getErr, tt.wantData)
			}
			if writes := countActions(host, "create", "update"); writes != tt.wantWrites {
				t.Errorf("%d creates and updates, want %d", writes, tt.wantWrites)
			}
		})
	}
}

func countActions(c *fake.Clientset, verbs ...string) int {
	n := 0
	for _, a := range c.Actions() {
		for _, v := range verbs {
			if a.GetVerb() == v {
				n++
			}
		}
	}
	return n
}

func TestHostCopyLookupFailure(t *testing.T) {
	broken := errors.New("cache broken")
	h := hostCopy[*corev1.ConfigMap]{
		kind: "ConfigMap", client: fake.NewClientset().CoreV1().ConfigMaps(tr.HostNamespace),
		cached: func(string) (*corev1.ConfigMap, error) { return nil, broken },
	}
	if err := h.apply(context.Background(), tr.HostConfigMap(tenantConfigMap("x", nil))); !errors.Is(err, broken) {
		t.Errorf("apply = %v, want the lookup error", err)
	}
}

func TestTenantObjectDeletedOnlyDeletesItsOwnCopy(t *testing.T) {
	for _, tt := range []struct {
		name     string
		live     runtime.Object
		wantGone bool
	}{
		{name: "our copy", live: hostConfigMap(hostMeta("alpha", "settings"), nil), wantGone: true},
		{name: "a foreign object under the name", live: hostConfigMap(foreignMeta("settings"), nil)},
		{name: "another virtual cluster's copy", live: func() runtime.Object {
			cm := hostConfigMap(hostMeta("beta", "settings"), nil)
			cm.Name = contract.HostName("alpha", "shop", "settings")
			return cm
		}()},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o, host := newObjectSyncer(t, 0, []runtime.Object{tt.live}, nil, nil)
			o.hostConfigMaps = corelisters.NewConfigMapLister(indexerOf(t, tt.live)).ConfigMaps(tr.HostNamespace)
			_, _ = o.syncConfigMap(context.Background(), "shop/settings")
			_, err := host.CoreV1().ConfigMaps(tr.HostNamespace).Get(context.Background(), contract.HostName("alpha", "shop", "settings"), metav1.GetOptions{})
			if gone := apierrors.IsNotFound(err); gone != tt.wantGone {
				t.Errorf("deleted %v, want %v (get: %v)", gone, tt.wantGone, err)
			}
		})
	}
}

func TestTokenSecretIsNotWrittenOverAForeignSecret(t *testing.T) {
	hostPod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: contract.HostName("alpha", "shop", "web"), Namespace: tr.HostNamespace, UID: "host-uid"}}
	foreign := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: contract.TokenSecretName(hostPod.Name), Namespace: tr.HostNamespace}, Data: map[string][]byte{"k": []byte("host")}}
	ours := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: foreign.Name, Namespace: tr.HostNamespace, Labels: contract.HostLabels("alpha", "shop"), Annotations: contract.HostAnnotations("shop", "web", "old")}}
	for _, tt := range []struct {
		name     string
		existing *corev1.Secret
		wantErr  bool
	}{
		{name: "none yet", wantErr: false},
		{name: "the pod's earlier token Secret", existing: ours},
		{name: "a foreign Secret under the name", existing: foreign, wantErr: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			host := fake.NewClientset()
			if tt.existing != nil {
				host = fake.NewClientset(tt.existing)
			}
			p := &podProvider{tr: tr, host: host}
			want := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: foreign.Name, Namespace: tr.HostNamespace, Labels: contract.HostLabels("alpha", "shop"), Annotations: contract.HostAnnotations("shop", "web", "new")},
				Data: map[string][]byte{"k": []byte("token")}}
			err := p.writeTokenSecret(context.Background(), want, hostPod)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			got, _ := host.CoreV1().Secrets(tr.HostNamespace).Get(context.Background(), foreign.Name, metav1.GetOptions{})
			if wantData := map[bool]string{true: "host", false: "token"}[tt.wantErr]; string(got.Data["k"]) != wantData {
				t.Errorf("token Secret data %q, want %q", got.Data["k"], wantData)
			}
		})
	}
}

func TestServiceCopyFailureIsAnEventOnTheTenantService(t *testing.T) {
	host := fake.NewClientset()
	host.PrependReactor("create", "services", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(corev1.Resource("services"), "x", errors.New("exceeded quota: tenant-share, requested: services=1, used: services=20, limited: services=20"))
	})
	recorder := record.NewFakeRecorder(10)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop"}, Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"}}}
	s := newTestServiceSyncer(t, host, recorder, svc)
	if _, err := s.syncService(context.Background(), "shop/web"); err == nil {
		t.Error("the refused copy is not an error, so it would not be retried")
	}
	select {
	case ev := <-recorder.Events:
		if !strings.HasPrefix(ev, "Warning HostServiceFailed") || !strings.Contains(ev, "exceeded quota") {
			t.Errorf("event %q: want a warning with the host's reason", ev)
		}
	default:
		t.Error("no event on the tenant Service")
	}
}

func TestServiceCopyIsNotWrittenOverAForeignService(t *testing.T) {
	foreign := &corev1.Service{ObjectMeta: foreignMeta("web"), Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "host-thing"}}}
	host := fake.NewClientset(foreign)
	recorder := record.NewFakeRecorder(10)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop"}, Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"}}}
	s := newTestServiceSyncer(t, host, recorder, svc)
	if _, err := s.syncService(context.Background(), "shop/web"); !kindsync.IsTerminal(err) {
		t.Errorf("sync = %v, want a terminal error: retrying cannot free the name", err)
	}
	s.tenantServices = corelisters.NewServiceLister(indexerOf(t))
	s.hostServices = corelisters.NewServiceLister(indexerOf(t, foreign)).Services(tr.HostNamespace)
	_, _ = s.syncService(context.Background(), "shop/web")
	got, err := host.CoreV1().Services(tr.HostNamespace).Get(context.Background(), foreign.Name, metav1.GetOptions{})
	if err != nil || got.Spec.Selector["app"] != "host-thing" {
		t.Errorf("foreign Service %+v (%v) was changed or deleted", got, err)
	}
	select {
	case ev := <-recorder.Events:
		if !strings.Contains(ev, "is not the copy of shop/web") {
			t.Errorf("event %q does not say the host name is taken", ev)
		}
	default:
		t.Error("no event on the tenant Service")
	}
}

// newTestServiceSyncer is a serviceSyncer over host whose tenant cluster
// holds services and whose host informer cache is empty.
func newTestServiceSyncer(t *testing.T, host *fake.Clientset, recorder record.EventRecorder, services ...runtime.Object) *serviceSyncer {
	return newServiceSyncer(&serviceSyncer{
		tr: tr, host: host, recorder: recorder,
		tenantServices: corelisters.NewServiceLister(indexerOf(t, services...)),
		hostServices:   corelisters.NewServiceLister(indexerOf(t)).Services(tr.HostNamespace),
	})
}
