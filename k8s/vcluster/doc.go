// Package vcluster pins github.com/loft-sh/vcluster, whose OSS syncer binary
// (cmd/vcluster, v0.36.1) `make build-peers` builds with the flags of
// upstream's .goreleaser.yaml. It is a module of its own so that vcluster's
// Kubernetes and controller-runtime libraries stay out of Nest's module and
// the other pinned ones (kine has its own, k8s/kine). The tool directive in
// go.mod keeps the main package in this module's build list.
package vcluster
