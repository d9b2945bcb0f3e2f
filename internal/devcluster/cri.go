package devcluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	remote "k8s.io/cri-client/pkg"
)

// removeSandboxes stops and removes every pod sandbox of the containerd at
// socket through the CRI, as `crictl rmp --all --force` does. Stopping a
// sandbox runs the CNI DEL and removes its network namespace and mounts.
func removeSandboxes(ctx context.Context, socket string) error {
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

// KillContainer stops the container with the CRI id (the part of a pod
// status containerID after "containerd://") on node at once, as a crash
// would: a zero timeout makes containerd send SIGKILL. The kubelet then
// restarts it by the pod's restart policy. The e2e fault suite uses it.
func KillContainer(ctx context.Context, l Layout, node, id string) error {
	socket := socketOf(l, node)
	svc, err := remote.NewRemoteRuntimeService(ctx, "unix://"+socket, 10*time.Second, nil, false)
	if err != nil {
		return fmt.Errorf("connect to CRI at %s: %w", socket, err)
	}
	if err := svc.StopContainer(ctx, id, 0); err != nil {
		return fmt.Errorf("kill container %s on %s: %w", id, node, err)
	}
	return nil
}
