// Package devcluster runs a real multi-node Kubernetes cluster on one Linux
// machine: the local host cluster behind `nest dev` and Nest's end-to-end tests.
//
// Each node lives in a network namespace of its own, joined to the machine by a
// veth pair on a bridge, and runs its own containerd, kubelet and kube-proxy with
// a CNI bridge on a per-node pod CIDR. The first node also runs etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler and the local-volume
// provisioner, and is labelled as the control-plane node. Every process is
// started detached, recorded by PID and start time under the state directory, and
// placed in a cgroup of the cluster's own so that teardown can find what it started
// (containerd shims included) without matching process names.
//
// All addresses are private to the machine: node IPs come from 198.51.100.0/24
// (TEST-NET-2, RFC 5737), and the pod and service ranges are routed only inside
// the node namespaces, with unreachable routes in the root namespace so nothing
// leaves through the machine's own interfaces. CoreDNS answers only for cluster
// names and forwards nothing.
//
// A second, named cluster (a member cluster in tests) can run beside the
// default one: Addressing gives it address ranges from 198.18.0.0/15 (RFC
// 2544) and 10.x, and link, namespace, cgroup and nftables names of its own,
// so that neither cluster's teardown touches the other's. The root namespace
// routes node traffic between the clusters' bridges and nowhere else.
package devcluster
