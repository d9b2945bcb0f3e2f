// Package nodeclean takes a node's pods and mounts apart: the steps a
// kubelet node needs before it can leave its cluster (kubeadm reset does the
// same). The local host cluster's teardown and nest-agent's reset share them.
package nodeclean

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	remote "k8s.io/cri-client/pkg"
)

// RemoveSandboxes stops and removes every pod sandbox of the containerd at
// socket (a unix socket path) through the CRI, as `crictl rmp --all --force` does. Stopping a
// sandbox runs the CNI DEL and removes its network namespace and mounts.
func RemoveSandboxes(ctx context.Context, socket string) error {
	svc, err := remote.NewRemoteRuntimeService(ctx, "unix://"+socket, 10*time.Second, nil, false)
	if err != nil {
		return fmt.Errorf("connect to CRI at %s: %w", socket, err)
	}
	sandboxes, err := svc.ListPodSandbox(ctx, nil)
	if err != nil {
		return fmt.Errorf("list pod sandboxes: %w", err)
	}
	var errs []error
	for _, s := range sandboxes {
		if err := svc.StopPodSandbox(ctx, s.Id); err != nil {
			errs = append(errs, fmt.Errorf("stop sandbox %s (%s/%s): %w", s.Id, s.Metadata.Namespace, s.Metadata.Name, err))
			continue
		}
		if err := svc.RemovePodSandbox(ctx, s.Id); err != nil {
			errs = append(errs, fmt.Errorf("remove sandbox %s: %w", s.Id, err))
		}
	}
	return errors.Join(errs...)
}

// UnmountUnder detaches every mount below root, deepest first: pod volumes the
// kubelet left behind and containerd's overlay and shm mounts.
func UnmountUnder(root string) error {
	root = filepath.Clean(root) + "/"
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	defer f.Close()
	var points []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMountPath(fields[4])
		if strings.HasPrefix(mp+"/", root) {
			points = append(points, mp)
		}
	}
	sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
	var errs []error
	for _, p := range points {
		if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

// unescapeMountPath undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v int
			if _, err := fmt.Sscanf(s[i+1:i+4], "%03o", &v); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// CountSandboxes returns how many pod sandboxes the container runtime at
// socket (a unix socket path) holds, ready or not.
func CountSandboxes(ctx context.Context, socket string) (int, error) {
	svc, err := remote.NewRemoteRuntimeService(ctx, "unix://"+socket, 10*time.Second, nil, false)
	if err != nil {
		return 0, fmt.Errorf("connect to CRI at %s: %w", socket, err)
	}
	sandboxes, err := svc.ListPodSandbox(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("list pod sandboxes: %w", err)
	}
	return len(sandboxes), nil
}
