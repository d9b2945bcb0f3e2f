// Package faults is the fault-injection end-to-end suite. Each case gives a
// new virtual cluster a workload of 200 tenant objects (pods, Services,
// ConfigMaps and Secrets), keeps creating, updating and deleting them while
// one fault happens (a killed process, a deleted pod, a host API server that
// is down or refuses the syncer's writes, a full quota, host copies deleted
// from outside), and then checks that the host and the tenant agree exactly
// and that the tenant's data survived.
//
// Faults that stop a part every tenant shares (TestHostFaults) run one
// after another on a host cluster of their own; faults confined to one
// tenant (TestTenantFaults) run one after another on a second host cluster,
// beside the first. Run it as root with
// `go test ./test/e2e/faults` after `make build`, or through `make e2e`.
package faults
