package devcluster

import (
	"context"
	"fmt"
	"time"

	"github.com/nestdev/nest/internal/agent"
)

// RestartNodeRuntime starts the containerd and the kubelet of node again
// in the running local cluster at stateDir, after they died, as a node's
// runtime restarting does: nothing else of the cluster is touched (Up,
// unlike this, restarts an unhealthy cluster whole). Running containers
// keep running, as their shims outlive containerd. It returns once the
// kubelet has bound its device-plugin socket; an error names the node or
// the process that did not come up.
func RestartNodeRuntime(ctx context.Context, stateDir, node string) error {
	l := Layout{Root: stateDir}
	rec, err := readRecord(l)
	if err != nil {
		return fmt.Errorf("no local cluster recorded in %s: %w", stateDir, err)
	}
	addressing, err := AddressingFor(rec.Cluster, rec.Slot)
	if err != nil {
		return err
	}
	nodes, err := addressing.Topology(l.Root, rec.Nodes)
	if err != nil {
		return err
	}
	o := Options{BinDir: rec.BinDir, Net: addressing, Nodes: rec.Nodes, StateDir: stateDir}
	o.setDefaults()
	u := &upRun{o: o, l: l, nodes: nodes, start: time.Now()}
	for _, n := range nodes {
		if n.Name != node {
			continue
		}
		// Its images are still in its containerd's store: none to import.
		if err := u.startContainerd(ctx, n, nil); err != nil {
			return err
		}
		started := time.Now()
		kubelet, err := nodeServiceSpec(n, agent.ServiceKubelet, o.BinDir)
		if err != nil {
			return err
		}
		if _, err := startProcess(l, kubelet); err != nil {
			return err
		}
		return waitDevicePluginSocket(ctx, l, kubelet.name, started)
	}
	return fmt.Errorf("the local cluster in %s has no node %q", stateDir, node)
}
