package kube

import (
	"net/netip"

	corev1 "k8s.io/api/core/v1"
)

// PodAddrs are the pod's addresses as its node reported them:
// status.podIPs (else status.podIP, which older writers set alone), those
// that parse and are specified, IPv4-mapped ones as IPv4; none before the
// pod has a sandbox.
func PodAddrs(pod *corev1.Pod) []netip.Addr {
	var out []netip.Addr
	add := func(s string) {
		if ip, err := netip.ParseAddr(s); err == nil && !ip.IsUnspecified() {
			out = append(out, ip.Unmap())
		}
	}
	for _, ip := range pod.Status.PodIPs {
		add(ip.IP)
	}
	if len(out) == 0 {
		add(pod.Status.PodIP)
	}
	return out
}
