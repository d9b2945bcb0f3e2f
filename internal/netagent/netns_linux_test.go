package netagent

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nestdev/nest/internal/nodenet"
)

// newNetnsFile makes a network namespace and bind-mounts it at dir/name, as
// a CNI does under /var/run/netns; the test removes it. With podIP, the
// namespace has an interface eth0 holding it (one end of a veth pair inside
// the namespace, as this kernel has no dummy interfaces); with loIP, lo
// holds that address, as the agent puts a node's there.
func newNetnsFile(t testing.TB, dir, name, podIP, loIP string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, nil, 0o444); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		// The thread enters the new namespace and dies with this
		// goroutine, still locked, so no other goroutine runs there.
		runtime.LockOSThread()
		ns, err := netns.New()
		if err != nil {
			done <- err
			return
		}
		defer ns.Close()
		done <- unix.Mount("/proc/thread-self/ns/net", path, "", unix.MS_BIND, "")
	}()
	if err := <-done; err != nil {
		t.Fatalf("make network namespace %s: %v", path, err)
	}
	t.Cleanup(func() { _ = unix.Unmount(path, unix.MNT_DETACH) })
	err := inNetns(path, func() error {
		if podIP != "" {
			if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth0"}, PeerName: "peer0"}); err != nil {
				return err
			}
			if err := addAddr("eth0", podIP); err != nil {
				return err
			}
		}
		if loIP != "" {
			return addAddr("lo", loIP)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("set up %s: %v", path, err)
	}
	return path
}

func addAddr(link, ip string) error {
	l, err := netlink.LinkByName(link)
	if err != nil {
		return err
	}
	return netlink.AddrAdd(l, &netlink.Addr{IPNet: &net.IPNet{IP: net.ParseIP(ip), Mask: net.CIDRMask(32, 32)}})
}

// proveIn listens on pod uid's proof socket in the namespace at path, as
// the pod's helper does; the returned func stops it.
func proveIn(t testing.TB, path string, uid types.UID) func() {
	t.Helper()
	var l net.Listener
	if err := inNetns(path, func() error {
		var err error
		l, err = net.Listen("unix", nodenet.ProofSocket(string(uid)))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return func() { l.Close() }
}

func requireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("this test needs root (network namespaces, mounts); run it as root, it is not optional")
	}
}

func TestFindPodNetnsTakesTheNamespaceThePodProves(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	pod := newNetnsFile(t, dir, "cni-a", "10.215.0.7", "")
	newNetnsFile(t, dir, "cni-b", "10.215.0.8", "")
	// A hostNetwork pod's lo holds a node address, another pod's IP: never
	// a candidate for that pod.
	newNetnsFile(t, dir, "cni-lo", "10.215.0.9", "10.215.0.7")
	if err := os.WriteFile(filepath.Join(dir, "not-a-netns"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	stop := proveIn(t, pod, "uid-a")
	got, err := FindPodNetns(dir, netip.MustParseAddr("10.215.0.7"), "uid-a")
	if err != nil || got != pod {
		t.Fatalf("FindPodNetns(10.215.0.7, uid-a) = %q, %v; want %q", got, err, pod)
	}
	// The helper is gone (its init container finished, the agent
	// restarted): the agent's mark still ties the namespace to the pod.
	stop()
	if got, err := FindPodNetns(dir, netip.MustParseAddr("10.215.0.7"), "uid-a"); err != nil || got != pod {
		t.Errorf("FindPodNetns after the helper left = %q, %v; want %q by its mark", got, err, pod)
	}
	if _, err := FindPodNetns(dir, netip.MustParseAddr("10.215.0.6"), "uid-a"); err == nil {
		t.Error("FindPodNetns of an IP no namespace holds found one")
	}
}

// A pod whose status still shows an IP its dead sandbox let go, which a
// sandbox of another pod took: that namespace proves nothing for it.
func TestFindPodNetnsRefusesAnotherPodsNamespaceWithTheSameIP(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	victim := newNetnsFile(t, dir, "cni-victim", "10.215.0.8", "")
	proveIn(t, victim, "uid-victim")
	got, err := FindPodNetns(dir, netip.MustParseAddr("10.215.0.8"), "uid-stale")
	if err == nil || !strings.Contains(err.Error(), "is pod uid-stale's yet") {
		t.Fatalf("FindPodNetns for a stale IP = %q, %v; want a refusal", got, err)
	}
	var alias string
	_ = inNetns(victim, func() error {
		lo, err := netlink.LinkByName("lo")
		if err == nil {
			alias = lo.Attrs().Alias
		}
		return err
	})
	if alias != "" {
		t.Errorf("the other pod's namespace was marked %q", alias)
	}
}

func TestFindPodNetnsRefusesToChooseBetweenTwoProvenNamespaces(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	for _, name := range []string{"cni-a", "cni-b"} {
		proveIn(t, newNetnsFile(t, dir, name, "10.215.0.7", ""), "uid-a")
	}
	if got, err := FindPodNetns(dir, netip.MustParseAddr("10.215.0.7"), "uid-a"); err == nil || !strings.Contains(err.Error(), "refusing to choose") {
		t.Errorf("FindPodNetns with two proven namespaces = %q, %v; want a refusal", got, err)
	}
}

// BenchmarkFindPodNetns is the agent's cost per sync of one pod on a node
// with n pod network namespaces: it looks at each for the pod's IP, then
// asks the one that holds it for the proof (here the agent's mark, as on
// every sync after the first).
func BenchmarkFindPodNetns(b *testing.B) {
	requireRoot(b)
	for _, n := range []int{10, 50, 200} {
		b.Run(fmt.Sprintf("namespaces=%d", n), func(b *testing.B) {
			dir := b.TempDir()
			for i := range n {
				newNetnsFile(b, dir, fmt.Sprintf("cni-%03d", i), fmt.Sprintf("10.216.%d.%d", i/250, i%250+1), "")
			}
			target := netip.MustParseAddr(fmt.Sprintf("10.216.%d.%d", (n-1)/250, (n-1)%250+1))
			stop := proveIn(b, filepath.Join(dir, fmt.Sprintf("cni-%03d", n-1)), "uid-bench")
			if _, err := FindPodNetns(dir, target, "uid-bench"); err != nil {
				b.Fatal(err)
			}
			stop()
			b.ResetTimer()
			for b.Loop() {
				if _, err := FindPodNetns(dir, target, "uid-bench"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
