package syncer

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

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
