package devcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	deviceplugin "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/nestdev/nest/internal/addons"
	"github.com/nestdev/nest/internal/agent"
	"github.com/nestdev/nest/internal/images"
	"github.com/nestdev/nest/internal/provisioner"
	"github.com/nestdev/nest/internal/pullproxy"
)

// Up starts the local host cluster and returns when every node is Ready and
// cluster DNS answers. It is idempotent: on a healthy cluster with the same node
// count it changes nothing. Leftovers of a killed or failed run are cleaned up
// first; the PKI, etcd data and volumes are kept, so a restarted cluster keeps
// its objects. If Up fails, it stops everything it started.
func Up(ctx context.Context, o Options) error {
	o.setDefaults()
	if err := o.preflight(); err != nil {
		return err
	}
	if o.GPUs < 0 {
		return fmt.Errorf("--gpus must be 0 or more, got %d", o.GPUs)
	}
	l := Layout{Root: o.StateDir}
	nodes, err := o.Net.Topology(l.Root, o.Nodes)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	rec, recErr := readRecord(l)
	if recErr == nil && rec.complete() && healthy(ctx, l) {
		return alreadyRunning(ctx, l, rec, nodes, o)
	}
	// What a previous run left is cleaned up with the addressing it ran with.
	previous := o.Net
	if recErr == nil {
		if previous, err = AddressingFor(rec.Cluster, rec.Slot); err != nil {
			return err
		}
	}
	if err := claimMachine(ctx, l, previous); err != nil {
		return err
	}
	if err := stopRuntime(ctx, l, previous, o.Out); err != nil {
		return fmt.Errorf("clean up a previous run: %w", err)
	}
	if previous != o.Net {
		releaseMachine(l, previous)
	}
	if err := claimMachine(ctx, l, o.Net); err != nil {
		return err
	}
	if err := subnetFree(o.Net); err != nil {
		return err
	}
	newRecord := record{Nodes: o.Nodes, BinDir: o.BinDir, Cluster: o.Net.Cluster, Slot: o.Net.Slot, GPUs: o.GPUs}
	if err := raiseKernelLimits("/proc/sys", o.Out); err != nil {
		return err
	}
	if err := writeRecord(l, newRecord); err != nil {
		return err
	}
	u := &upRun{o: o, l: l, nodes: nodes, start: time.Now()}
	if err := u.run(ctx); err != nil {
		fmt.Fprintf(o.Out, "up failed, stopping what was started: %v\n", err)
		cleanupCtx, cancelCleanup := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancelCleanup()
		if cerr := stopRuntime(cleanupCtx, l, o.Net, o.Out); cerr != nil {
			return errors.Join(err, fmt.Errorf("clean up after the failure: %w", cerr))
		}
		return err
	}
	newRecord.StartedAt = u.start
	return writeRecord(l, newRecord)
}

// alreadyRunning is Up on a healthy cluster: it changes nothing but the
// advertised GPUs, which a kubelet that re-registered may have dropped, and
// refuses options the running cluster was not started with.
func alreadyRunning(ctx context.Context, l Layout, rec record, nodes []Node, o Options) error {
	switch {
	case rec.Cluster != o.Net.Cluster || rec.Slot != o.Net.Slot:
		return fmt.Errorf("the cluster %q in slot %d is already running in %s: run `nest dev down` first, or pass its own --cluster and --slot", rec.Cluster, rec.Slot, l.Root)
	case rec.Nodes != o.Nodes:
		return fmt.Errorf("a cluster with %d nodes is already running in %s: run `nest dev down` first to change --nodes", rec.Nodes, l.Root)
	case rec.GPUs != o.GPUs:
		return fmt.Errorf("a cluster with --gpus %d is already running in %s: run `nest dev down` first to change --gpus", rec.GPUs, l.Root)
	}
	if o.GPUs > 0 {
		if err := advertiseGPUs(ctx, l, nodes, o.GPUs); err != nil {
			return err
		}
	}
	fmt.Fprintf(o.Out, "cluster already running in %s with %d nodes\n", l.Root, rec.Nodes)
	return nil
}

// ownerFile records which state directory owns the default cluster's
// machine-wide names (network namespaces, bridge, cgroups); a named cluster
// has files of its own beside it (Addressing.ownerFiles).
const ownerFile = "/run/nest-dev/owner"

// claimMachine makes l the owner of a's machine-wide names, unless a cluster
// from another state directory that holds them is running, which it must
// not tear down.
func claimMachine(ctx context.Context, l Layout, a Addressing) error {
	if other, ok := otherOwner(ctx, l, a); ok {
		if a.Cluster == "" {
			return fmt.Errorf("a local host cluster from %s is running; one runs per machine: stop it with `nest dev down --state-dir %s`", other, other)
		}
		return fmt.Errorf("a local cluster from %s is running with the name %q or slot %d: stop it with `nest dev down --state-dir %s`, or pick another --cluster and --slot", other, a.Cluster, a.Slot, other)
	}
	for _, f := range a.ownerFiles() {
		if err := writeFileAtomic(f, []byte(l.Root), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// otherOwner returns the state directory of a running cluster other than l's
// that holds any of a's machine-wide names.
func otherOwner(ctx context.Context, l Layout, a Addressing) (string, bool) {
	for _, f := range a.ownerFiles() {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		other := Layout{Root: string(data)}
		if other.Root != l.Root && healthy(ctx, other) {
			return other.Root, true
		}
	}
	return "", false
}

// releaseMachine removes the owner files of a that name l.
func releaseMachine(l Layout, a Addressing) {
	for _, f := range a.ownerFiles() {
		if owner, err := os.ReadFile(f); err == nil && string(owner) == l.Root {
			_ = os.Remove(f)
		}
	}
}

// upRun is one run of Up, with the phases in the order they run.
type upRun struct {
	o     Options
	l     Layout
	nodes []Node
	start time.Time
}

// upPhase is one named step of Up; its name prefixes its error.
type upPhase struct {
	name string
	fn   func(context.Context) error
}

func (u *upRun) run(ctx context.Context) error {
	phases := []upPhase{
		{"write configs and PKI", u.writeFiles},
		{"create node network", u.createNetwork},
		{"start control plane and containerd", u.startControlPlaneAndRuntimes},
		{"start kubelets and kube-proxies", u.startNodes},
		{"install add-ons", u.installAddons},
		{"wait for nodes Ready", u.waitNodesReady},
		{"start the load balancer", u.startLoadBalancer},
		{"start the registry", u.startRegistry},
		{"wait for cluster DNS", u.waitDNS},
		{"wait for node agents", u.waitAgents},
		{"wait for the load balancer", u.waitLoadBalancer},
		{"wait for the registry", u.waitRegistry},
	}
	if u.o.GPUs > 0 {
		phases = append(phases, upPhase{"advertise GPUs on workers", func(ctx context.Context) error { return advertiseGPUs(ctx, u.l, u.nodes, u.o.GPUs) }})
	}
	if u.o.WithNest {
		// Nest's images are among those every node's containerd imported
		// as it started (startControlPlaneAndRuntimes).
		phases = append(phases, upPhase{"install Nest", func(ctx context.Context) error { return installNest(ctx, u.l, u.nodes, u.o) }})
	}
	for _, p := range phases {
		if err := p.fn(ctx); err != nil {
			return fmt.Errorf("%s: %w", p.name, err)
		}
		fmt.Fprintf(u.o.Out, "%-40s done at %5.1fs\n", p.name, time.Since(u.start).Seconds())
	}
	return nil
}

func (u *upRun) writeFiles(_ context.Context) error {
	for _, d := range []string{u.l.RunDir(), u.l.LogDir(), u.l.EtcdDir(), u.l.VolumesDir()} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	if err := ensurePKI(u.l, u.nodes); err != nil {
		return err
	}
	for _, n := range u.nodes {
		if err := writeNodeFiles(u.l, n, u.o.CNIBinDir); err != nil {
			return fmt.Errorf("node %s: %w", n.Name, err)
		}
	}
	return nil
}

func writeNodeFiles(l Layout, n Node, cniBinDir string) error {
	containerd, err := ContainerdConfig(n, cniBinDir)
	if err != nil {
		return err
	}
	cni, err := CNIConfig(n)
	if err != nil {
		return err
	}
	servingCert, servingKey := KubeletServingCert(n)
	resolv := filepath.Join(n.Dir, "resolv.conf")
	kubelet, err := KubeletConfig(n, KubeletPaths{
		ClientCAFile: filepath.Join(l.PKIDir(), caCert),
		TLSCertFile:  filepath.Join(l.PKIDir(), servingCert),
		TLSKeyFile:   filepath.Join(l.PKIDir(), servingKey),
		ResolvConf:   resolv,
	})
	if err != nil {
		return err
	}
	proxy, err := KubeProxyConfig(n, l.Kubeconfig("kube-proxy"))
	if err != nil {
		return err
	}
	credential, err := os.ReadFile(l.Kubeconfig("kubelet-" + n.Name))
	if err != nil {
		return err
	}
	if err := resetAgentFiles(l, n); err != nil {
		return err
	}
	args := KubeletArgs(n)
	files := map[string][]byte{
		filepath.Join(n.Dir, "containerd", "config.toml"): containerd,
		cniConfigFile(n):           cni,
		args["config"]:             kubelet,
		KubeProxyArgs(n)["config"]: proxy,
		resolv:                     nil,
		filepath.Join(n.Dir, containerdCertsDir, "_default", "hosts.toml"): PullProxyHostsTOML(pullproxy.DefaultAddress),
	}
	for path, data := range files {
		if err := writeFileAtomic(path, data, 0o644); err != nil {
			return err
		}
	}
	return writeFileAtomic(args["kubeconfig"], credential, 0o600)
}

func (u *upRun) createNetwork(ctx context.Context) error {
	if err := setupBridge(ctx, u.o.Net); err != nil {
		return err
	}
	for _, n := range u.nodes {
		if err := setupNodeNetwork(ctx, n, u.nodes); err != nil {
			return err
		}
		if err := ensureCgroups(n); err != nil {
			return err
		}
	}
	return nil
}

// startControlPlaneAndRuntimes starts etcd and the API server while every
// node's containerd starts and imports the images, since neither waits on the other.
func (u *upRun) startControlPlaneAndRuntimes(ctx context.Context) error {
	tarballs, err := buildImages(ctx, u.o)
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	errs := make([]error, len(u.nodes)+1)
	wg.Add(1)
	go func() { defer wg.Done(); errs[0] = u.startAPIServer(ctx) }()
	for i, n := range u.nodes {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i+1] = u.startContainerd(ctx, n, tarballs) }()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	cp := u.nodes[0]
	kube := filepath.Join(u.o.BinDir, "kube")
	for _, s := range []processSpec{
		{name: "kube-controller-manager", node: cp, path: kube, args: append([]string{"kube-controller-manager"}, ControllerManagerArgs(u.l).Render()...)},
		{name: "kube-scheduler", node: cp, path: kube, args: append([]string{"kube-scheduler"}, SchedulerArgs(u.l).Render()...)},
		{name: "local-volume-provisioner", node: cp, path: filepath.Join(u.o.BinDir, "nest"),
			args: []string{"dev", "provisioner", "--kubeconfig", u.l.AdminKubeconfig(), "--dir", u.l.VolumesDir()}},
	} {
		if _, err := startProcess(u.l, s); err != nil {
			return err
		}
	}
	return nil
}

func (u *upRun) startAPIServer(ctx context.Context) error {
	cp := u.nodes[0]
	kube := filepath.Join(u.o.BinDir, "kube")
	if _, err := startProcess(u.l, processSpec{name: "etcd", node: cp, path: kube, args: append([]string{"etcd"}, EtcdArgs(u.l, cp).Render()...)}); err != nil {
		return err
	}
	if _, err := startProcess(u.l, processSpec{name: "kube-apiserver", node: cp, path: kube, args: append([]string{"kube-apiserver"}, APIServerArgs(u.l, cp).Render()...)}); err != nil {
		return err
	}
	return waitFor(ctx, 90*time.Second, "kube-apiserver /readyz", u.l, []string{"etcd", "kube-apiserver"}, func(ctx context.Context) bool {
		return apiServerReady(ctx, u.l)
	})
}

func (u *upRun) startContainerd(ctx context.Context, n Node, tarballs []string) error {
	name := n.Name + ".containerd"
	spec := processSpec{name: name, node: n, path: containerdPath(u.o.BinDir), args: ContainerdArgs(n).Render(), env: containerdEnv(u.o.BinDir)}
	if _, err := startProcess(u.l, spec); err != nil {
		return err
	}
	if err := waitFor(ctx, 30*time.Second, "containerd on "+n.Name, u.l, []string{name}, func(ctx context.Context) bool {
		return containerdReady(ctx, n)
	}); err != nil {
		return err
	}
	return images.Import(ctx, ctrPath(u.o.BinDir), n.ContainerdSocket(), tarballs)
}

func (u *upRun) startNodes(ctx context.Context) error {
	for _, n := range u.nodes {
		started := time.Now()
		kubelet, err := nodeServiceSpec(n, agent.ServiceKubelet, u.o.BinDir)
		if err != nil {
			return err
		}
		if _, err := startProcess(u.l, kubelet); err != nil {
			return err
		}
		if err := waitDevicePluginSocket(ctx, u.l, kubelet.name, started); err != nil {
			return err
		}
		proxy, err := nodeServiceSpec(n, agent.ServiceKubeProxy, u.o.BinDir)
		if err != nil {
			return err
		}
		specs := []processSpec{proxy, {name: n.Name + "." + NetworkPolicyTable, node: n, path: filepath.Join(u.o.BinDir, "kube-network-policies"), args: NetworkPolicyArgs(u.l, n).Render()}}
		if !n.ControlPlane() {
			specs = append(specs, agentSpec(u.l, n, u.o.BinDir))
		}
		for _, s := range specs {
			if _, err := startProcess(u.l, s); err != nil {
				return err
			}
		}
	}
	return nil
}

// waitDevicePluginSocket waits until the kubelet started at started has
// bound its device-plugin registration socket. Every kubelet binds the same
// path, whatever its --root-dir (upstream's v1beta1.KubeletSocket), after
// emptying its directory; two kubelets doing that at once make one fail with
// "address already in use" and exit, so the nodes' kubelets start one after
// another.
func waitDevicePluginSocket(ctx context.Context, l Layout, kubelet string, started time.Time) error {
	return waitFor(ctx, time.Minute, kubelet+" to bind "+deviceplugin.KubeletSocket, l, []string{kubelet}, func(context.Context) bool {
		fi, err := os.Stat(deviceplugin.KubeletSocket)
		return err == nil && !fi.ModTime().Before(started)
	})
}

func (u *upRun) installAddons(ctx context.Context) error {
	c, err := adminClient(u.l)
	if err != nil {
		return err
	}
	objs := addons.CoreDNS(addons.DNSOptions{Image: images.CoreDNS, ClusterDomain: ClusterDomain, ServiceIP: u.o.Net.DNSIP(), Replicas: 1})
	objs = append(objs, addons.DefaultStorageClass("standard", provisioner.Name))
	objs = append(objs, addons.NetworkPolicyReader(NetworkPolicyName)...)
	// A worker that nest-agent released from a tenant joins again by TLS
	// bootstrapping; nest-manager approves its request, for its name only.
	objs = append(objs, addons.NodeBootstrapRBAC()...)
	return addons.Apply(ctx, c, objs)
}

func (u *upRun) waitNodesReady(ctx context.Context) error {
	c, err := adminClient(u.l)
	if err != nil {
		return err
	}
	var watched []string
	for _, n := range u.nodes {
		watched = append(watched, n.Name+".kubelet", n.Name+".containerd")
	}
	if err := waitFor(ctx, 2*time.Minute, fmt.Sprintf("%d nodes Ready", len(u.nodes)), u.l, watched, func(ctx context.Context) bool {
		return nodesReady(ctx, c, u.nodes)
	}); err != nil {
		return err
	}
	return labelControlPlane(ctx, c, u.nodes[0])
}

// waitAgents waits until every worker's agent accepts connections.
func (u *upRun) waitAgents(ctx context.Context) error {
	for _, n := range u.nodes[1:] {
		name := n.Name + "." + agentProcess
		host, port := AgentAddress(n)
		addr := net.JoinHostPort(host, strconv.Itoa(port))
		if err := waitFor(ctx, 30*time.Second, name+" at "+addr, u.l, []string{name}, func(ctx context.Context) bool {
			conn, err := (&net.Dialer{Timeout: time.Second}).DialContext(ctx, "tcp", addr)
			if err == nil {
				conn.Close()
			}
			return err == nil
		}); err != nil {
			return err
		}
	}
	return nil
}

func (u *upRun) waitDNS(ctx context.Context) error {
	c, err := adminClient(u.l)
	if err != nil {
		return err
	}
	return waitFor(ctx, 2*time.Minute, "CoreDNS ready", u.l, nil, func(ctx context.Context) bool {
		return coreDNSReady(ctx, c)
	})
}

// waitFor polls ready every 200 ms until it is true, the timeout passes, or one
// of the named processes dies; the error then carries the tail of its log.
func waitFor(ctx context.Context, timeout time.Duration, what string, l Layout, watched []string, ready func(context.Context) bool) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		if ready(ctx) {
			return nil
		}
		for _, name := range watched {
			if p, err := readProcess(l, name); err == nil && !p.Alive() {
				return fmt.Errorf("waiting for %s: %s exited; last lines of %s:\n%s", what, name,
					filepath.Join(l.LogDir(), name+".log"), logTail(l, name, 15))
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-tick.C:
		}
	}
}
