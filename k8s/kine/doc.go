// Package kine pins github.com/k3s-io/kine, the etcd API shim over SQLite
// that vcluster's default backing store runs. It is a module of its own so
// that its dependencies do not mix with vcluster's (k8s/vcluster). `make
// build-peers` builds it statically with cgo (its SQLite driver is C), as
// upstream does, since it runs from an image that has no C library. The tool
// directive in go.mod keeps the main package in this module's build list.
package kine
