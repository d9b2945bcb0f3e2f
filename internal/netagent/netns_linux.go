package netagent

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nestdev/nest/internal/nodenet"
)

// markPrefix starts the alias the agent gives lo in a network namespace it
// has tied to a pod: markPrefix + the pod's UID. Only a holder of
// CAP_NET_ADMIN in the namespace can set it, which no tenant container has,
// so it stays the agent's record after the pod's helper is gone (an agent
// restarted while the pod runs).
const markPrefix = "nest-pod-"

// proofTimeout bounds one dial of a pod's proof socket.
const proofTimeout = time.Second

// FindPodNetns returns the network namespace under dir (such as
// /var/run/netns) of the pod with IP ip and UID uid, and marks it as that
// pod's. A namespace is the pod's when an interface other than lo holds ip
// and either lo carries the mark for uid or the pod's helper answers on
// nodenet.ProofSocket(uid) there. It fails when no namespace is, or more
// than one: a namespace the agent cannot tie to the pod is never set up.
func FindPodNetns(dir string, ip netip.Addr, uid types.UID) (string, error) {
	candidates, err := Candidates(dir, ip)
	if err != nil {
		return "", err
	}
	var owned []string
	for _, p := range candidates {
		if ownedBy(p, uid) {
			owned = append(owned, p)
		}
	}
	switch len(owned) {
	case 0:
		return "", fmt.Errorf("none of the %d network namespaces under %s holding %s is pod %s's yet (its helper does not answer there)", len(candidates), dir, ip, uid)
	case 1:
		return owned[0], markFor(owned[0], uid)
	}
	return "", fmt.Errorf("%d network namespaces under %s hold %s and are pod %s's (%v): refusing to choose", len(owned), dir, ip, uid, owned)
}

// Candidates lists the network namespace files under dir with an interface
// other than lo holding ip. lo is left out: the agent puts node addresses
// there, which are other pods' IPs.
func Candidates(dir string, ip netip.Addr) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list network namespaces: %w", err)
	}
	var out []string
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		if holds(p, ip) {
			out = append(out, p)
		}
	}
	return out, nil
}

// holds reports whether the network namespace at path has ip on an
// interface other than lo; a file that is not a network namespace holds
// nothing.
func holds(path string, ip netip.Addr) bool {
	found := false
	_ = inNetns(path, func() error {
		ifaces, err := net.Interfaces()
		if err != nil {
			return err
		}
		for _, i := range ifaces {
			if i.Flags&net.FlagLoopback != 0 {
				continue
			}
			addrs, err := i.Addrs()
			if err != nil {
				continue
			}
			for _, a := range addrs {
				if n, ok := a.(*net.IPNet); ok {
					if got, ok := netip.AddrFromSlice(n.IP); ok && got.Unmap() == ip {
						found = true
					}
				}
			}
		}
		return nil
	})
	return found
}

// ownedBy reports whether the namespace at path is pod uid's: lo carries
// its mark, or its helper answers.
func ownedBy(path string, uid types.UID) bool {
	owned := false
	_ = inNetns(path, func() error {
		if lo, err := netlink.LinkByName("lo"); err == nil && lo.Attrs().Alias == markPrefix+string(uid) {
			owned = true
			return nil
		}
		c, err := net.DialTimeout("unix", nodenet.ProofSocket(string(uid)), proofTimeout)
		if err != nil {
			return err
		}
		owned = true
		return c.Close()
	})
	return owned
}

// markFor gives lo in the namespace at path the mark of pod uid.
func markFor(path string, uid types.UID) error {
	return inNetns(path, func() error {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		if lo.Attrs().Alias == markPrefix+string(uid) {
			return nil
		}
		if err := netlink.LinkSetAlias(lo, markPrefix+string(uid)); err != nil {
			return fmt.Errorf("mark %s as pod %s's: %w", path, uid, err)
		}
		return nil
	})
}

// inNetns runs fn in the network namespace at path (nodenet.InNetNS).
func inNetns(path string, fn func() error) error {
	ns, err := netns.GetFromPath(path)
	if err != nil {
		return err
	}
	defer ns.Close()
	return nodenet.InNetNS(ns, fn)
}
