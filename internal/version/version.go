// Package version holds the Kubernetes versions Nest builds and runs, the
// etcd each is built with, the one new tenants get (Newest), and which
// upgrades between them are allowed (CheckUpgrade); and Nest's own version,
// stamped at build (Nest), which our binaries' --version prints with them
// (Line, HandleFlag; build.go).
//
// Go code refers to Kubernetes and Supported; the Makefile reads them from
// this file. The places that cannot derive them (go.mod pins, the CRD
// validation markers in api/v1alpha1 and the files generated from them, the
// chart's values, the Makefile, which must read them rather than copy them)
// are checked against them by this package's test, so a bump that misses
// one fails `make unit`.
package version

import (
	"fmt"
	"slices"
	"strings"

	utilversion "k8s.io/apimachinery/pkg/util/version"
)

// Kubernetes is the version of the host-side Kubernetes components Nest
// builds (the local host cluster's, envtest's), from the k8s/ module, and
// the oldest a tenant control plane may run.
const Kubernetes = "v1.36.3"

// Supported are the versions a tenant control plane may run, oldest first.
// Each is built from a module of its own, Module(version), into the kube
// image of that version (images.KubeImage).
var Supported = []string{Kubernetes, "v1.37.2"}

// Etcd is the etcd server version each supported Kubernetes version's
// components are built with: the go.etcd.io/etcd/server/v3 its module pins
// (the test checks the pins). An upgrade whose etcd version changes rolls
// the etcd members first.
var Etcd = map[string]string{Kubernetes: "v3.6.8", "v1.37.2": "v3.7.0"}

// Newest is the newest supported version, and the version of a new tenant
// control plane that names none (the CRD's default, which the test checks).
func Newest() string { return Supported[len(Supported)-1] }

// IsSupported says whether v is one of Supported.
func IsSupported(v string) bool { return slices.Contains(Supported, v) }

// CheckSupported returns nil when v is one of Supported, and otherwise an
// error that lists them (the CRD's rule on spec.kubernetesVersion says
// the same).
func CheckSupported(v string) error {
	if IsSupported(v) {
		return nil
	}
	return fmt.Errorf("unsupported Kubernetes version %q: the supported versions are %s", v, strings.Join(Supported, ", "))
}

// Module is the directory, relative to the repository root, of the Go
// module that builds version v's components: k8s for Kubernetes, k8s/vMAJOR.MINOR
// for the others.
func Module(v string) string {
	if v == Kubernetes {
		return "k8s"
	}
	return "k8s/" + minor(v)
}

// minor is "vMAJOR.MINOR" of the version v ("v1.37.2" -> "v1.37").
func minor(v string) string {
	major, rest, _ := strings.Cut(v, ".")
	minor, _, _ := strings.Cut(rest, ".")
	return major + "." + minor
}

// CheckUpgrade returns nil when a control plane running from may move to
// to: to is supported and is from, a later patch of from's minor, or a
// patch of the next minor (upstream's rule: one minor at a time, never
// back; etcd's data and the API's stored versions do not go back). Its
// errors name spec.kubernetesVersion and the fix; the CRD's transition
// rules say the same, and the CLI and dashboard call this.
func CheckUpgrade(from, to string) error {
	if err := CheckSupported(to); err != nil {
		return fmt.Errorf("spec.kubernetesVersion: %w", err)
	}
	f, err := utilversion.ParseSemantic(from)
	if err != nil {
		return fmt.Errorf("the running version %q: %w", from, err)
	}
	t := utilversion.MustParseSemantic(to)
	switch {
	case t.LessThan(f):
		return fmt.Errorf("spec.kubernetesVersion: %s is older than the running %s: downgrades are refused (etcd's data and the API's stored versions do not go back)", to, from)
	case t.Major() != f.Major() || t.Minor() > f.Minor()+1:
		return fmt.Errorf("spec.kubernetesVersion: %s skips a minor version after the running %s: upgrade to v%d.%d first, one minor at a time", to, from, f.Major(), f.Minor()+1)
	}
	return nil
}
