package devcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nestdev/nest/internal/nodeclean"
)

// Down stops the local host cluster and removes everything Up made: processes,
// pods, mounts, network namespaces, the bridge and routes, cgroups (and with
// them the iptables chains, which live in the node namespaces), and the state
// directory. It succeeds on a cluster that is half up or already down. The
// cluster's addressing comes from its record; net (the zero value for the
// default cluster) is used when there is none, and a named net must match it.
// Another local cluster's links, namespaces, rules and cgroups are left alone.
func Down(ctx context.Context, stateDir string, net Addressing, out io.Writer) error {
	if out == nil {
		out = io.Discard
	}
	if os.Geteuid() != 0 {
		return errors.New("nest dev down needs root; run it with sudo")
	}
	l := Layout{Root: stateDir}
	a, err := addressingOf(l, net)
	if err != nil {
		return err
	}
	if err := stopRuntime(ctx, l, a, out); err != nil {
		return err
	}
	releaseMachine(l, a)
	if err := os.RemoveAll(l.Root); err != nil {
		return fmt.Errorf("remove state directory %s: %w", l.Root, err)
	}
	fmt.Fprintf(out, "removed %s\n", l.Root)
	return nil
}

// stopRuntime tears down everything that runs, in dependency order (see
// stopProcesses), then cleans up what processes leave behind (see
// cleanupMachine). It keeps the PKI, etcd data and volumes.
func stopRuntime(ctx context.Context, l Layout, a Addressing, out io.Writer) error {
	procs, err := RecordedProcesses(l)
	if err != nil {
		return err
	}
	errs := stopProcesses(ctx, l, procs, out)
	for _, p := range procs {
		_ = os.Remove(pidFile(l, p.Name))
	}
	if other, ok := otherOwner(ctx, l, a); ok {
		// The network, cgroups and leftover pods belong to the cluster that runs.
		fmt.Fprintf(out, "leaving the network and cgroups to the cluster running from %s\n", other)
		return errors.Join(append(errs, nodeclean.UnmountUnder(l.Root))...)
	}
	errs = append(errs, cleanupMachine(ctx, l, a)...)
	_ = os.Remove(l.StateFile())
	removeRuntimeDirs(l)
	return errors.Join(errs...)
}

// stopProcesses stops the recorded processes: first the controllers that would
// recreate or schedule pods, then the pods (so the kubelet unmounts their
// volumes and containerd removes their network namespaces), then kubelets,
// kube-proxies and containerds, and the API server and etcd last.
func stopProcesses(ctx context.Context, l Layout, procs []Process, out io.Writer) []error {
	byName := map[string]Process{}
	for _, p := range procs {
		byName[p.Name] = p
	}
	var errs []error
	stop := func(names ...string) {
		for _, name := range names {
			p, ok := byName[name]
			if !ok {
				continue
			}
			grace := 10 * time.Second
			if name == "kube-apiserver" {
				grace = 2 * time.Second // it drains watches for over a minute on SIGTERM
			}
			if err := p.stop(grace); err != nil {
				errs = append(errs, err)
			}
		}
	}
	stop("kube-controller-manager", "kube-scheduler", "local-volume-provisioner")
	// An agent could start a kubelet again while the cluster goes down.
	for _, n := range recordedNodes(procs) {
		stop(n + "." + agentProcess)
	}
	if p, ok := byName["kube-apiserver"]; ok && p.Alive() {
		if err := deletePods(ctx, l, out); err != nil {
			fmt.Fprintf(out, "pods were not all deleted through the API (%v); removing the rest through the container runtime\n", err)
		}
	}
	nodes := recordedNodes(procs)
	for _, n := range nodes {
		stop(n + ".kubelet")
	}
	for _, n := range nodes {
		if p, ok := byName[n+".containerd"]; ok && p.Alive() {
			if err := nodeclean.RemoveSandboxes(ctx, socketOf(l, n)); err != nil {
				fmt.Fprintf(out, "remove pod sandboxes on %s: %v\n", n, err)
			}
		}
	}
	for _, n := range nodes {
		stop(n+".kube-proxy", n+"."+NetworkPolicyTable, n+".containerd")
	}
	stop("kube-apiserver", "etcd")
	return errs
}

// cleanupMachine removes what stopped processes leave: anything still in the
// cluster's cgroups (shims, pod processes of a killed run), mounts under the
// state directory, pod network namespaces, the node network and the cgroups.
func cleanupMachine(ctx context.Context, l Layout, a Addressing) []error {
	var errs []error
	for _, step := range []func() error{
		func() error { return killTracked(a, 30*time.Second) },
		func() error { return nodeclean.UnmountUnder(l.Root) },
		func() error { return removePodNetns(ctx, a) },
		func() error { return removeNetworkPolicyRules(ctx, a) },
		func() error { return teardownNetwork(ctx, a) },
		func() error { return removeCgroups(a) },
	} {
		if err := step(); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// removeRuntimeDirs deletes the per-node state that a fresh start rebuilds:
// containerd stores, kubelet directories, CNI IP allocations.
func removeRuntimeDirs(l Layout) {
	_ = os.RemoveAll(filepath.Join(l.Root, "nodes"))
}

func socketOf(l Layout, node string) string {
	return filepath.Join(l.Root, "nodes", node, "containerd", "containerd.sock")
}

// recordedNodes lists the nodes that have processes recorded, from names such
// as "nest-worker.kubelet".
func recordedNodes(procs []Process) []string {
	seen := map[string]bool{}
	var out []string
	for _, p := range procs {
		if node, _, ok := strings.Cut(p.Name, "."); ok && !seen[node] {
			seen[node] = true
			out = append(out, node)
		}
	}
	sort.Strings(out)
	return out
}

// deletePods deletes every pod through the API and waits until the kubelets
// have stopped them. The controller-manager is already stopped, so nothing
// recreates them.
func deletePods(ctx context.Context, l Layout, out io.Writer) error {
	c, err := adminClient(l)
	if err != nil {
		return err
	}
	var pods corev1.PodList
	if err := c.List(ctx, &pods); err != nil {
		return err
	}
	for i := range pods.Items {
		if err := c.Delete(ctx, &pods.Items[i], client.GracePeriodSeconds(1)); client.IgnoreNotFound(err) != nil {
			return err
		}
	}
	fmt.Fprintf(out, "deleting %d pods\n", len(pods.Items))
	return waitFor(ctx, 60*time.Second, "pods deleted", l, nil, func(ctx context.Context) bool {
		var left corev1.PodList
		return c.List(ctx, &left) == nil && len(left.Items) == 0
	})
}

// removePodNetns deletes pod network namespaces (cni-*) that hold an address in
// the cluster's pod range: ones containerd could not remove because it was
// killed. Namespaces of other runtimes and other local clusters on the
// machine are left alone.
func removePodNetns(ctx context.Context, a Addressing) error {
	entries, err := os.ReadDir("/run/netns")
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	cluster := a.ClusterCIDR
	var errs []error
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "cni-") || !netnsHasAddrIn(ctx, e.Name(), cluster) {
			continue
		}
		if err := ip(ctx, "netns", "delete", e.Name()); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func netnsHasAddrIn(ctx context.Context, ns string, prefix netip.Prefix) bool {
	out, err := exec.CommandContext(ctx, "ip", "-n", ns, "-4", "-o", "addr", "show").Output()
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(out), "\n") {
		fields := strings.Fields(line)
		for i, f := range fields {
			if f == "inet" && i+1 < len(fields) {
				if p, err := netip.ParsePrefix(fields[i+1]); err == nil && prefix.Contains(p.Addr()) {
					return true
				}
			}
		}
	}
	return false
}
