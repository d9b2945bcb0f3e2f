package devcluster

import (
	"context"
	"fmt"
	"time"

	remote "k8s.io/cri-client/pkg"
)

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
