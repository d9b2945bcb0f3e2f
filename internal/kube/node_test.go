package kube

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestNodeReady(t *testing.T) {
	cond := func(typ corev1.NodeConditionType, status corev1.ConditionStatus) corev1.NodeCondition {
		return corev1.NodeCondition{Type: typ, Status: status}
	}
	tests := []struct {
		name       string
		conditions []corev1.NodeCondition
		want       bool
	}{
		{"no conditions", nil, false},
		{"no Ready condition", []corev1.NodeCondition{cond(corev1.NodeMemoryPressure, corev1.ConditionFalse)}, false},
		{"Ready False", []corev1.NodeCondition{cond(corev1.NodeReady, corev1.ConditionFalse)}, false},
		{"Ready Unknown", []corev1.NodeCondition{cond(corev1.NodeReady, corev1.ConditionUnknown)}, false},
		{"Ready True", []corev1.NodeCondition{cond(corev1.NodeReady, corev1.ConditionTrue)}, true},
		{"Ready True among others", []corev1.NodeCondition{
			cond(corev1.NodeMemoryPressure, corev1.ConditionFalse), cond(corev1.NodeReady, corev1.ConditionTrue), cond(corev1.NodeDiskPressure, corev1.ConditionTrue),
		}, true},
		{"another condition True is not Ready", []corev1.NodeCondition{cond(corev1.NodeDiskPressure, corev1.ConditionTrue)}, false},
		{"only the first Ready condition counts", []corev1.NodeCondition{cond(corev1.NodeReady, corev1.ConditionFalse), cond(corev1.NodeReady, corev1.ConditionTrue)}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			node := &corev1.Node{Status: corev1.NodeStatus{Conditions: tt.conditions}}
			if got := NodeReady(node); got != tt.want {
				t.Errorf("NodeReady(%v) = %v, want %v", tt.conditions, got, tt.want)
			}
		})
	}
	unschedulable := &corev1.Node{Spec: corev1.NodeSpec{Unschedulable: true}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{cond(corev1.NodeReady, corev1.ConditionTrue)}}}
	if !NodeReady(unschedulable) {
		t.Error("NodeReady of a cordoned Ready node = false: cordoning is the caller's to check")
	}
}
