// Package metallb pins go.universe.tf/metallb, the LoadBalancer
// implementation the local host cluster runs: its controller, which gives
// LoadBalancer Services addresses from an IPAddressPool, and a speaker on
// every node, which answers ARP for the addresses its node announces (L2
// mode) on the cluster's bridge. It is a module of its own because MetalLB
// pins its own Kubernetes and controller-runtime libraries. The binaries are
// built from the upstream main packages (`go build go.universe.tf/metallb/
// controller` and `.../speaker`), which the tool directives in go.mod keep in
// this module's build list.
package metallb
