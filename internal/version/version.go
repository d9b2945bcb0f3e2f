// Package version holds the one Kubernetes version Nest builds and runs.
//
// Go code refers to Kubernetes; the Makefile reads it from this file. The
// places that cannot derive it (go.mod pins, the CRD validation markers in
// api/v1alpha1 and the files generated from them, the chart's values) are
// checked against it by this package's test, so a bump that misses one fails
// `make unit`.
package version

// Kubernetes is the version of every Kubernetes component Nest builds: the
// host cluster's, the tenant control planes' and the version the virtual
// node reports as its kubelet's.
const Kubernetes = "v1.36.3"
