//go:build !linux

package nodenet

import (
	"errors"
	"fmt"

	"github.com/vishvananda/netns"
)

// State is what Inspect found in a network namespace; see the linux build.
type State struct {
	Table                                 bool
	DNATRules, LoopbackDropRules          int
	NonlocalBind, RouteLocalnet           bool
	ARPIgnore, ARPAnnounce                bool
	NodeIP                                string
	NodeAddress, NodeRule, LocalRuleMoved bool
}

// ReadySysctl is the file the pod's init container waits on; see the linux
// build.
const ReadySysctl = "/proc/sys/net/ipv4/ip_nonlocal_bind"

var errNotLinux = errors.New("network namespaces need linux")

// Apply fails: network namespaces and nftables exist only on linux.
func Apply(netnsPath string, c Config) error {
	return fmt.Errorf("nodenet: apply %s: %w", netnsPath, errNotLinux)
}

// Inspect fails: network namespaces and nftables exist only on linux.
func Inspect(netnsPath string) (State, error) {
	return State{}, fmt.Errorf("nodenet: inspect %s: %w", netnsPath, errNotLinux)
}

// InNetNS fails: network namespaces exist only on linux.
func InNetNS(ns netns.NsHandle, fn func() error) error {
	return fmt.Errorf("nodenet: enter network namespace %v: %w", ns, errNotLinux)
}
