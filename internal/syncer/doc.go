// Package syncer is nest-syncer: it runs beside a tenant API server, shows the
// tenant's share of host capacity as one virtual node, and runs the pods the
// tenant schedules there as ordinary pods in the tenant's host namespace.
//
// It follows the ClusterTree / Virtual Kubelet pattern, on the virtual-kubelet
// library's node and pod controllers. Each resource kind has one translator:
//
//   - pods (pod.go): tenant pod → host pod, and host status → tenant status,
//     with the labels and annotations an allow-list names (metadata.go), a
//     hardened runtime (hardening.go) and the tenant's DNS (resolv.go); pods
//     are admitted against the tenant's share of the host (resources.go);
//   - ConfigMaps and Secrets a pod references (objects.go), kept up to date
//     within a byte budget (budget.go);
//   - service-account tokens (token.go), requested from the tenant API server
//     and delivered to the host pod as a file that is refreshed in place;
//   - Services (service.go), whose host ClusterIPs the tenant's CoreDNS serves
//     under the tenant's names (dns.go).
//
// Every translation is a pure function of its inputs and is unit-tested; the
// provider (provider.go) wires them to the two API servers.
//
// Each kind besides pods has its own syncer (internal/kindsync, handlers.go):
// tenant and host informer events put the tenant object's key on the kind's
// rate-limited client-go work queue, a failed sync is retried with per-key
// backoff until it succeeds or the object is gone, and a periodic resync puts
// every key back. Pods go through virtual-kubelet's own queues. Queue depth,
// retries, sync latency and errors are served on /metrics, on loopback beside
// the health endpoints.
//
// The syncer's host credentials reach only its own host namespace, and it
// writes or deletes a host object only if it is the copy of the same tenant
// object.
package syncer
