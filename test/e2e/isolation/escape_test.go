package isolation

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nestdev/nest/internal/controlplane"
	"github.com/nestdev/nest/internal/netagent"
	"github.com/nestdev/nest/internal/nodenet"
	"github.com/nestdev/nest/internal/syncer/contract"
	"github.com/nestdev/nest/internal/testutil"
)

// Escape: a pod that would leave its container for the host node is refused
// with a reason on the tenant pod, or runs hardened.
func (e *env) escapes() []testCase {
	container := func(f func(*corev1.Container)) func(*corev1.Pod) {
		return func(p *corev1.Pod) { f(&p.Spec.Containers[0]) }
	}
	security := func(f func(*corev1.SecurityContext)) func(*corev1.Pod) {
		return container(func(c *corev1.Container) {
			c.SecurityContext = &corev1.SecurityContext{}
			f(c.SecurityContext)
		})
	}
	volume := func(name string, src corev1.VolumeSource) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: name, VolumeSource: src})
		}
	}
	refuse := func(name, want string, mutate ...func(*corev1.Pod)) testCase {
		return testCase{name, func(t *testing.T) { e.refused(t, testPod("escape-"+name, mutate...), want) }}
	}
	httpProbe := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Host: e.nodeIPs[0], Port: intstr.FromInt32(10250), Path: "/pods"}}}
	return []testCase{
		refuse("privileged", "privileged", security(func(s *corev1.SecurityContext) { s.Privileged = ptr.To(true) })),
		{"privileged-container-confined-has-no-host-privileges", e.confinedPrivileged},
		{"host-network-runs-on-the-pod-network", e.hostNetworkOnPodNetwork},
		refuse("host-pid-and-ipc", "host namespaces", func(p *corev1.Pod) { p.Spec.HostPID, p.Spec.HostIPC = true, true }),
		{"host-port-is-not-opened-on-the-host", e.hostPortNotOnHost},
		{"host-network-pod-reaches-host-ports-inside-its-own-namespace", e.hostNetworkReachesHostPorts},
		refuse("host-path", "hostPath", volume("root", corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}})),
		{"persistent-volume-on-a-host-path", e.hostPathClaim},
		refuse("csi-inline", "csi", volume("csi", corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: "hostpath.csi.k8s.io"}})),
		refuse("nfs", "nfs", volume("nfs", corev1.VolumeSource{NFS: &corev1.NFSVolumeSource{Server: "127.0.0.1", Path: "/"}})),
		refuse("generic-ephemeral", "ephemeral", volume("scratch", corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{
			VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
			}},
		}})),
		refuse("capability-sys-admin", "capabilities", security(func(s *corev1.SecurityContext) {
			s.Capabilities = &corev1.Capabilities{Add: []corev1.Capability{"SYS_ADMIN"}}
		})),
		refuse("unsafe-sysctl", "sysctls", func(p *corev1.Pod) {
			p.Spec.SecurityContext = &corev1.PodSecurityContext{Sysctls: []corev1.Sysctl{{Name: "kernel.msgmax", Value: "65536"}}}
		}),
		refuse("seccomp-unconfined", "seccompProfile", security(func(s *corev1.SecurityContext) {
			s.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}
		})),
		refuse("seccomp-localhost", "Localhost profiles name files on host nodes", security(func(s *corev1.SecurityContext) {
			s.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr.To("profiles/audit.json")}
		})),
		refuse("apparmor-unconfined", "AppArmor profile", security(func(s *corev1.SecurityContext) {
			s.AppArmorProfile = &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined}
		})),
		refuse("apparmor-localhost", "Localhost profiles name files on host nodes", security(func(s *corev1.SecurityContext) {
			s.AppArmorProfile = &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeLocalhost, LocalhostProfile: ptr.To("host-profile")}
		})),
		{"proc-mount-unmasked", e.unmaskedProc},
		refuse("probe-aimed-at-a-host-kubelet", "probe", container(func(c *corev1.Container) { c.LivenessProbe = httpProbe })),
		refuse("lifecycle-hook-aimed-at-a-host-kubelet", "host", container(func(c *corev1.Container) {
			c.Lifecycle = &corev1.Lifecycle{PostStart: &corev1.LifecycleHandler{HTTPGet: httpProbe.HTTPGet}}
		})),
		{"runtime-class", e.runtimeClass},
		{"host-node-selection-is-cleared", e.hostNodeSelection},
		{"kubectl-debug-node", e.debugNode},
		{"privileged-kubectl-debug-container-never-reaches-the-host", e.debugEphemeral},
		refuse("windows", "spec.os.name", func(p *corev1.Pod) { p.Spec.OS = &corev1.PodOS{Name: corev1.Windows} }),
		{"runtime-default-seccomp-and-no-net-raw", e.hardenedRuntime},
		{"host-namespace-enforces-pod-security-even-past-the-syncer", e.hostPodSecurity},
	}
}

// confinedPrivileged: in beta, which confines privileged containers, a
// privileged container runs, but as its host pod has it: not privileged,
// without CAP_SYS_ADMIN or the host's devices, and still without NET_RAW;
// the tenant is told so.
func (e *env) confinedPrivileged(t *testing.T) {
	e.runServer(t, e.beta, "escape-confined", func(p *corev1.Pod) {
		p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
	})
	hp := e.hostPod(t, e.beta, "default", "escape-confined")
	if sc := hp.Spec.Containers[0].SecurityContext; sc == nil || sc.Privileged != nil {
		t.Errorf("host container securityContext %+v, want privileged cleared", sc)
	}
	status := e.mustExec(t, e.beta, "escape-confined", "cat", "/proc/self/status")
	const netRawBit, sysAdminBit = 13, 21
	capEff, capBnd := statusField(t, status, "CapEff"), statusField(t, status, "CapBnd")
	if capBnd == 0 {
		t.Fatalf("CapBnd is empty: the checks below would pass for any container")
	}
	if capEff&(1<<sysAdminBit) != 0 || capBnd&(1<<sysAdminBit) != 0 {
		t.Errorf("CapEff %x CapBnd %x hold CAP_SYS_ADMIN", capEff, capBnd)
	}
	if capBnd&(1<<netRawBit) != 0 {
		t.Errorf("CapBnd %x holds CAP_NET_RAW", capBnd)
	}
	// A privileged container gets every host device; /dev/null is the
	// control that the probe reads /dev at all.
	if _, err := exec(e.ctx, e.beta, "escape-confined", "statfs", "/dev/null"); err != nil {
		t.Fatalf("statfs /dev/null: %v: the device check cannot tell anything", err)
	}
	if out, err := exec(e.ctx, e.beta, "escape-confined", "statfs", "/dev/mem"); err == nil {
		t.Errorf("the container sees the host's /dev/mem (%s)", out)
	}
	testutil.Eventually(t, time.Minute, "PrivilegedConfined event", func() error {
		if ev := e.tenantEvents(t, e.beta, "default", "escape-confined"); !strings.Contains(ev, "PrivilegedConfined") {
			return errorf("events %q", ev)
		}
		return nil
	})
}

// hostPathClaim: a tenant's PersistentVolume on a host path, bound to a
// claim that a pod mounts.
func (e *env) hostPathClaim(t *testing.T) {
	cs := e.alpha.Clientset(t)
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "host-etc"},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/etc"}},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			ClaimRef:                      &corev1.ObjectReference{Namespace: "default", Name: "host-etc"},
		},
	}
	if _, err := cs.CoreV1().PersistentVolumes().Create(e.ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "host-etc", Namespace: "default"},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, VolumeName: "host-etc", StorageClassName: ptr.To(""),
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	if _, err := cs.CoreV1().PersistentVolumeClaims("default").Create(e.ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.refused(t, testPod("escape-host-path-claim", func(p *corev1.Pod) {
		p.Spec.Volumes = []corev1.Volume{{Name: "etc", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "host-etc"}}}}
	}), "persistentVolumeClaim")
}

// unmaskedProc: the tenant API server only accepts an Unmasked /proc in a
// user namespace (hostUsers: false), which baseline Pod Security allows since
// v1.35; the host pod, if there is one, must keep the user namespace.
func (e *env) unmaskedProc(t *testing.T) {
	unmasked := func(p *corev1.Pod) {
		p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{ProcMount: ptr.To(corev1.UnmaskedProcMount)}
	}
	if _, err := e.alpha.Clientset(t).CoreV1().Pods("default").Create(e.ctx, testPod("escape-proc-host-users", unmasked), metav1.CreateOptions{}); err == nil {
		t.Error("the tenant API server accepted an Unmasked /proc outside a user namespace")
	}
	pod := testPod("escape-proc-unmasked", unmasked, func(p *corev1.Pod) { p.Spec.HostUsers = ptr.To(false) })
	e.create(t, e.alpha, pod)
	testutil.Eventually(t, time.Minute, "the virtual node refuses the pod or runs it in a user namespace", func() error {
		if hp, ok := e.findHostPod(t, e.alpha, "default", pod.Name); ok {
			if hp.Spec.HostUsers == nil || *hp.Spec.HostUsers {
				t.Fatalf("host pod %s has an Unmasked /proc outside a user namespace", hp.Name)
			}
			return nil
		}
		if p := e.tenantPod(t, e.alpha, "default", pod.Name); strings.HasPrefix(p.Status.Message, refusedPrefix) {
			return nil
		}
		return errorf("no host pod and no refusal yet")
	})
}

// hostNetworkOnPodNetwork: a tenant pod with hostNetwork runs, on a network
// namespace of its own: its host pod is not on the host's network and its
// address is no host node's.
func (e *env) hostNetworkOnPodNetwork(t *testing.T) {
	e.create(t, e.alpha, testPod("escape-host-network", func(p *corev1.Pod) { p.Spec.HostNetwork = true }))
	pod := e.waitRunning(t, e.alpha, "default", "escape-host-network")
	if hp := e.hostPod(t, e.alpha, "default", "escape-host-network"); hp.Spec.HostNetwork {
		t.Fatalf("host pod %s is on the host's network", hp.Name)
	}
	if pod.Status.PodIP == "" {
		t.Fatal("the tenant pod reports no IP")
	}
	if slices.Contains(e.nodeIPs, pod.Status.PodIP) {
		t.Errorf("the tenant pod's IP %s is a host node's", pod.Status.PodIP)
	}
}

// hostPortNotOnHost: a host port is the virtual node's; the host pod has
// none, so nothing listens on a host node for the tenant.
func (e *env) hostPortNotOnHost(t *testing.T) {
	// hostNetwork too: the API server makes its ports host ports.
	e.create(t, e.alpha, testPod("escape-host-port", func(p *corev1.Pod) {
		p.Spec.HostNetwork = true
		p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 8080, HostPort: 8080}}
	}))
	e.waitRunning(t, e.alpha, "default", "escape-host-port")
	hp := e.hostPod(t, e.alpha, "default", "escape-host-port")
	if hp.Spec.HostNetwork {
		t.Errorf("host pod %s is on the host's network", hp.Name)
	}
	if len(hp.Spec.Containers[0].Ports) == 0 {
		t.Fatalf("host pod %s lost the container port", hp.Name)
	}
	for _, p := range hp.Spec.Containers[0].Ports {
		if p.HostPort != 0 || p.HostIP != "" {
			t.Errorf("host pod %s has host port %+v", hp.Name, p)
		}
	}
}

// hostNetworkReachesHostPorts: a hostNetwork pod reaches another pod's
// host port at 127.0.0.1 and at the virtual node's address, as on a node,
// and has that address local; the node network agent set that up in the
// pod's namespace only (noNodeNetworkOnHostNodes).
func (e *env) hostNetworkReachesHostPorts(t *testing.T) {
	const hostPort = 18080
	e.runServer(t, e.alpha, "hostport-server", func(p *corev1.Pod) {
		p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 8080, HostPort: hostPort}}
	})
	e.runServer(t, e.alpha, "hostport-client", func(p *corev1.Pod) { p.Spec.HostNetwork = true })
	node, err := e.alpha.Clientset(t).CoreV1().Nodes().Get(e.ctx, controlplane.VirtualNodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nodeIP := internalIP(node)
	if nodeIP == "" {
		t.Fatalf("virtual node %s has no InternalIP", node.Name)
	}
	for _, addr := range []string{"127.0.0.1", nodeIP} {
		url := fmt.Sprintf("http://%s/hostname", net.JoinHostPort(addr, strconv.Itoa(hostPort)))
		if got := e.mustExec(t, e.alpha, "hostport-client", "get", url); got != "hostport-server" {
			t.Errorf("hostNetwork pod got %q from %s, want the host port's pod, hostport-server", got, url)
		}
	}
	local := regexp.MustCompile(`\|-- ` + regexp.QuoteMeta(nodeIP) + `\n\s+/32 host LOCAL`)
	if trie := e.mustExec(t, e.alpha, "hostport-client", "cat", "/proc/net/fib_trie"); !local.MatchString(trie) {
		t.Errorf("the virtual node's address %s is not local in the hostNetwork pod:\n%s", nodeIP, trie)
	}
	e.noNodeNetworkOnHostNodes(t, nodeIP)
}

// noNodeNetworkOnHostNodes: the agent changed no host node's network: the
// network namespace of each host node (found by its InternalIP) and the
// machine's own have neither the virtual node's address on lo nor the
// agent's nftables table.
func (e *env) noNodeNetworkOnHostNodes(t *testing.T, nodeIP string) {
	var nodeNetns []string
	for _, ip := range e.nodeIPs {
		found, err := netagent.Candidates("/run/netns", netip.MustParseAddr(ip))
		if err != nil || len(found) != 1 {
			t.Fatalf("the network namespace of host node %s: %v, %v (want one)", ip, found, err)
		}
		nodeNetns = append(nodeNetns, found[0])
	}
	self, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range append(nodeNetns, "/proc/self/ns/net") {
		s, err := nodenet.Inspect(path)
		if err != nil {
			t.Fatalf("inspect %s: %v", path, err)
		}
		if s.Table || s.NodeIP != "" || strings.Contains(s.NodeIP, nodeIP) {
			t.Errorf("host network namespace %s (this process's is %s) has the agent's work: table %v, addresses on lo %q", path, self, s.Table, s.NodeIP)
		}
	}
}

// internalIP is the node's InternalIP, "" without one.
func internalIP(n *corev1.Node) string {
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	return ""
}

func (e *env) runtimeClass(t *testing.T) {
	rc := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "host-runc"}, Handler: "runc"}
	if _, err := e.alpha.Clientset(t).NodeV1().RuntimeClasses().Create(e.ctx, rc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.refused(t, testPod("escape-runtime-class", func(p *corev1.Pod) { p.Spec.RuntimeClassName = ptr.To("host-runc") }), "runtimeClassName")
}

// hostNodeSelection: nodeSelector and tolerations aimed at the host's
// control-plane node do not reach the host pod; the host scheduler places it.
func (e *env) hostNodeSelection(t *testing.T) {
	e.create(t, e.alpha, testPod("escape-node-selection", func(p *corev1.Pod) {
		p.Spec.NodeSelector = map[string]string{"node-role.kubernetes.io/control-plane": ""}
		p.Spec.Tolerations = []corev1.Toleration{{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.TolerationOpExists}, {Operator: corev1.TolerationOpExists}}
	}))
	e.waitRunning(t, e.alpha, "default", "escape-node-selection")
	hp := e.hostPod(t, e.alpha, "default", "escape-node-selection")
	if len(hp.Spec.NodeSelector) != 0 || hp.Spec.Affinity != nil {
		t.Errorf("host pod keeps node selection: nodeSelector %v affinity %v", hp.Spec.NodeSelector, hp.Spec.Affinity)
	}
	for _, tol := range hp.Spec.Tolerations {
		if tol.Key == "" || strings.Contains(tol.Key, "control-plane") {
			t.Errorf("host pod keeps the tenant's toleration %+v", tol)
		}
	}
}

// debugNode: `kubectl debug node/...` makes a pod with the host's
// namespaces and root file system.
func (e *env) debugNode(t *testing.T) {
	out := e.alpha.Kubectl(t, e.ctx, "debug", "node/nest-virtual-node", "--image=nest.local/testapp:dev", "--image-pull-policy=Never", "--profile=sysadmin")
	name := ""
	for _, f := range strings.Fields(out) {
		if strings.HasPrefix(f, "node-debugger-") {
			name = f
		}
	}
	if name == "" {
		t.Fatalf("no debugging pod named in %q", out)
	}
	t.Cleanup(func() { _, _ = e.alpha.KubectlErr(e.ctx, "delete", "pod", name, "--grace-period=0") })
	testutil.Eventually(t, time.Minute, name+" refused", func() error {
		p := e.tenantPod(t, e.alpha, "default", name)
		if !strings.HasPrefix(p.Status.Message, refusedPrefix) {
			return errorf("status %q %q", p.Status.Reason, p.Status.Message)
		}
		return nil
	})
	if p, ok := e.findHostPod(t, e.alpha, "default", name); ok {
		t.Errorf("host pod %s exists for the node debugging pod", p.Name)
	}
}

// debugEphemeral: an ephemeral container added with `kubectl debug
// --profile=sysadmin` (privileged) never reaches the host pod, and the pod's
// later changes still do. (A debug container Pod Security allows does reach
// it: the conformance smoke subset's ephemeral-container spec.)
func (e *env) debugEphemeral(t *testing.T) {
	e.runServer(t, e.alpha, "escape-debug-target")
	e.alpha.Kubectl(t, e.ctx, "debug", "escape-debug-target", "--image=nest.local/testapp:dev", "--image-pull-policy=Never", "--profile=sysadmin", "--container=dbg", "--", "/testapp", "sleep", "x")
	if p := e.tenantPod(t, e.alpha, "default", "escape-debug-target"); len(p.Spec.EphemeralContainers) != 1 {
		t.Fatalf("tenant pod has %d ephemeral containers, want the debug container", len(p.Spec.EphemeralContainers))
	}
	// A later change the syncer must carry shows it has seen the pod since.
	e.alpha.Kubectl(t, e.ctx, "label", "pod", "escape-debug-target", "app=after-debug", "--overwrite")
	labelled := time.Now()
	// Two minutes: a label normally reaches the host within a second, and
	// once, on a loaded CI machine, did not within one. A failure after
	// 20 s names the pod's events, which say what the syncer did.
	testutil.Eventually(t, 2*time.Minute, "host pod carries the later label", func() error {
		hp := e.hostPod(t, e.alpha, "default", "escape-debug-target")
		if hp.Labels["app"] != "after-debug" {
			if time.Since(labelled) > 20*time.Second {
				return errorf("host label app=%q, spec hash %q; the tenant pod's events: %s", hp.Labels["app"], hp.Annotations[contract.AnnotationSpecHash], e.tenantEvents(t, e.alpha, "default", "escape-debug-target"))
			}
			return errorf("host label app=%q", hp.Labels["app"])
		}
		if len(hp.Spec.EphemeralContainers) != 0 {
			t.Fatalf("host pod has ephemeral containers %v", hp.Spec.EphemeralContainers)
		}
		return nil
	})
	t.Logf("the label reached the host pod %s after it was set", time.Since(labelled).Round(10*time.Millisecond))
}

// hostPodSecurity: a privileged pod written straight into the tenant's host
// namespace, as a compromised syncer could, is refused by the host's own Pod
// Security admission.
func (e *env) hostPodSecurity(t *testing.T) {
	var ns corev1.Namespace
	if err := e.host.Get(e.ctx, client.ObjectKey{Name: e.alpha.Namespace}, &ns); err != nil {
		t.Fatal(err)
	}
	if got := ns.Labels["pod-security.kubernetes.io/enforce"]; got != "baseline" {
		t.Errorf("host namespace %s enforces Pod Security level %q, want baseline", ns.Name, got)
	}
	p := testPod("escape-straight-to-the-host", func(p *corev1.Pod) {
		p.Namespace, p.Spec.NodeName = e.alpha.Namespace, ""
		p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
	})
	err := e.host.Create(e.ctx, p)
	if err == nil {
		_ = e.host.Delete(e.ctx, p)
		t.Fatal("the host accepted a privileged pod in the tenant's host namespace")
	}
	if !strings.Contains(err.Error(), "violates PodSecurity") {
		t.Errorf("refused, but not by Pod Security: %v", err)
	}
}

// hardenedRuntime: a pod that states nothing runs with the runtime's
// seccomp filter and without CAP_NET_RAW, on the host pod and in the kernel.
func (e *env) hardenedRuntime(t *testing.T) {
	e.runServer(t, e.alpha, "escape-hardened")
	hp := e.hostPod(t, e.alpha, "default", "escape-hardened")
	if sc := hp.Spec.SecurityContext; sc == nil || sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("host pod seccomp %+v, want RuntimeDefault", hp.Spec.SecurityContext)
	}
	status := e.mustExec(t, e.alpha, "escape-hardened", "cat", "/proc/self/status")
	if !strings.Contains(status, "Seccomp:\t2") {
		t.Errorf("/proc/self/status has no seccomp filter mode 2:\n%s", status)
	}
	capBnd := statusField(t, status, "CapBnd")
	const netRawBit = 13
	if capBnd&(1<<netRawBit) != 0 {
		t.Errorf("CapBnd %x still holds CAP_NET_RAW", capBnd)
	}
	if capBnd == 0 {
		t.Errorf("CapBnd is empty: the check would pass for any pod")
	}
}
