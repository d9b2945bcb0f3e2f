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
	"k8s.io/client-go/tools/record"

	"github.com/nestdev/nest/internal/kindsync"
	"github.com/nestdev/nest/internal/syncer/contract"
)

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
