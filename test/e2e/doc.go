// Package e2e holds Nest's end-to-end tests. They start a real local host
// cluster (`nest dev up`): real etcd, kube-apiserver, kubelets, containerd and
// CNI, and drive it through its API, kubectl and the network. They need root and
// the binaries from `make build`; `make e2e` runs them.
package e2e
