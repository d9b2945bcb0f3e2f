package devcluster

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nestdev/nest/internal/testutil"
)

// /proc/self/mounts of our machines (v1 with a cgroup2 "unified" mount) and
// of Debian 12 (unified only).
const (
	hybridMounts = `sysfs /sys sysfs rw,nosuid,nodev,noexec,relatime 0 0
tmpfs /sys/fs/cgroup tmpfs ro,nosuid,nodev,noexec,mode=755 0 0
cgroup2 /sys/fs/cgroup/unified cgroup2 rw,nosuid,nodev,noexec,relatime 0 0
cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,nosuid,nodev,noexec,relatime,cpu,cpuacct 0 0
cgroup /sys/fs/cgroup/memory cgroup rw,nosuid,nodev,noexec,relatime,memory 0 0
cgroup /sys/fs/cgroup/pids cgroup rw,nosuid,nodev,noexec,relatime,pids 0 0
`
	unifiedMounts = `sysfs /sys sysfs rw,nosuid,nodev,noexec,relatime 0 0
cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,nodev,noexec,relatime,nsdelegate,memory_recursiveprot 0 0
`
)

func TestCgroupLayoutOfAHybridHost(t *testing.T) {
	l := ParseCgroupLayout(hybridMounts)
	if l.IsV2() {
		t.Error("a host with v1 hierarchies taken for a unified one")
	}
	if want := []string{"/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup/memory", "/sys/fs/cgroup/pids", "/sys/fs/cgroup/unified"}; !slices.Equal(l.Hierarchies(), want) {
		t.Errorf("hierarchies %v, want %v", l.Hierarchies(), want)
	}
	if m, err := l.MemoryHierarchy(); err != nil || m != "/sys/fs/cgroup/memory" {
		t.Errorf("memory hierarchy %q (%v)", m, err)
	}
	if c, err := l.CPUHierarchy(); err != nil || c != "/sys/fs/cgroup/cpu,cpuacct" {
		t.Errorf("cpu hierarchy %q (%v)", c, err)
	}
}

func TestCgroupLayoutOfAUnifiedHost(t *testing.T) {
	l := ParseCgroupLayout(unifiedMounts)
	if !l.IsV2() {
		t.Error("a unified host not recognised")
	}
	if want := []string{"/sys/fs/cgroup"}; !slices.Equal(l.Hierarchies(), want) {
		t.Errorf("hierarchies %v, want %v", l.Hierarchies(), want)
	}
	if m, err := l.MemoryHierarchy(); err != nil || m != "/sys/fs/cgroup" {
		t.Errorf("memory hierarchy %q (%v)", m, err)
	}
	if c, err := l.CPUHierarchy(); err != nil || c != "/sys/fs/cgroup" {
		t.Errorf("cpu hierarchy %q (%v)", c, err)
	}
}

func TestCPUUsageOnBothVersions(t *testing.T) {
	v1, v2 := t.TempDir(), t.TempDir()
	testutil.WriteFile(t, filepath.Join(v1, "cpuacct.usage"), "2500000000\n")
	testutil.WriteFile(t, filepath.Join(v2, "cpu.stat"), "usage_usec 1500000\nuser_usec 1000000\nsystem_usec 500000\n")
	if got, err := ParseCgroupLayout(hybridMounts).CPUUsage(v1); err != nil || got != 2500*time.Millisecond {
		t.Errorf("v1 usage %v (%v), want 2.5s", got, err)
	}
	if got, err := ParseCgroupLayout(unifiedMounts).CPUUsage(v2); err != nil || got != 1500*time.Millisecond {
		t.Errorf("v2 usage %v (%v), want 1.5s", got, err)
	}
	if _, err := ParseCgroupLayout(unifiedMounts).CPUUsage(v1); err == nil {
		t.Error("a v2 read of a directory without cpu.stat gave no error")
	}
	if _, err := ParseCgroupLayout(hybridMounts).CPUUsage(v2); err == nil {
		t.Error("a v1 read of a directory without cpuacct.usage gave no error")
	}
}

func TestNoMemoryHierarchyIsAnError(t *testing.T) {
	l := ParseCgroupLayout("cgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0\ncgroup /sys/fs/cgroup/pids cgroup rw,pids 0 0\n")
	if m, err := l.MemoryHierarchy(); err == nil {
		t.Errorf("memory hierarchy %q without a memory controller", m)
	}
}

// On a v1 host every hierarchy gets the kubelet's root, the cpuset one with
// its parent's CPUs, and the cgroup2 mount the tracking leaf.
func TestEnsureCgroupsOnV1(t *testing.T) {
	dir := t.TempDir()
	memory, cpuset, unified := filepath.Join(dir, "memory"), filepath.Join(dir, "cpuset"), filepath.Join(dir, "unified")
	testutil.WriteFile(t, filepath.Join(memory, "memory.stat"), "")
	testutil.WriteFile(t, filepath.Join(cpuset, "cpuset.cpus"), "0-1\n")
	testutil.WriteFile(t, filepath.Join(cpuset, "cpuset.mems"), "0\n")
	// The kernel makes these files empty in a new cpuset cgroup.
	for _, level := range []string{"nest-dev", "nest-dev/node"} {
		testutil.WriteFile(t, filepath.Join(cpuset, level, "cpuset.cpus"), "")
		testutil.WriteFile(t, filepath.Join(cpuset, level, "cpuset.mems"), "")
	}
	l := CgroupLayout{V1: []string{memory, cpuset}, Unified: unified, MemoryV1: memory}
	if err := ensureCgroupsIn(l, "/nest-dev/node"); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{filepath.Join(memory, "nest-dev/node"), filepath.Join(unified, "nest-dev/node/daemons")} {
		if st, err := os.Stat(d); err != nil || !st.IsDir() {
			t.Errorf("%s not created (%v)", d, err)
		}
	}
	if got := testutil.ReadFile(t, filepath.Join(cpuset, "nest-dev/node/cpuset.cpus")); got != "0-1\n" {
		t.Errorf("cpuset.cpus %q, want the parent's", got)
	}
	if _, err := os.Stat(filepath.Join(unified, "cgroup.subtree_control")); err == nil {
		t.Error("controllers enabled in the hybrid host's controller-less cgroup2 mount")
	}
}

// On a unified host each level up to the kubelet's root enables the
// controllers it has, so the kubelet finds cpu, memory and pids there.
func TestEnsureCgroupsOnV2EnablesControllers(t *testing.T) {
	root := t.TempDir()
	// The kernel lists in a cgroup's cgroup.controllers what its parent enables.
	for _, level := range []string{"", "nest-dev", "nest-dev/node"} {
		testutil.WriteFile(t, filepath.Join(root, level, "cgroup.controllers"), "cpuset cpu io memory pids\n")
	}
	if err := ensureCgroupsIn(CgroupLayout{Unified: root}, "/nest-dev/node"); err != nil {
		t.Fatal(err)
	}
	for _, level := range []string{"", "nest-dev", "nest-dev/node"} {
		if got := testutil.ReadFile(t, filepath.Join(root, level, "cgroup.subtree_control")); got != "+cpuset +cpu +io +memory +pids" {
			t.Errorf("%s/cgroup.subtree_control = %q", level, got)
		}
	}
	if st, err := os.Stat(filepath.Join(root, "nest-dev/node/daemons")); err != nil || !st.IsDir() {
		t.Errorf("tracking cgroup not created (%v)", err)
	}
}

func TestEnsureCgroupsOnV2WithoutControllersFails(t *testing.T) {
	root := t.TempDir()
	testutil.WriteFile(t, filepath.Join(root, "cgroup.controllers"), "\n")
	err := ensureCgroupsIn(CgroupLayout{Unified: root}, "/nest-dev/node")
	if err == nil || !strings.Contains(err.Error(), "no controllers") {
		t.Errorf("err = %v, want a cgroup without controllers named", err)
	}
}

func TestWorkingSetOnBothHierarchies(t *testing.T) {
	v1, v2 := t.TempDir(), t.TempDir()
	testutil.WriteFile(t, filepath.Join(v1, "memory.usage_in_bytes"), "1000\n")
	testutil.WriteFile(t, filepath.Join(v1, "memory.stat"), "cache 300\ninactive_file 50\ntotal_inactive_file 200\n")
	testutil.WriteFile(t, filepath.Join(v2, "memory.current"), "2000\n")
	testutil.WriteFile(t, filepath.Join(v2, "memory.stat"), "anon 1000\ninactive_file 500\n")
	if got, err := ParseCgroupLayout(hybridMounts).WorkingSetBytes(v1); err != nil || got != 800 {
		t.Errorf("v1 working set %d (%v), want 800", got, err)
	}
	if got, err := ParseCgroupLayout(unifiedMounts).WorkingSetBytes(v2); err != nil || got != 1500 {
		t.Errorf("v2 working set %d (%v), want 1500", got, err)
	}
	if _, err := ParseCgroupLayout(unifiedMounts).WorkingSetBytes(v1); err == nil {
		t.Error("a v1 cgroup read as v2 gave a figure instead of an error")
	}
}

// TestRmdirCgroupWaitsOutABusyCgroup: a cgroup whose killed processes are
// not yet reaped answers EBUSY for a while; removal retries until it goes,
// gives up with the error after its wait, and does not retry other errors.
func TestRmdirCgroupWaitsOutABusyCgroup(t *testing.T) {
	busyFor := func(n int, then error) (func(string) error, *int) {
		calls := 0
		return func(string) error {
			calls++
			if calls <= n {
				return syscall.EBUSY
			}
			return then
		}, &calls
	}
	rmdir, calls := busyFor(3, nil)
	if err := rmdirCgroup("cg", rmdir, 5*time.Second); err != nil || *calls != 4 {
		t.Errorf("busy three times: err %v after %d calls, want nil after 4", err, *calls)
	}
	rmdir, _ = busyFor(1000, nil)
	if err := rmdirCgroup("cg", rmdir, 300*time.Millisecond); !errors.Is(err, syscall.EBUSY) {
		t.Errorf("busy past the wait: err %v, want EBUSY", err)
	}
	rmdir, calls = busyFor(0, syscall.EPERM)
	if err := rmdirCgroup("cg", rmdir, 5*time.Second); !errors.Is(err, syscall.EPERM) || *calls != 1 {
		t.Errorf("EPERM: err %v after %d calls, want EPERM at once", err, *calls)
	}
	rmdir, _ = busyFor(0, syscall.ENOENT)
	if err := rmdirCgroup("cg", rmdir, 5*time.Second); err != nil {
		t.Errorf("a cgroup already gone: err %v, want nil", err)
	}
}
