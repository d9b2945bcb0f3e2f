package devcluster

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The cluster owns two kinds of cgroups:
//   - the kubelets' cgroup roots, /nest-dev/<node> in every cgroup v1 hierarchy,
//     which the kubelet requires to exist before it starts;
//   - a tracking tree /nest-dev/<node>/daemons in the cgroup2 hierarchy (the
//     "unified" mount on hybrid machines). Every process we start is cloned into
//     it, and inherits it to its children: containerd's shims and the pods'
//     processes. Teardown kills what is left in the tree, so a killed run leaves
//     nothing behind, and no process is ever matched by name.

// v1Hierarchies lists the mounted cgroup v1 hierarchies (mount points).
func v1Hierarchies() ([]string, error) {
	return cgroupMounts("cgroup")
}

// unifiedMount returns the cgroup2 mount point, or "" when there is none.
func unifiedMount() (string, error) {
	mounts, err := cgroupMounts("cgroup2")
	if err != nil || len(mounts) == 0 {
		return "", err
	}
	return mounts[0], nil
}

func cgroupMounts(fstype string) ([]string, error) {
	f, err := os.Open("/proc/self/mounts")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 3 && fields[2] == fstype {
			out = append(out, fields[1])
		}
	}
	return out, sc.Err()
}

// ensureCgroups creates node n's cgroup root in every v1 hierarchy and its
// tracking cgroup in the cgroup2 hierarchy.
func ensureCgroups(n Node) error {
	hierarchies, err := v1Hierarchies()
	if err != nil {
		return err
	}
	for _, h := range hierarchies {
		if err := mkdirCgroup(h, n.CgroupRoot()); err != nil {
			return err
		}
	}
	unified, err := unifiedMount()
	if err != nil || unified == "" {
		return err
	}
	return os.MkdirAll(filepath.Join(unified, n.CgroupRoot(), "daemons"), 0o755)
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
	unified, err := unifiedMount()
	if err != nil || unified == "" {
		return nil, err
	}
	dir := filepath.Join(unified, n.CgroupRoot(), "daemons")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	return os.Open(dir)
}

// trackedPIDs lists every process in the cluster's cgroup2 tree.
func trackedPIDs() ([]int, error) {
	unified, err := unifiedMount()
	if err != nil || unified == "" {
		return nil, err
	}
	var pids []int
	root := filepath.Join(unified, cgroupParent)
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
func killTracked(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		pids, err := trackedPIDs()
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
func removeCgroups() error {
	hierarchies, err := v1Hierarchies()
	if err != nil {
		return err
	}
	if unified, _ := unifiedMount(); unified != "" {
		hierarchies = append(hierarchies, unified)
	}
	var errs []error
	for _, h := range hierarchies {
		root := filepath.Join(h, cgroupParent)
		var dirs []string
		_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
		for _, d := range dirs {
			if err := syscall.Rmdir(d); err != nil && !errors.Is(err, syscall.ENOENT) {
				errs = append(errs, fmt.Errorf("remove cgroup %s: %w", d, err))
			}
		}
	}
	return errors.Join(errs...)
}
