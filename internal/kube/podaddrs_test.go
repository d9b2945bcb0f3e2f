package kube

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestPodAddrsReadsBothFamiliesAndFallsBackToPodIP(t *testing.T) {
	p := &corev1.Pod{Status: corev1.PodStatus{PodIP: "10.1.0.5", PodIPs: []corev1.PodIP{{IP: "10.1.0.5"}, {IP: "fd00::5"}, {IP: "garbage"}}}}
	if got := PodAddrs(p); len(got) != 2 || got[0].String() != "10.1.0.5" || got[1].String() != "fd00::5" {
		t.Errorf("PodAddrs = %v, want 10.1.0.5 and fd00::5", got)
	}
	p.Status.PodIPs = nil
	if got := PodAddrs(p); len(got) != 1 || got[0].String() != "10.1.0.5" {
		t.Errorf("PodAddrs without podIPs = %v, want 10.1.0.5", got)
	}
	if got := PodAddrs(&corev1.Pod{}); len(got) != 0 {
		t.Errorf("PodAddrs of a pod without addresses = %v", got)
	}
}
