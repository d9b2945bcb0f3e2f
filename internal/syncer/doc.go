// Package syncer is nest-syncer's runtime: it runs beside a tenant API
// server, shows the tenant's share of host capacity as virtual nodes, and
// runs the pods the tenant schedules there as ordinary pods in the tenant's
// host namespace.
//
// It follows the ClusterTree / Virtual Kubelet pattern, on the virtual-kubelet
// library's node and pod controllers. Pods are the runtime's own (pod.go):
// tenant pod → host pod, and host status → tenant status, with the labels
// and annotations an allow-list names (metadata.go), a hardened runtime
// (hardening.go) and the tenant's DNS (resolv.go); pods are admitted against
// the tenant's share of the host (resources.go). Every translation is a pure
// function of its inputs and is unit-tested; the provider (provider.go)
// wires them to the two API servers.
//
// Every other kind lives in its own folder under kinds/ and is one row of
// kindTable (register.go): the syncers it runs in (the host's virtual
// nodes, a member cluster's node, or both) and the function that registers
// its work queues and informer handlers from a kinds.Context. Each queue is
// an internal/kindsync work loop: informer events put the tenant object's
// key on it, a failed sync is retried with per-key backoff until it
// succeeds or the object is gone, and a periodic resync puts every key
// back. Pods go through virtual-kubelet's own queues. Queue depth, retries,
// sync latency and errors are served on /metrics, on loopback beside the
// health endpoints.
//
// What nest-manager and nest-syncer share (flags, host names, labels,
// placements, DNS files) is in contract, which the rest of Nest imports
// instead of this package.
//
// The syncer's host credentials reach only its own host namespace, and it
// writes or deletes a host object only if it is the copy of the same tenant
// object.
//
// What the tenant reads of the host, in events, statuses and conditions,
// goes through tenantmsg (tenantscope.go for pods): the host's reason and
// the tenant's own names and field paths, never the host's namespaces,
// names, quotas or addresses, which stay in the syncer's log.
package syncer
