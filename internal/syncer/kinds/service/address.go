package service

import corev1 "k8s.io/api/core/v1"

// Address is a tenant Service as a pod's environment describes it.
type Address struct {
	// Name is the Service's name in the pod's namespace.
	Name string
	// IP is where host pods reach the Service: the ClusterIP of its host
	// copy, else its tenant ClusterIP. Empty or "None" for a Service with no
	// ClusterIP, which has no variables.
	IP    string
	Ports []corev1.ServicePort
}

// AddressOf is the Address of a tenant Service whose host copy has
// the ClusterIP hostIP ("" when it has no host copy).
func AddressOf(svc *corev1.Service, hostIP string) Address {
	ip := svc.Spec.ClusterIP
	if hostIP != "" && ip != corev1.ClusterIPNone {
		ip = hostIP
	}
	return Address{Name: svc.Name, IP: ip, Ports: svc.Spec.Ports}
}
