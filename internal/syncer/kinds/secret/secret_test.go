package secret

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nestdev/nest/internal/syncer/contract"
)

func TestTranslateNeverCarriesAHostToken(t *testing.T) {
	s := Translate("alpha", "vc-alpha", &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "t", Namespace: "shop"}, Type: corev1.SecretTypeServiceAccountToken, Data: map[string][]byte{"token": []byte("x")}})
	if s.Type != corev1.SecretTypeOpaque || string(s.Data["token"]) != "x" {
		t.Errorf("host copy %+v", s)
	}
	if !contract.IsCopyOf(s, "alpha", "shop", "t") || s.Namespace != "vc-alpha" {
		t.Errorf("host copy %s/%s is not marked as the copy of shop/t: %+v", s.Namespace, s.Name, s.ObjectMeta)
	}
}
