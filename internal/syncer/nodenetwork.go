package syncer

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"net"
	"os"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/nestdev/nest/internal/kindsync"
	"github.com/nestdev/nest/internal/nodenet"
	"github.com/nestdev/nest/internal/syncer/contract"
)

// A hostNetwork tenant pod runs in a network namespace of its own on the
// host's pod network (scheduleOnHost), so the node's address and the host
// ports of the virtual node are not its own, as they are on a node: `curl
// --interface <node IP>`, `curl <node IP>:<host port>` and
// `127.0.0.1:<host port>` reach nothing. The node network agent
// (nest node-network-agent, a privileged DaemonSet of Nest's on host nodes)
// gives them to it: it reads the host pod's annotation nodenet.Annotation,
// written here, and sets up that pod's network namespace only, never a host
// node's (package nodenet). The tenant can neither write the annotation
// (the nest.dev/ prefix is reserved) nor change what the agent set up
// (it has no NET_ADMIN).
//
// The annotation of each hostNetwork host pod on a virtual node holds the
// node's address and every host port a pod on that node holds, with the
// pod's IP: it is written when the host pod is made and kept by the node
// network syncer, keyed by virtual node, as pods come and go. A helper init
// container holds the pod's containers until the agent is done, as the
// kubelet holds them until the network is set up.

const (
	// nodeNetworkName names the helper init container that waits for the
	// agent; tenant pods may not use it.
	nodeNetworkName = "nest-node-network"
	// nodeNetworkCommand is that helper's subcommand of nest-syncer.
	nodeNetworkCommand = "wait-node-network"
	// nodeNetworkWait is how long the helper waits before it fails (and
	// the kubelet runs it again), with a message naming the agent.
	nodeNetworkWait = 2 * time.Minute
)

// NodeNetworkOf is the network the virtual node with address nodeIP gives
// its hostNetwork pods: a mapping for each host port a pod in pods (the
// pods bound to that node) holds, to the pod's IP as ipOf gives it (the
// host pod's, which the host kubelet writes; "" for none yet). Finished
// pods and pods without an IPv4 address hold none.
//
// A mapping nodenet refuses (a hostIP that is no IPv4 address: the API
// server does not check it) is left out, and so is a port another pod
// holds already (a replacement admitted while the cache still had its
// predecessor: the older pod keeps it), and every mapping past
// nodenet.MaxMappings: one pod never keeps the node's other pods from
// their network.
func NodeNetworkOf(nodeIP string, pods []*corev1.Pod, ipOf func(*corev1.Pod) string) nodenet.Config {
	sorted := slices.Clone(pods)
	slices.SortStableFunc(sorted, func(a, b *corev1.Pod) int {
		return cmp.Or(a.CreationTimestamp.Compare(b.CreationTimestamp.Time), cmp.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name))
	})
	c := nodenet.Config{NodeIP: nodeIP}
	var taken []HostPort
	for _, p := range sorted {
		ip := ipOf(p)
		if !holdsHostPorts(p, ip) {
			continue
		}
		for _, m := range hostPortMappings(p, ip) {
			h := HostPort{Protocol: corev1.Protocol(m.Protocol), IP: m.HostIP, Port: m.HostPort}
			if len(c.Mappings) == nodenet.MaxMappings || slices.ContainsFunc(taken, h.conflicts) || !accepted(c, m) {
				continue
			}
			taken = append(taken, h)
			c.Mappings = append(c.Mappings, m)
		}
	}
	return c
}

// accepted reports whether nodenet takes c with m added.
func accepted(c nodenet.Config, m nodenet.Mapping) bool {
	c.Mappings = append(slices.Clip(c.Mappings), m)
	return c.Validate() == nil
}

// holdsHostPorts reports whether p's host ports can be forwarded to its IP
// ip: it is not finished and ip is IPv4 (the agent speaks IPv4 only).
func holdsHostPorts(p *corev1.Pod, ip string) bool {
	if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return false
	}
	return ip != "" && !strings.Contains(ip, ":")
}

// hostPortMappings forwards each host port of p's containers to its
// container port on ip, with the kubelet's defaults (TCP, every address).
func hostPortMappings(p *corev1.Pod, ip string) []nodenet.Mapping {
	var out []nodenet.Mapping
	for _, list := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for _, c := range list {
			for _, port := range c.Ports {
				if port.HostPort <= 0 {
					continue
				}
				out = append(out, nodenet.Mapping{
					Protocol: string(cmp.Or(port.Protocol, corev1.ProtocolTCP)), HostIP: cmp.Or(port.HostIP, nodenet.AllAddresses),
					HostPort: port.HostPort, PodIP: ip, PodPort: port.ContainerPort,
				})
			}
		}
	}
	return out
}

// waitForNodeNetwork puts the helper that waits for the node network agent
// first among a hostNetwork pod's init containers (node is its virtual
// node, "" for a pod on the pod network).
func (t Translator) waitForNodeNetwork(spec *corev1.PodSpec, node string) {
	if !t.NodeNetwork || t.HelperImage == "" || node == "" {
		return
	}
	c := t.helperContainer(nodeNetworkName, []string{contract.SyncerBinary, nodeNetworkCommand,
		"--timeout=" + nodeNetworkWait.String(), "--pod-uid=$(" + envPodUID + ")"}, false)
	c.Env = []corev1.EnvVar{{Name: envPodUID, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.uid"}}}}
	spec.InitContainers = append([]corev1.Container{c}, spec.InitContainers...)
}

// envPodUID carries the host pod's UID to the node network helper.
const envPodUID = "NEST_POD_UID"

// RunNodeNetworkHelper is `nest-syncer wait-node-network`, the helper init
// container of hostNetwork pods: it proves to the agent that this network
// namespace is pod --pod-uid's by listening on nodenet.ProofSocket there,
// returns once nodenet.ReadySysctl reads 1, which the agent sets last, and
// fails after --timeout.
func RunNodeNetworkHelper(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet(nodeNetworkCommand, flag.ContinueOnError)
	timeout := fs.Duration("timeout", nodeNetworkWait, "give up after this long")
	ready := fs.String("ready-file", nodenet.ReadySysctl, "the file the agent sets to 1 when it is done")
	uid := fs.String("pod-uid", "", "this host pod's UID, which names the socket the agent checks (required)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *uid == "" {
		return fmt.Errorf("--pod-uid is required: the host pod's metadata.uid")
	}
	proof, err := net.Listen("unix", nodenet.ProofSocket(*uid))
	if err != nil {
		return fmt.Errorf("listen on the node network agent's proof socket: %w", err)
	}
	defer proof.Close()
	go acceptAll(proof)
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, *timeout, true, func(context.Context) (bool, error) {
		b, err := os.ReadFile(*ready)
		if err != nil {
			return false, fmt.Errorf("read %s: %w", *ready, err)
		}
		return strings.TrimSpace(string(b)) == "1", nil
	})
	if wait.Interrupted(err) {
		return fmt.Errorf("the node network agent did not set up this pod's network within %s: is the nest-node-network DaemonSet running on this host node?", *timeout)
	}
	return err
}

// acceptAll accepts and closes connections on l until it is closed: the
// agent only needs its dial to succeed.
func acceptAll(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		c.Close()
	}
}

// nodeNetworkKey is the node network syncer's key of a tenant pod's
// virtual node; "" when the pod does not concern it (it neither holds a
// host port nor is on the node's network).
func nodeNetworkKey(p *corev1.Pod) string {
	if p.Spec.NodeName == "" || (!p.Spec.HostNetwork && len(HostPorts(&p.Spec)) == 0) {
		return ""
	}
	return p.Spec.NodeName
}

// nodeNetwork is the encoded annotation of virtual node node's hostNetwork
// pods, from the tenant pods bound to it.
func (s *syncer) nodeNetwork(node string) (string, error) {
	all, err := s.pods.Lister().List(labels.Everything())
	if err != nil {
		return "", err
	}
	var on []*corev1.Pod
	for _, p := range all {
		if p.Spec.NodeName == node {
			on = append(on, p)
		}
	}
	return NodeNetworkOf(s.o.NodeIP, on, s.provider.hostPodIP).Encode()
}

// hostPodIP is the IP the host kubelet gave the tenant pod's host pod; ""
// without one. The tenant pod's own status is the tenant's to write.
func (p *podProvider) hostPodIP(tenant *corev1.Pod) string {
	host, err := p.hostPods.Get(contract.HostName(p.tr.VirtualCluster, tenant.Namespace, tenant.Name))
	if err != nil || !p.isHostPodOf(host, tenant) {
		return ""
	}
	return host.Status.PodIP
}

// syncNodeNetwork writes virtual node node's network to the annotation of
// each of its hostNetwork pods' host pods that does not hold it yet.
func (s *syncer) syncNodeNetwork(ctx context.Context, node string) (time.Duration, error) {
	want, err := s.nodeNetwork(node)
	if err != nil {
		return 0, kindsync.Terminal(fmt.Errorf("virtual node %s: %w", node, err))
	}
	all, err := s.pods.Lister().List(labels.Everything())
	if err != nil {
		return 0, err
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{nodenet.Annotation: want}}})
	if err != nil {
		return 0, err
	}
	for _, p := range all {
		if p.Spec.NodeName != node || !p.Spec.HostNetwork {
			continue
		}
		host, err := s.provider.hostPods.Get(contract.HostName(s.o.VirtualCluster, p.Namespace, p.Name))
		if err != nil || !s.provider.isHostPodOf(host, p) || host.Annotations[nodenet.Annotation] == want {
			// A host pod not made yet gets the annotation when it is.
			continue
		}
		if _, err := s.provider.host.CoreV1().Pods(s.o.HostNamespace).Patch(ctx, host.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return 0, fmt.Errorf("host pod %s: write %s: %w", host.Name, nodenet.Annotation, err)
		}
		klog.FromContext(ctx).V(2).Info("Node network updated", "pod", klog.KObj(p), "node", node)
	}
	return 0, nil
}

// nodeNetworkChanged puts the virtual node of p on the node network
// syncer's queue when p concerns it.
func (s *syncer) nodeNetworkChanged(p *corev1.Pod) {
	if key := nodeNetworkKey(p); key != "" && s.nodeNetworks != nil {
		s.nodeNetworks.Add(key)
	}
}

// hostPodNetworkChanged puts the virtual node of host's tenant pod on the
// node network syncer's queue: a host pod that appeared (made after its
// node's network last changed) or got its IP.
func (s *syncer) hostPodNetworkChanged(host *corev1.Pod) {
	if s.nodeNetworks == nil {
		return
	}
	if tenant, ok := s.provider.tenantPodOf(host); ok {
		s.nodeNetworkChanged(tenant)
	}
}

// withNodeNetwork gives host, the host pod of a hostNetwork tenant pod,
// its virtual node's network from the start, so the agent sets it up before
// the helper lets the containers run.
func (p *podProvider) withNodeNetwork(tenant, host *corev1.Pod) error {
	if p.nodeNetwork == nil || !tenant.Spec.HostNetwork {
		return nil
	}
	network, err := p.nodeNetwork(cmp.Or(tenant.Spec.NodeName, p.tr.NodeName))
	if err != nil {
		return fmt.Errorf("the virtual node's network: %w", err)
	}
	host.Annotations[nodenet.Annotation] = network
	return nil
}

// keepNodeNetwork is annotations, a tenant pod's translated ones, with the
// node network annotation the node network syncer wrote on host: an update
// of the tenant pod does not take it away.
func keepNodeNetwork(annotations map[string]string, host *corev1.Pod) map[string]string {
	network, ok := host.Annotations[nodenet.Annotation]
	if !ok {
		return annotations
	}
	out := maps.Clone(annotations)
	if out == nil {
		out = map[string]string{}
	}
	out[nodenet.Annotation] = network
	return out
}
