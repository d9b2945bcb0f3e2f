// Package coredns pins github.com/coredns/coredns at the version vcluster's
// chart runs by default (v1.14.2), with every plugin of its release, for the
// side-by-side benchmark: vcluster's Corefile forwards to the host's
// resolver, which Nest's own CoreDNS build (k8s/coredns) leaves out on
// purpose. `make build-peers` builds it. The tool directive in go.mod keeps
// the main package in this module's build list.
package coredns
