package syncer

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The tenant sees its own generations observed: the host pod's count the
// host pod's changes.
func TestTenantStatusReportsTenantGenerations(t *testing.T) {
	tenant := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Generation: 3}, Status: corev1.PodStatus{QOSClass: corev1.PodQOSBurstable}}
	host := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Generation: 7}, Status: corev1.PodStatus{
		ObservedGeneration: 7, QOSClass: corev1.PodQOSBestEffort,
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, ObservedGeneration: 7}, {Type: corev1.PodScheduled, ObservedGeneration: 5}, {Type: corev1.PodInitialized}},
	}}
	s := TenantStatus(tenant, host)
	if s.ObservedGeneration != 3 || s.QOSClass != corev1.PodQOSBurstable {
		t.Errorf("observed generation %d, QoS %s; want 3 and the tenant's Burstable", s.ObservedGeneration, s.QOSClass)
	}
	for i, want := range []int64{3, 2, 0} {
		if got := s.Conditions[i].ObservedGeneration; got != want {
			t.Errorf("condition %s: observed generation %d, want %d", s.Conditions[i].Type, got, want)
		}
	}
}
