// Package isolation is Nest's adversarial end-to-end suite: on a real local
// host cluster with two virtual clusters, a tenant that is cluster-admin of
// its own cluster tries to escape onto the host, reach the host and the other
// tenant, smuggle metadata onto host pods, take more than its share, and use
// forged or borrowed credentials. Every case asserts the safe outcome; the
// controls show that ordinary workloads still work.
package isolation
