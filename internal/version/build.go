package version

import (
	"io"
	"runtime/debug"
	"strings"
)

// Nest is Nest's own version, stamped at build by the Makefile's build-nest
// (`git describe --tags --always --dirty`, "dev" outside a git checkout):
//
//	go build -ldflags '-X github.com/nestdev/nest/internal/version.Nest=v0.4.0-12-gabc1234-dirty' ./cmd/...
//
// A plain `go build` leaves it "dev"; Describe then still names the commit
// go build recorded, when it recorded one.
var Nest = "dev"

// Describe is what every binary of ours says of its version, after
// "NAME version ": Nest's version, the commit it was built from (its first
// 12 hex digits, "-dirty" when the tree had changes; left out when go build
// recorded none, as in `go test` or a build outside a git checkout, and
// when the version names it already, as git describe does), the Kubernetes
// version it is built against (Kubernetes) and the versions tenants may run
// (Supported):
//
//	v0.4.0 (commit abc1234def56), Kubernetes v1.36.3 (supported v1.36.3, v1.37.2)
//	v0.4.0-12-gabc1234-dirty, Kubernetes v1.36.3 (supported v1.36.3, v1.37.2)
//	dev (commit abc1234def56-dirty), Kubernetes v1.36.3 (supported v1.36.3, v1.37.2)
//	dev, Kubernetes v1.36.3 (supported v1.36.3, v1.37.2)
//
// The cobra commands (nest, nest-agent, nest-node-network-agent) take it as
// their Version, which cobra prints as Line does.
func Describe() string {
	info, _ := debug.ReadBuildInfo()
	return describe(Nest, info)
}

// describe is Describe for the stamped version nest and the build info
// (nil when there is none).
func describe(nest string, info *debug.BuildInfo) string {
	if nest == "" {
		nest = "dev"
	}
	var rev, modified string
	if info != nil {
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value
			}
		}
	}
	s := nest
	// git describe names the commit already, unless it is a tag's.
	if rev != "" && !strings.Contains(nest, rev[:min(len(rev), 7)]) {
		s += " (commit " + rev[:min(len(rev), 12)]
		if modified == "true" {
			s += "-dirty"
		}
		s += ")"
	}
	return s + ", Kubernetes " + Kubernetes + " (supported " + strings.Join(Supported, ", ") + ")"
}

// Line is the one line binary name prints for --version, without the
// newline:
//
//	nest-manager version v0.4.0-12-gabc1234, Kubernetes v1.36.3 (supported v1.36.3, v1.37.2)
func Line(name string) string { return name + " version " + Describe() }

// HandleFlag writes Line(name) and a newline to out and returns true when
// args, a binary's arguments without its own name, ask for the version:
// one of them is --version or -version, before any "--", and the first is
// a flag. Arguments that start with a word (a command of nest-syncer's or
// testapp's and the arguments of its own that follow it, nest-probe's URL)
// are never taken for the version flag. The binaries that parse their
// flags without cobra call it first thing in main and return (exit 0) when
// it is true:
//
//	if version.HandleFlag(os.Args[1:], "nest-manager", os.Stdout) {
//		return
//	}
func HandleFlag(args []string, name string, out io.Writer) bool {
	if len(args) == 0 || !strings.HasPrefix(args[0], "-") {
		return false
	}
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "--version", "-version":
			io.WriteString(out, Line(name)+"\n")
			return true
		}
	}
	return false
}
