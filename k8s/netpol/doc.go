// Package netpol pins sigs.k8s.io/kube-network-policies, the NetworkPolicy
// enforcer the local host cluster runs on every node. It is a module of its own
// because the enforcer needs etcd 3.7 libraries while the Kubernetes build in
// k8s/ pins etcd 3.6. The binary is built from the upstream main package with
// `go build sigs.k8s.io/kube-network-policies/cmd/kube-network-policies/standard`,
// which the tool directive in go.mod keeps in this module's build list.
package netpol
