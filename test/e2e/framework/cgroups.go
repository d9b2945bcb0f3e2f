package framework

import (
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"

	"github.com/nestdev/nest/internal/devcluster"
)

// PodCgroup finds the cgroup directory of the pod with the given UID under
// the local host cluster's root in hierarchy (a cgroup v1 controller's
// mount, or the v2 unified one); an error when there is none.
func PodCgroup(hierarchy, uid string) (string, error) {
	marker := "pod" + uid
	found := ""
	_ = filepath.WalkDir(filepath.Join(hierarchy, "nest-dev"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() || !strings.HasSuffix(path, marker) {
			return nil
		}
		found = path
		return fs.SkipAll
	})
	if found == "" {
		return "", fmt.Errorf("no cgroup of pod %s under %s/nest-dev", uid, hierarchy)
	}
	return found, nil
}

// PodWorkingSet is the memory working set, in bytes, of the pod with the
// given UID on the local host cluster: its cgroup's usage less inactive
// file pages, the figure kubectl top and the kubelet's eviction use, read
// the same way on cgroup v1 and v2.
func PodWorkingSet(uid string) (int64, error) {
	layout, err := devcluster.CurrentCgroupLayout()
	if err != nil {
		return 0, err
	}
	hierarchy, err := layout.MemoryHierarchy()
	if err != nil {
		return 0, err
	}
	dir, err := PodCgroup(hierarchy, uid)
	if err != nil {
		return 0, err
	}
	return layout.WorkingSetBytes(dir)
}
