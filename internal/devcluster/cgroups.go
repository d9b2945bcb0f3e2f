package devcluster

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The cluster owns two kinds of cgroups, under its Addressing.CgroupParent
// (nest-dev for the default cluster, nest-dev-NAME for a named one):
//   - the kubelets' cgroup roots, /nest-dev/<node> in every cgroup v1 hierarchy
//     or, on a unified (v2) host, in the one hierarchy with its controllers
//     enabled, which the kubelet requires to exist before it starts;
//   - a tracking tree /nest-dev/<node>/daemons in the cgroup2 hierarchy (the
//     "unified" mount on hybrid machines). Every process we start is cloned into
//     it, and inherits it to its children: containerd's shims and the pods'
//     processes. Teardown kills what is left in the tree, so a killed run leaves
//     nothing behind, and no process is ever matched by name.

// CgroupLayout is how a machine mounts its cgroups, found at run time.
// Debian 12 and current Ubuntu mount only the unified (v2) hierarchy at
// /sys/fs/cgroup; older hosts mount the legacy v1 hierarchies, often with a
// cgroup2 "unified" mount beside them that has no controllers (hybrid).
type CgroupLayout struct {
	// V1 are the mount points of the v1 hierarchies, empty on a unified host.
	V1 []string
	// Unified is the cgroup2 mount point, "" when there is none.
	Unified string
	// MemoryV1 is the v1 hierarchy of the memory controller, "" when there is none.
	MemoryV1 string
	// CPUAcctV1 is the v1 hierarchy of the cpuacct controller, "" when there is none.
	CPUAcctV1 string
}

// IsV2 reports whether the unified hierarchy is the only one: the kubelets'
// cgroups then live in it.
func (l CgroupLayout) IsV2() bool { return len(l.V1) == 0 && l.Unified != "" }

// Hierarchies are every mount point that may hold the cluster's cgroups.
func (l CgroupLayout) Hierarchies() []string {
	out := slices.Clone(l.V1)
	if l.Unified != "" {
		out = append(out, l.Unified)
	}
	return out
}

// MemoryHierarchy is where memory cgroups live: the v1 memory hierarchy, or
// the unified one on a v2 host. It is an error to have neither, so a reader
// of memory figures never reads zeros from a missing file.
func (l CgroupLayout) MemoryHierarchy() (string, error) { return l.hierarchyOf(l.MemoryV1, "memory") }

// CPUHierarchy is where CPU accounting cgroups live: the v1 cpuacct
// hierarchy, or the unified one on a v2 host. It is an error to have neither.
func (l CgroupLayout) CPUHierarchy() (string, error) { return l.hierarchyOf(l.CPUAcctV1, "cpuacct") }

func (l CgroupLayout) hierarchyOf(v1, controller string) (string, error) {
	switch {
	case v1 != "":
		return v1, nil
	case l.IsV2():
		return l.Unified, nil
	}
	return "", fmt.Errorf("no %s cgroup hierarchy is mounted", controller)
}

// ParseCgroupLayout reads the cgroup mounts out of /proc/self/mounts content.
func ParseCgroupLayout(mounts string) CgroupLayout {
	var l CgroupLayout
	for _, line := range strings.Split(mounts, "\n") {
		fields := strings.Fields(line)
		if len(fields) < 4 {
			continue
		}
		switch fields[2] {
		case "cgroup":
			l.V1 = append(l.V1, fields[1])
			options := strings.Split(fields[3], ",")
			if slices.Contains(options, "memory") {
				l.MemoryV1 = fields[1]
			}
			if slices.Contains(options, "cpuacct") {
				l.CPUAcctV1 = fields[1]
			}
		case "cgroup2":
			if l.Unified == "" {
				l.Unified = fields[1]
			}
		}
	}
	return l
}

// CurrentCgroupLayout is this machine's cgroup layout.
func CurrentCgroupLayout() (CgroupLayout, error) {
	data, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return CgroupLayout{}, err
	}
	return ParseCgroupLayout(string(data)), nil
}

// ensureCgroups creates node n's cgroup root in every hierarchy the kubelet
// uses and its tracking cgroup in the cgroup2 hierarchy.
func ensureCgroups(n Node) error {
	l, err := CurrentCgroupLayout()
	if err != nil {
		return err
	}
	return ensureCgroupsIn(l, n.CgroupRoot())
}

func ensureCgroupsIn(l CgroupLayout, root string) error {
	for _, h := range l.V1 {
		if err := mkdirCgroup(h, root); err != nil {
			return err
		}
	}
	if l.Unified == "" {
		return nil
	}
	if l.IsV2() {
		if err := mkdirDelegated(l.Unified, root); err != nil {
			return err
		}
	}
	return os.MkdirAll(filepath.Join(l.Unified, root, "daemons"), 0o755)
}

// mkdirDelegated creates rel under the unified hierarchy h one level at a
// time and enables in each parent every controller the parent has, so the
// kubelet finds cpu, memory and pids in its cgroup root: in cgroup v2 a
// cgroup has only the controllers its parent's cgroup.subtree_control lists.
// None of these cgroups holds a process (the daemons are in a leaf below),
// so the kernel allows it.
func mkdirDelegated(h, rel string) error {
	dir := h
	for _, part := range strings.Split(strings.Trim(rel, "/"), "/") {
		if err := enableControllers(dir); err != nil {
			return err
		}
		dir = filepath.Join(dir, part)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("create cgroup %s: %w", dir, err)
		}
	}
	return enableControllers(dir)
}

// enableControllers writes "+c" for each controller of dir's
// cgroup.controllers to its cgroup.subtree_control.
func enableControllers(dir string) error {
	data, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return fmt.Errorf("cgroup v2 controllers of %s: %w", dir, err)
	}
	var enable []string
	for _, c := range strings.Fields(string(data)) {
		enable = append(enable, "+"+c)
	}
	if len(enable) == 0 {
		return fmt.Errorf("cgroup %s has no controllers: the kubelet needs cpu, memory and pids", dir)
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte(strings.Join(enable, " ")), 0o644); err != nil {
		return fmt.Errorf("enable controllers %v in %s: %w", enable, dir, err)
	}
	return nil
}

// mkdirCgroup creates rel under hierarchy h one level at a time. In the cpuset
// hierarchy a new cgroup starts with no CPUs and no memory nodes, and nothing can
// join it, so each level copies its parent's.
func mkdirCgroup(h, rel string) error {
	dir := h
	for _, part := range strings.Split(strings.Trim(rel, "/"), "/") {
		parent := dir
		dir = filepath.Join(dir, part)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("create cgroup %s: %w", dir, err)
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			if err := copyIfEmpty(filepath.Join(parent, f), filepath.Join(dir, f)); err != nil {
				return err
			}
		}
	}
	return nil
}

func copyIfEmpty(from, to string) error {
	cur, err := os.ReadFile(to)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // not the cpuset hierarchy
	}
	if err != nil || strings.TrimSpace(string(cur)) != "" {
		return err
	}
	val, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, val, 0o644)
}

// trackingCgroup opens node n's cgroup2 tracking directory for CLONE_INTO_CGROUP.
// It returns nil when the machine has no cgroup2 mount.
func trackingCgroup(n Node) (*os.File, error) {
	l, err := CurrentCgroupLayout()
	if err != nil || l.Unified == "" {
		return nil, err
	}
	dir := filepath.Join(l.Unified, n.CgroupRoot(), "daemons")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	return os.Open(dir)
}

// trackedPIDs lists every process in the cgroup2 tree of the cluster with
// addressing a.
func trackedPIDs(a Addressing) ([]int, error) {
	l, err := CurrentCgroupLayout()
	if err != nil || l.Unified == "" {
		return nil, err
	}
	var pids []int
	root := filepath.Join(l.Unified, a.CgroupParent)
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil || !d.IsDir() {
			return err
		}
		data, err := os.ReadFile(filepath.Join(path, "cgroup.procs"))
		if err != nil {
			return nil // removed while walking
		}
		for _, f := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
		return nil
	})
	return pids, err
}

// killTracked sends SIGKILL to every process left in the cluster's cgroup2 tree
// until the tree is empty or the timeout passes.
func killTracked(a Addressing, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		pids, err := trackedPIDs(a)
		if err != nil {
			return err
		}
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes %v are still in the cluster's cgroups", pids)
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// removeCgroups removes the cluster's cgroups in every hierarchy, deepest first.
// A cgroup directory is removed with rmdir, never by deleting its files.
func removeCgroups(a Addressing) error {
	l, err := CurrentCgroupLayout()
	if err != nil {
		return err
	}
	var errs []error
	for _, h := range l.Hierarchies() {
		root := filepath.Join(h, a.CgroupParent)
		var dirs []string
		_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
		for _, d := range dirs {
			if err := rmdirCgroup(d, syscall.Rmdir, cgroupBusyWait); err != nil {
				errs = append(errs, fmt.Errorf("remove cgroup %s: %w", d, err))
			}
		}
	}
	return errors.Join(errs...)
}

// cgroupBusyWait bounds how long removeCgroups retries a cgroup that is
// still busy.
const cgroupBusyWait = 15 * time.Second

// rmdirCgroup removes the cgroup directory d with rmdir, retrying while the
// kernel answers EBUSY, for at most wait: a process killed by killTracked
// has left cgroup.procs but keeps its cgroup populated until its parent
// has reaped it, which on a loaded machine can take seconds (a CI run's
// teardown failed so). A cgroup already gone is no error.
func rmdirCgroup(d string, rmdir func(string) error, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for {
		err := rmdir(d)
		if err == nil || errors.Is(err, syscall.ENOENT) {
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// WorkingSetBytes is a memory cgroup's usage less its inactive file pages,
// as cAdvisor, kubectl top and the kubelet's eviction compute it: from
// memory.current and inactive_file on cgroup v2, from memory.usage_in_bytes
// and total_inactive_file on v1. A missing file is an error, never zero.
func (l CgroupLayout) WorkingSetBytes(dir string) (int64, error) {
	usageFile, inactiveKey := "memory.usage_in_bytes", "total_inactive_file"
	if l.IsV2() {
		usageFile, inactiveKey = "memory.current", "inactive_file"
	}
	usage, err := readInt(filepath.Join(dir, usageFile))
	if err != nil {
		return 0, err
	}
	stat, err := os.ReadFile(filepath.Join(dir, "memory.stat"))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(stat), "\n") {
		if v, ok := strings.CutPrefix(line, inactiveKey+" "); ok {
			inactive, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("%s in %s: %w", inactiveKey, dir, err)
			}
			return max(usage-inactive, 0), nil
		}
	}
	return 0, fmt.Errorf("%s/memory.stat has no %s", dir, inactiveKey)
}

// CPUUsage is the CPU time a cgroup's processes have used since it was made:
// cpuacct.usage (nanoseconds) on cgroup v1, usage_usec of cpu.stat on v2. A
// missing file is an error, never zero.
func (l CgroupLayout) CPUUsage(dir string) (time.Duration, error) {
	if !l.IsV2() {
		ns, err := readInt(filepath.Join(dir, "cpuacct.usage"))
		return time.Duration(ns), err
	}
	stat, err := os.ReadFile(filepath.Join(dir, "cpu.stat"))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(stat), "\n") {
		if v, ok := strings.CutPrefix(line, "usage_usec "); ok {
			us, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("usage_usec in %s: %w", dir, err)
			}
			return time.Duration(us) * time.Microsecond, nil
		}
	}
	return 0, fmt.Errorf("%s/cpu.stat has no usage_usec", dir)
}

func readInt(path string) (int64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}
