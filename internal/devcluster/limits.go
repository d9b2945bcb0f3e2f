package devcluster

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// kernelMinimum is a machine-wide kernel limit a local cluster needs at
// least, as a file under /proc/sys.
type kernelMinimum struct {
	file string
	min  int
}

// kernelMinimums are the limits `nest dev up` raises when they are lower.
// Every kubelet, containerd, API server and controller of every local cluster
// and every tenant control plane watches files with inotify, all as root, and
// the per-user instance limit (128 by default) runs out at a few clusters: a
// kubelet then exits at start with "inotify_init: too many open files". The
// kind project documents the same two limits for the same reason.
var kernelMinimums = []kernelMinimum{
	{"fs/inotify/max_user_instances", 8192},
	{"fs/inotify/max_user_watches", 524288},
}

// raiseKernelLimits raises each of kernelMinimums under procSys (/proc/sys)
// that is lower, and says so on out. It never lowers a limit.
func raiseKernelLimits(procSys string, out io.Writer) error {
	for _, k := range kernelMinimums {
		path := filepath.Join(procSys, k.file)
		data, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("read kernel limit: %w", err)
		}
		current, err := strconv.Atoi(strings.TrimSpace(string(data)))
		if err != nil {
			return fmt.Errorf("kernel limit %s: %q is not a number", path, data)
		}
		if current >= k.min {
			continue
		}
		if err := os.WriteFile(path, []byte(strconv.Itoa(k.min)), 0o644); err != nil {
			return fmt.Errorf("raise kernel limit %s from %d to %d: %w", path, current, k.min, err)
		}
		fmt.Fprintf(out, "raised %s from %d to %d (until reboot)\n", strings.ReplaceAll(k.file, "/", "."), current, k.min)
	}
	return nil
}
