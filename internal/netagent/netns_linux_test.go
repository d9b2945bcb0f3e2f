package netagent

import (
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
)

// newNetnsFile makes a network namespace holding addr on its loopback and
// bind-mounts it at dir/name, as a CNI does under /var/run/netns; the test
// removes both.
func newNetnsFile(t *testing.T, dir, name, addr string) string {
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
	ns, err := netns.GetFromPath(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	lo, err := h.LinkByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	ip := net.ParseIP(addr)
	if err := h.AddrAdd(lo, &netlink.Addr{IPNet: &net.IPNet{IP: ip, Mask: net.CIDRMask(32, 32)}}); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestFindNetnsFindsTheOneNamespaceHoldingTheIP(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test needs root (network namespaces, mounts); run it as root, it is not optional")
	}
	dir := t.TempDir()
	want := newNetnsFile(t, dir, "cni-a", "10.215.0.7")
	newNetnsFile(t, dir, "cni-b", "10.215.0.8")
	if err := os.WriteFile(filepath.Join(dir, "not-a-netns"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := FindNetns(dir, netip.MustParseAddr("10.215.0.7"))
	if err != nil || got != want {
		t.Fatalf("FindNetns(10.215.0.7) = %q, %v; want %q", got, err, want)
	}
	if _, err := FindNetns(dir, netip.MustParseAddr("10.215.0.9")); err == nil || !strings.Contains(err.Error(), "no network namespace") {
		t.Errorf("FindNetns of an IP no namespace holds = %v, want an error saying so", err)
	}
	newNetnsFile(t, dir, "cni-c", "10.215.0.7")
	if got, err := FindNetns(dir, netip.MustParseAddr("10.215.0.7")); err == nil || !strings.Contains(err.Error(), "refusing to choose") {
		t.Errorf("FindNetns of an IP two namespaces hold = %q, %v; want a refusal", got, err)
	}
}
