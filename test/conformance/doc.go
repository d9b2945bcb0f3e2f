// Package conformance runs the upstream Kubernetes conformance suite
// (e2e.test from `make conformance-build`) against a tenant of a real local
// host cluster. `make test` runs a fixed smoke subset (smoke.txt);
// `make conformance` runs every [Conformance] spec. It needs root.
package conformance
