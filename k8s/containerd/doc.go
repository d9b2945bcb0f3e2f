// Package containerd pins containerd 2 (github.com/containerd/containerd/v2),
// the container runtime of every node of the local host cluster. Debian 12
// ships containerd 1.6, which lacks what Kubernetes 1.36 uses, such as image
// volumes. It is a module of its own so that containerd's dependencies stay
// out of the Kubernetes build in k8s/ and out of Nest's own module. The tool
// directives in go.mod keep containerd, its runc shim
// (containerd-shim-runc-v2) and ctr in this module's build list; `make
// build-k8s` builds them with `go build`, statically.
package containerd
