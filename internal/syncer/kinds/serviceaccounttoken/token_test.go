package serviceaccounttoken

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestTokenRefreshTime(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ti := &Issuer{MaxAge: time.Hour, Now: func() time.Time { return now }}
	// A 3607 s request the API server extended to a year: refresh at 80% of
	// what the pod asked for.
	if got := ti.refreshAt(now.AddDate(1, 0, 0), 3607); got.Sub(now) != 3607*time.Second*8/10 {
		t.Errorf("refreshAt = %v after now", got.Sub(now))
	}
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{AnnotationRefreshAt: now.Add(time.Minute).Format(time.RFC3339)}}}
	if wait, due := ti.dueIn(s); due || wait != time.Minute {
		t.Errorf("dueIn = %v, %v a minute early, want 1m0s, false", wait, due)
	}
	now = now.Add(2 * time.Minute)
	if _, due := ti.dueIn(s); !due {
		t.Error("not due after its time")
	}
	if wait, due := ti.dueIn(&corev1.Secret{}); due || wait != 0 {
		t.Errorf("a Secret without tokens: dueIn = %v, %v, want never", wait, due)
	}
}
