package syncer

import (
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
)

// Host ports on the virtual node: a tenant pod may ask for them, as on any
// node, and the virtual node admits it as a kubelet does, refusing a pod
// whose host port is already taken on that node. The host pod never gets
// one: nothing is opened on a host node (Translator.TranslatePod clears
// hostPort and hostIP).

// HostPort is one host port a pod asks for, with the defaults the kubelet
// applies: protocol TCP, and "0.0.0.0" (every address) when hostIP is empty.
type HostPort struct {
	Protocol corev1.Protocol
	IP       string
	Port     int32
}

// String is "TCP/0.0.0.0:8080", as the scheduler words a port.
func (h HostPort) String() string {
	return fmt.Sprintf("%s/%s:%d", h.Protocol, h.IP, h.Port)
}

// conflicts reports whether h and o cannot both be bound on one node, as the
// scheduler's NodePorts filter and the kubelet decide: the same protocol and
// port, and the same address or either on every address.
func (h HostPort) conflicts(o HostPort) bool {
	if h.Protocol != o.Protocol || h.Port != o.Port {
		return false
	}
	return h.IP == o.IP || isAnyAddress(h.IP) || isAnyAddress(o.IP)
}

// isAnyAddress reports whether ip is the unspecified address of its family.
func isAnyAddress(ip string) bool {
	a, err := netip.ParseAddr(ip)
	return err == nil && a.IsUnspecified()
}

// HostPorts lists the host ports of a pod's containers and init containers
// (restartable ones included), with defaults filled in.
func HostPorts(spec *corev1.PodSpec) []HostPort {
	var out []HostPort
	for _, list := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for _, c := range list {
			for _, p := range c.Ports {
				if p.HostPort <= 0 {
					continue
				}
				h := HostPort{Protocol: p.Protocol, IP: p.HostIP, Port: p.HostPort}
				if h.Protocol == "" {
					h.Protocol = corev1.ProtocolTCP
				}
				if h.IP == "" {
					h.IP = "0.0.0.0"
				}
				out = append(out, h)
			}
		}
	}
	return out
}

// checkHostPorts rejects a pod that asks for a host port one of others (the
// pods admitted to the same node) already holds, with the kubelet's reason.
func checkHostPorts(pod *corev1.Pod, others []*corev1.Pod) error {
	want := HostPorts(&pod.Spec)
	if len(want) == 0 {
		return nil
	}
	for _, o := range others {
		for _, taken := range HostPorts(&o.Spec) {
			for _, w := range want {
				if w.conflicts(taken) {
					return &Rejection{Reason: "NodePorts", Message: fmt.Sprintf(
						"Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports (%s is held by pod %s)", w, o.Name)}
				}
			}
		}
	}
	return nil
}

// clearHostPorts removes host ports from a host container: the host pod
// listens on its own pod IP only.
func clearHostPorts(c *corev1.Container) {
	for i := range c.Ports {
		c.Ports[i].HostPort = 0
		c.Ports[i].HostIP = ""
	}
}

// Rejection is a pod the virtual node does not admit, as a kubelet rejects
// one at admission: the tenant pod ends Failed with Reason and the message
// "Pod was rejected: " + Message, and its controller replaces it. Reasons
// are the kubelet's: OutOfcpu, OutOfmemory, OutOfpods, OutOf<resource>,
// NodePorts.
type Rejection struct {
	Reason  string
	Message string
}

// Error is the message as the tenant pod shows it.
func (r *Rejection) Error() string { return "Pod was rejected: " + r.Message }
