// Package components is the one description of the Kubernetes control plane
// Nest runs twice: as the local host cluster (internal/devcluster) and as
// every tenant control plane (internal/controlplane). For etcd,
// kube-apiserver, kube-controller-manager and kube-scheduler it gives the
// flags both set; for each certificate a control plane issues it gives the
// subject, the usages, the names and the authority that signs it.
//
// What differs between the two is a parameter: directories, addresses,
// ports, the Service CIDR and cluster domain, whether etcd speaks TLS, which
// authority signs the API server's kubelet client certificate. A flag or
// certificate only one of them has is added by that caller, with a comment
// saying why.
//
// Flags keep a fixed order: the tenant renders them into its StatefulSet's
// pod template, which the controller compares with the live one, so a new
// order would restart every tenant control plane once.
package components
