package kube

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// StampCondition keeps the transition time of a condition whose status
// stays, takes now for one that changes or is new, and says unchanged only
// when status, reason, message and generation all match.
func TestStampCondition(t *testing.T) {
	then, now := time.Unix(1000, 0), time.Unix(2000, 0)
	existing := []metav1.Condition{{Type: "X", Status: metav1.ConditionTrue, Reason: "R", Message: "m", ObservedGeneration: 2, LastTransitionTime: metav1.NewTime(then)}}
	for _, tc := range []struct {
		c         metav1.Condition
		unchanged bool
		at        time.Time
	}{
		{metav1.Condition{Type: "X", Status: metav1.ConditionTrue, Reason: "R", Message: "m", ObservedGeneration: 2}, true, then},
		{metav1.Condition{Type: "X", Status: metav1.ConditionTrue, Reason: "R", Message: "other", ObservedGeneration: 2}, false, then},
		{metav1.Condition{Type: "X", Status: metav1.ConditionTrue, Reason: "R", Message: "m", ObservedGeneration: 3}, false, then},
		{metav1.Condition{Type: "X", Status: metav1.ConditionFalse, Reason: "R", Message: "m", ObservedGeneration: 2}, false, now},
		{metav1.Condition{Type: "Y", Status: metav1.ConditionTrue}, false, now},
	} {
		c := tc.c
		if got := StampCondition(existing, &c, now); got != tc.unchanged || !c.LastTransitionTime.Time.Equal(tc.at) {
			t.Errorf("StampCondition(%+v) = %v at %s, want %v at %s", tc.c, got, c.LastTransitionTime, tc.unchanged, tc.at)
		}
	}
}
