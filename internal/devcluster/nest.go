package devcluster

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nestdev/nest/internal/addons"
	"github.com/nestdev/nest/internal/controller/nodepromotion"
	"github.com/nestdev/nest/internal/images"
	"github.com/nestdev/nest/internal/install"
)

// InstallNest builds Nest's images, imports them into every node's containerd
// and installs or upgrades Nest in the running local host cluster. The manager
// restarts only when its image changed.
func InstallNest(ctx context.Context, stateDir, binDir string, out io.Writer) error {
	rec, nodes, err := running(stateDir)
	if err != nil {
		return err
	}
	if binDir == "" {
		binDir = rec.BinDir
	}
	o := Options{BinDir: binDir, Out: out}
	o.setDefaults()
	tarballs, err := buildImages(ctx, o)
	if err != nil {
		return err
	}
	if err := importImages(ctx, ctrPath(o.BinDir), nodes, tarballs); err != nil {
		return err
	}
	return installNest(ctx, Layout{Root: stateDir}, nodes, o)
}

// ImportImages imports image tarballs into the containerd of every node of
// the running local host cluster in stateDir.
func ImportImages(ctx context.Context, stateDir string, tarballs []string) error {
	rec, nodes, err := running(stateDir)
	if err != nil {
		return err
	}
	return importImages(ctx, ctrPath(rec.BinDir), nodes, tarballs)
}

// importImages imports the tarballs into the containerd of every node with
// the ctr program at ctr, the nodes side by side: each node's containerd
// unpacks into a store of its own, so one node's import need not wait for
// another's.
func importImages(ctx context.Context, ctr string, nodes []Node, tarballs []string) error {
	g, ctx := errgroup.WithContext(ctx)
	for _, n := range nodes {
		g.Go(func() error { return images.Import(ctx, ctr, n.ContainerdSocket(), tarballs) })
	}
	return g.Wait()
}

// running reads the record and nodes of the local host cluster in stateDir.
func running(stateDir string) (record, []Node, error) {
	rec, err := readRecord(Layout{Root: stateDir})
	if err != nil {
		return rec, nil, fmt.Errorf("no local host cluster in %s: start one with `nest dev up`: %w", stateDir, err)
	}
	a, err := AddressingFor(rec.Cluster, rec.Slot)
	if err != nil {
		return rec, nil, err
	}
	nodes, err := a.Topology(stateDir, rec.Nodes)
	return rec, nodes, err
}

// installNest installs or upgrades Nest in the cluster of nodes, whose
// containerd already holds Nest's images.
func installNest(ctx context.Context, l Layout, nodes []Node, o Options) error {
	manager, err := managerFingerprint(o)
	if err != nil {
		return err
	}
	c, err := adminClient(l)
	if err != nil {
		return err
	}
	a := nodes[0].Net
	pods, services, nodeSubnet := a.ClusterCIDR.String(), a.ServiceCIDR.String(), a.NodeSubnet.String()
	start := time.Now()
	if err := install.Apply(ctx, c, install.Options{
		ManagerPodAnnotations: map[string]string{"nest.dev/image-fingerprint": manager},
		// The host ranges tenant pods must not reach; see controlplane.HostNetwork.
		ManagerArgs: []string{"--host-pod-cidrs=" + pods, "--host-service-cidrs=" + services, "--host-node-cidrs=" + nodeSubnet,
			// Where a node that a tenant releases joins the host again.
			"--host-api-server=" + APIServerURL(nodes[0]),
			// The cluster runs MetalLB (loadbalancer.go): tenants get an
			// address that survives a node, as a platform with a load
			// balancer would give them.
			"--default-service-type=LoadBalancer"},
		// The same ranges, which the pull proxies must not dial: the API
		// names the nodes' own addresses, not the rest of their subnet
		// (the bridge address above all), as the chart's
		// nest.nodeNetworkArgs passes values.yaml's hostNetwork.
		NodeNetworkArgs: []string{"--pull-proxy-deny=" + strings.Join([]string{pods, services, nodeSubnet}, ",")},
	}, 3*time.Minute); err != nil {
		return err
	}
	agentCA, err := readPair(filepath.Join(l.PKIDir(), AgentCACert), filepath.Join(l.PKIDir(), AgentCAKey))
	if err != nil {
		return fmt.Errorf("the agent CA: %w", err)
	}
	if err := addons.Apply(ctx, c, []client.Object{nodepromotion.AgentCASecret(install.Namespace, agentCA)}); err != nil {
		return err
	}
	fmt.Fprintf(o.Out, "%-40s done in %5.1fs\n", "install Nest (CRDs, nest-manager)", time.Since(start).Seconds())
	return nil
}

func managerFingerprint(o Options) (string, error) {
	for _, s := range images.Specs(o.BinDir, o.BusyboxPath, nil) {
		if s.Name == images.NestManager {
			sum, err := images.Fingerprint(s)
			if err != nil {
				return "", err
			}
			return sum[:16], nil
		}
	}
	return "", fmt.Errorf("no %s image spec", images.NestManager)
}

// buildImages builds every image tarball next to the binaries and returns their paths.
func buildImages(ctx context.Context, o Options) ([]string, error) {
	applets, err := images.BusyboxApplets(ctx, o.BusyboxPath)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, s := range images.Specs(o.BinDir, o.BusyboxPath, applets) {
		path, err := images.Build(s, filepath.Join(filepath.Dir(o.BinDir), "images"))
		if err != nil {
			return nil, err
		}
		out = append(out, path)
	}
	return out, nil
}
