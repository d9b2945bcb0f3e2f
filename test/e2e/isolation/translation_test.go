package isolation

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nestdev/nest/internal/devcluster"
	"github.com/nestdev/nest/internal/syncer"
	"github.com/nestdev/nest/internal/syncer/contract"
	"github.com/nestdev/nest/internal/testutil"
	"github.com/nestdev/nest/test/e2e/framework"
)

// Translation: what a tenant writes in a pod spec that the host node would
// act on as written (image references its runtime dials, grace periods its
// kubelet waits out) is bounded, and what the host node answers reaches the
// tenant only as much as a tenant may know.
func (e *env) translation() []testCase {
	image := func(ref string) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Spec.Containers[0].Image, p.Spec.Containers[0].ImagePullPolicy = ref, corev1.PullAlways
		}
	}
	refuse := func(name, ref, want string) testCase {
		return testCase{"image-" + name + "-is-refused", func(t *testing.T) {
			e.refused(t, testPod("image-"+name, image(ref)), "spec.containers[0].image: images from "+want)
		}}
	}
	return []testCase{
		refuse("from-the-node-loopback", "127.0.0.1:10250/pods:latest", "127.0.0.1:10250"),
		refuse("from-a-localhost-name", "localhost:10250/pods:latest", "localhost:10250"),
		refuse("from-a-host-node", hostPort(e.nodeIPs[0], 10250)+"/pods:latest", hostPort(e.nodeIPs[0], 10250)),
		refuse("from-another-tenants-pod", hostPort(e.betaTargets.webPod, 8080)+"/x:1", hostPort(e.betaTargets.webPod, 8080)),
		refuse("from-the-metadata-service", "169.254.169.254/latest:1", "169.254.169.254"),
		{"image-from-a-numeric-address-is-refused", func(t *testing.T) {
			e.refused(t, testPod("image-numeric", image("2130706433:10250/pods:latest")), "non-standard form")
		}},
		{"image-pull-errors-reach-the-tenant-as-their-kind", e.pullErrorKind},
		{"image-from-a-name-the-node-resolves-to-itself-is-refused-where-it-is-dialled", e.registryNameResolvingToTheNode},
		{"pull-proxy-refuses-the-node-subnet-beyond-the-nodes", e.pullProxyRefusesTheNodeSubnet},
		{"refusals-name-nothing-of-the-host", e.refusalsNameNothingOfTheHost},
		{"grace-period-is-cut-and-force-delete-shortens-the-host-deletion", e.gracePeriodCut},
		{"dns-config-past-the-limits-is-told", e.dnsConfigTold},
		{"image-pulled-with-another-tenants-credentials-is-not-run", e.pulledWithCredentials},
	}
}

// pullErrorKind: a registry name that leads the host node's runtime to an
// internal service (as a name resolving to a private address would) fails
// the pull, and the tenant learns that the registry failed, not what
// answered or where: the host's own status has the banner and the address.
func (e *env) pullErrorKind(t *testing.T) {
	ip, err := devcluster.RegistryListenIP(e.stateDir)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(ip.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	const banner = "SSH-2.0-OpenSSH_9.2 nest-isolation"
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = fmt.Fprintf(conn, "%s\r\n", banner)
			_ = conn.Close()
		}
	}()
	const registry = "internal.nest.test"
	undo, err := devcluster.RouteRegistry(e.stateDir, registry, ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = undo() })

	pod := testPod("image-pull-error", func(p *corev1.Pod) {
		p.Spec.Containers[0].Image, p.Spec.Containers[0].ImagePullPolicy = registry+"/app:1", corev1.PullAlways
	})
	e.create(t, e.alpha, pod)
	var hostMessage string
	testutil.Eventually(t, 2*time.Minute, "the host pod's pull fails with the service's answer", func() error {
		hp, ok := e.findHostPod(t, e.alpha, "default", pod.Name)
		if !ok || len(hp.Status.ContainerStatuses) == 0 || hp.Status.ContainerStatuses[0].State.Waiting == nil {
			return errors.New("no waiting container on the host yet")
		}
		hostMessage = hp.Status.ContainerStatuses[0].State.Waiting.Message
		if !strings.Contains(hostMessage, "SSH-2.0") && !strings.Contains(hostMessage, ln.Addr().String()) {
			return fmt.Errorf("host waiting message %q names neither the banner nor the address yet", hostMessage)
		}
		return nil
	})
	var tenantMessage string
	testutil.Eventually(t, time.Minute, "the tenant pod's pull failure", func() error {
		cs := e.tenantPod(t, e.alpha, "default", pod.Name).Status.ContainerStatuses
		if len(cs) == 0 || cs[0].State.Waiting == nil || (cs[0].State.Waiting.Reason != "ErrImagePull" && cs[0].State.Waiting.Reason != "ImagePullBackOff") {
			return fmt.Errorf("container statuses %+v", cs)
		}
		tenantMessage = cs[0].State.Waiting.Message
		if !strings.Contains(e.tenantEvents(t, e.alpha, "default", pod.Name), "Failed to pull image") {
			return errors.New("no pull failure event yet")
		}
		return nil
	})
	if !strings.Contains(tenantMessage, string(syncer.ImageRegistryFailed)) {
		t.Errorf("tenant waiting message %q, want the kind %q", tenantMessage, syncer.ImageRegistryFailed)
	}
	seen := tenantMessage + "\n" + e.tenantEvents(t, e.alpha, "default", pod.Name)
	for _, leak := range []string{"SSH-2.0", "nest-isolation", ln.Addr().String(), ip.String(), "malformed"} {
		if strings.Contains(seen, leak) {
			t.Errorf("the tenant sees %q of the host's pull error (host: %q):\n%s", leak, hostMessage, seen)
		}
	}
}

// registryNameResolvingToTheNode: a registry named by a name the node
// resolves to its own loopback (this machine's host name, which /etc/hosts
// maps there, and the hostNetwork agent's copy of /etc/hosts too) passes
// nest-syncer, which cannot know what a name resolves to on the node, and is
// refused by the node's pull proxy when it resolves it, before any
// connection: the host pod's pull fails with the proxy's DENIED, and the
// node network agent on the pod's node logs the refusal of that registry.
// Without the proxy the node's containerd dials the kubelet's health port
// on its loopback and reports what answered.
func (e *env) registryNameResolvingToTheNode(t *testing.T) {
	name, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	addrs, err := net.DefaultResolver.LookupNetIP(e.ctx, "ip", name)
	if err != nil || !slices.ContainsFunc(addrs, func(a netip.Addr) bool { return a.Unmap().IsLoopback() }) {
		t.Fatalf("this case needs this machine's host name %q to resolve to a loopback address, as Debian's /etc/hosts makes it; it resolves to %v (%v)", name, addrs, err)
	}
	registry := strings.ToLower(name) + ":10248"
	pod := testPod("image-by-the-nodes-name", func(p *corev1.Pod) {
		p.Spec.Containers[0].Image, p.Spec.Containers[0].ImagePullPolicy = registry+"/pods:latest", corev1.PullAlways
	})
	e.create(t, e.alpha, pod)
	var hp corev1.Pod
	testutil.Eventually(t, 2*time.Minute, "the host pod's pull refused by the pull proxy", func() error {
		var ok bool
		hp, ok = e.findHostPod(t, e.alpha, "default", pod.Name)
		if !ok || len(hp.Status.ContainerStatuses) == 0 || hp.Status.ContainerStatuses[0].State.Waiting == nil {
			return errors.New("no waiting container on the host yet")
		}
		if msg := hp.Status.ContainerStatuses[0].State.Waiting.Message; !strings.Contains(msg, "403 Forbidden") {
			return fmt.Errorf("host waiting message %q is not the pull proxy's refusal (403 Forbidden)", msg)
		}
		return nil
	})
	cfg, err := clientcmd.BuildConfigFromFlags("", e.hostKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	agents, err := cs.CoreV1().Pods("nest-node-network").List(e.ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + hp.Spec.NodeName})
	if err != nil || len(agents.Items) != 1 {
		t.Fatalf("the node network agent on %s: %d pods, %v", hp.Spec.NodeName, len(agents.Items), err)
	}
	testutil.Eventually(t, time.Minute, "the agent's log of the refusal", func() error {
		body, err := cs.CoreV1().Pods("nest-node-network").GetLogs(agents.Items[0].Name, &corev1.PodLogOptions{}).DoRaw(e.ctx)
		if err != nil {
			return err
		}
		for _, line := range strings.Split(string(body), "\n") {
			if strings.Contains(line, "refused a pull connection") && strings.Contains(line, `registry="`+registry+`"`) {
				return nil
			}
		}
		return fmt.Errorf("no refusal of %s in the agent's log", registry)
	})
}

// pullProxyRefusesTheNodeSubnet: the node's pull proxy refuses to dial an
// address of the host's node subnet that is no node's (the bridge, the
// local host cluster's gateway), which only the ranges the platform gives
// (here `nest dev up`'s --pull-proxy-deny, the chart's hostNetwork values)
// name: the API lists node addresses, not their subnet. Asked as containerd
// asks it, from the node's own network namespace, it answers DENIED before
// any connection; without the range it would dial the bridge and answer
// UNAVAILABLE (nothing listens on port 1 there).
func (e *env) pullProxyRefusesTheNodeSubnet(t *testing.T) {
	nodes, err := e.net.Topology(e.stateDir, 1)
	if err != nil {
		t.Fatal(err)
	}
	// The agent's pod may still be starting on the node: only a refused
	// connection to the proxy itself is waited out.
	registry := hostPort(e.net.BridgeIP().String(), 1)
	status, body := framework.PullManifestFromNode(t, nodes[0], registry)
	if status != http.StatusForbidden || !strings.Contains(body, "DENIED") {
		t.Fatalf("a manifest of %s from %s's pull proxy: %d %s; want 403 DENIED, the node subnet %s refused before it is dialled", registry, nodes[0].Name, status, body, e.net.NodeSubnet)
	}
}

// refusalsNameNothingOfTheHost: a pod whose image's registry is in the
// host's node range, and one the host refuses to create (a preStop sleep
// longer than the grace period its host pod gets), are told why in their
// own terms: their status and events name their fields and the registry
// the tenant wrote, never the host namespace, the host pod or a host range.
func (e *env) refusalsNameNothingOfTheHost(t *testing.T) {
	a := e.net
	ranges := []string{a.ClusterCIDR.String(), a.ServiceCIDR.String(), a.NodeSubnet.String()}
	// told checks what the tenant reads of its pod name, which the
	// caller waited for.
	told := func(t *testing.T, name string) {
		t.Helper()
		seen := e.tenantPod(t, e.alpha, "default", name).Status.Message + "\n" + e.tenantEvents(t, e.alpha, "default", name)
		for _, leak := range append([]string{e.alpha.Namespace, contract.HostName(e.alpha.Name, "default", name)}, ranges...) {
			if strings.Contains(seen, leak) {
				t.Errorf("the tenant reads the host's %q:\n%s", leak, seen)
			}
		}
	}

	registry := hostPort(e.nodeIPs[0], 5000)
	denied := testPod("refused-host-range", func(p *corev1.Pod) { p.Spec.Containers[0].Image = registry + "/app:1" })
	e.refused(t, denied, "spec.containers[0].image: images from "+registry+" are not allowed on the virtual node")
	testutil.Eventually(t, time.Minute, "the refusal's event", func() error {
		if ev := e.tenantEvents(t, e.alpha, "default", denied.Name); !strings.Contains(ev, "ProviderCreateFailed: "+refusedPrefix) {
			return fmt.Errorf("events: %s", ev)
		}
		return nil
	})
	told(t, denied.Name)

	year := int64(365 * 24 * 3600)
	sleeps := testPod("refused-by-the-host", func(p *corev1.Pod) {
		p.Spec.TerminationGracePeriodSeconds = &year
		p.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 3600}}}
	})
	e.create(t, e.alpha, sleeps)
	const want = "the host did not create the pod: spec.containers[0].lifecycle.preStop.sleep"
	testutil.Eventually(t, time.Minute, "the host's refusal told", func() error {
		p := e.tenantPod(t, e.alpha, "default", sleeps.Name)
		if p.Status.Reason != "ProviderFailed" || !strings.Contains(p.Status.Message, want) {
			return fmt.Errorf("status reason %q message %q", p.Status.Reason, p.Status.Message)
		}
		if ev := e.tenantEvents(t, e.alpha, "default", sleeps.Name); !strings.Contains(ev, "ProviderCreateFailed: "+want) {
			return fmt.Errorf("events: %s", ev)
		}
		return nil
	})
	told(t, sleeps.Name)
	if p, ok := e.findHostPod(t, e.alpha, "default", sleeps.Name); ok {
		t.Errorf("host pod %s exists for a pod the host refused", p.Name)
	}
}

// gracePeriodCut: a pod that asks for a year to stop, and ignores SIGTERM,
// gets the VirtualCluster's bound (300 s) on the host and is told so; its
// deletion asks the host for no more; a force delete in the tenant ends the
// host pod at once instead of leaving it to run out the grace period.
func (e *env) gracePeriodCut(t *testing.T) {
	year := int64(365 * 24 * 3600)
	pod := e.runServer(t, e.alpha, "grace-year", func(p *corev1.Pod) {
		p.Spec.TerminationGracePeriodSeconds = &year
		p.Spec.Containers[0].Command = []string{"/testapp", "ignore-term"}
	})
	hp := e.hostPod(t, e.alpha, "default", pod.Name)
	if got := ptr.Deref(hp.Spec.TerminationGracePeriodSeconds, -1); got != contract.DefaultMaxGracePeriodSeconds {
		t.Errorf("host terminationGracePeriodSeconds %d, want %d", got, contract.DefaultMaxGracePeriodSeconds)
	}
	testutil.Eventually(t, time.Minute, "a GracePeriodCut event", func() error {
		if ev := e.tenantEvents(t, e.alpha, "default", pod.Name); !strings.Contains(ev, syncer.ReasonGracePeriodCut+": ") {
			return fmt.Errorf("events: %s", ev)
		}
		return nil
	})

	cs := e.alpha.Clientset(t)
	if err := cs.CoreV1().Pods("default").Delete(e.ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, time.Minute, "the host pod terminating within the bound", func() error {
		var got corev1.Pod
		if err := e.host.Get(e.ctx, client.ObjectKeyFromObject(&hp), &got); err != nil {
			return err
		}
		if got.DeletionTimestamp == nil {
			return errors.New("not terminating yet")
		}
		if g := ptr.Deref(got.DeletionGracePeriodSeconds, -1); g > contract.DefaultMaxGracePeriodSeconds {
			t.Fatalf("host pod terminating with a grace period of %d s, above the bound", g)
		}
		return nil
	})
	// The force delete must find the host pod running out its grace
	// period: the kubelet has sent SIGTERM (its Killing event) and the
	// container lives on.
	testutil.Eventually(t, time.Minute, "the host kubelet's Killing event", func() error {
		if ev := e.tenantEvents(t, e.alpha, "default", pod.Name); !strings.Contains(ev, "Killing: ") {
			return fmt.Errorf("events: %s", ev)
		}
		return nil
	})
	var before corev1.Pod
	if err := e.host.Get(e.ctx, client.ObjectKeyFromObject(&hp), &before); err != nil {
		t.Fatalf("the host pod is gone before the force delete: %v", err)
	}
	if cs := before.Status.ContainerStatuses; len(cs) == 0 || cs[0].State.Running == nil {
		t.Fatalf("the container stopped on SIGTERM (statuses %+v): the force delete would prove nothing", cs)
	}
	forced := time.Now()
	if err := cs.CoreV1().Pods("default").Delete(e.ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	// What Nest controls: the host pod's deletion is shortened to
	// ForcedGracePeriodSeconds. A container that ignores SIGTERM was seen
	// to outlive that on the local host cluster (the host kubelet did not
	// cut the kill already under way; docs/isolation.md, Known gaps), so
	// its end is reported, not awaited.
	testutil.Eventually(t, time.Minute, "the host pod's deletion shortened to the forced grace period", func() error {
		var got corev1.Pod
		err := e.host.Get(e.ctx, client.ObjectKeyFromObject(&hp), &got)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if g := ptr.Deref(got.DeletionGracePeriodSeconds, -1); g != syncer.ForcedGracePeriodSeconds {
			return fmt.Errorf("host pod deletion grace %d s, want %d", g, syncer.ForcedGracePeriodSeconds)
		}
		return nil
	})
	t.Logf("host pod's deletion shortened %v after the tenant's force delete", time.Since(forced).Round(time.Millisecond))
}

// dnsConfigTold: nameservers past the kubelet's limit of three (the
// tenant's DNS server comes first) are dropped, and the tenant gets the
// kubelet's DNSConfigForming warning naming them.
func (e *env) dnsConfigTold(t *testing.T) {
	pod := e.runServer(t, e.alpha, "dns-limits", func(p *corev1.Pod) {
		p.Spec.DNSConfig = &corev1.PodDNSConfig{Nameservers: []string{"192.0.2.1", "192.0.2.2", "192.0.2.3"}}
	})
	hp := e.hostPod(t, e.alpha, "default", pod.Name)
	if ns := hp.Spec.DNSConfig.Nameservers; len(ns) != 3 || ns[2] != "192.0.2.2" {
		t.Errorf("host nameservers %v, want the tenant's DNS server, 192.0.2.1 and 192.0.2.2", ns)
	}
	testutil.Eventually(t, time.Minute, "a DNSConfigForming event", func() error {
		ev := e.tenantEvents(t, e.alpha, "default", pod.Name)
		if !strings.Contains(ev, syncer.ReasonDNSConfigForming+": ") || !strings.Contains(ev, "omitted 192.0.2.3") {
			return fmt.Errorf("events: %s", ev)
		}
		return nil
	})
}
