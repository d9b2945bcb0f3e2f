// Package netagent is the node network agent (`nest node-network-agent`,
// the nest-node-network DaemonSet): on each host node it gives the
// hostNetwork pods of tenants the virtual node's network, as nest-syncer
// describes it in their host pods' nodenet.Annotation (see
// internal/syncer/nodenetwork.go for why).
//
// It watches the host pods on its own node that carry the annotation and
// nest-syncer's label, finds each one's network namespace under the CNI's
// netns directory, and sets it up with nodenet.Apply. It never touches a
// namespace it cannot tie to exactly one such pod (FindPodNetns): the
// namespace must hold the pod's IP on an interface other than lo and prove
// it is the pod's, through the pod's helper answering on
// nodenet.ProofSocket(pod UID) there or the agent's own mark from an
// earlier proof, because a pod's IP alone may for a moment be another
// pod's. A pod with hostNetwork on the host is refused (that would be the
// host node's namespace), and pods without nest-syncer's label and tenant
// UID annotation, which only its host pods carry, are ignored.
//
// Beside the Agent, a ConnectionCutter (cut.go) in the same process ends
// the node's tracked connections of tenant pods whose NetworkPolicies may
// have narrowed, so the host's enforcer judges them again.
package netagent

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/nestdev/nest/internal/kindsync"
	"github.com/nestdev/nest/internal/nodenet"
	"github.com/nestdev/nest/internal/syncer/contract"
)

// DefaultNetnsDir is where containerd and CRI-O bind-mount pod network
// namespaces (the CNI's /var/run/netns).
const DefaultNetnsDir = "/var/run/netns"

// Agent sets up the network namespaces of the tenant hostNetwork pods on
// one host node.
type Agent struct {
	// Client reads pods of the host cluster (get, list, watch).
	Client kubernetes.Interface
	// NodeName is the host node the agent runs on; it looks at no other
	// node's pods.
	NodeName string
	// NetnsDir holds the pod network namespaces (DefaultNetnsDir).
	NetnsDir string
	// FindNetns returns the network namespace under dir of the pod with
	// IP ip and UID uid (FindPodNetns in this package).
	FindNetns func(dir string, ip netip.Addr, uid types.UID) (string, error)
	// Apply sets up one network namespace (nodenet.Apply).
	Apply func(netnsPath string, c nodenet.Config) error

	pods  corelisters.PodLister
	syncs *kindsync.Syncer
	mu    sync.Mutex
	// applied is, per pod key, what was last set up: the namespace and the
	// annotation, so an unchanged pod is not set up again.
	applied map[string]string
}

// Run watches the node's pods and sets them up until ctx ends.
func (a *Agent) Run(ctx context.Context) error {
	if a.NodeName == "" {
		return fmt.Errorf("the node name is empty: pass --node-name=$(NODE_NAME) from the downward API")
	}
	factory := informers.NewSharedInformerFactoryWithOptions(a.Client, 0, informers.WithTweakListOptions(a.listOptions))
	informer := factory.Core().V1().Pods()
	a.pods = informer.Lister()
	a.applied = map[string]string{}
	// The resync looks at every pod again: a sandbox made again (same pod,
	// new network namespace) is set up by then at the latest, and usually
	// at once, by the pod's new IP.
	a.syncs = kindsync.New("nodenetwork-agent", 1, a.sync, a.keys)
	_, err := informer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    a.enqueue,
		UpdateFunc: func(_, obj any) { a.enqueue(obj) },
		DeleteFunc: a.enqueue,
	})
	if err != nil {
		return err
	}
	factory.Start(ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("informer for %v did not sync", typ)
		}
	}
	klog.FromContext(ctx).Info("Node network agent started", "node", a.NodeName, "netnsDir", a.NetnsDir)
	a.syncs.Run(ctx)
	return nil
}

// keys lists every pod the informer holds, for the resync.
func (a *Agent) keys() []string {
	pods, err := a.pods.List(labels.Everything())
	if err != nil {
		return nil
	}
	out := make([]string, 0, len(pods))
	for _, p := range pods {
		out = append(out, p.Namespace+"/"+p.Name)
	}
	return out
}

// listOptions selects nest-syncer's host pods on the agent's node.
func (a *Agent) listOptions(o *metav1.ListOptions) {
	o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", a.NodeName).String()
	req, _ := labels.NewRequirement(contract.LabelTenantOf, selection.Exists, nil)
	o.LabelSelector = labels.NewSelector().Add(*req).String()
}

func (a *Agent) enqueue(obj any) {
	if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
		a.syncs.Add(key)
	}
}

// sync sets up the network namespace of the pod key, if it wants one and
// it differs from what was set up last.
func (a *Agent) sync(ctx context.Context, key string) (time.Duration, error) {
	pod, err := nodePod(a.pods, a.NodeName, key)
	if err != nil {
		return 0, err
	}
	if pod == nil {
		// Its network namespace goes with its sandbox.
		a.forget(key)
		return 0, nil
	}
	ip, c, err := Wanted(pod)
	if err != nil {
		// Retrying cannot help; the pod's next change is looked at again.
		return 0, kindsync.Terminal(fmt.Errorf("pod %s: node network refused: %w", key, err))
	}
	if !ip.IsValid() {
		return 0, nil
	}
	path, err := a.FindNetns(a.NetnsDir, ip, pod.UID)
	if err != nil {
		return 0, retrying(ctx, key, err)
	}
	done := string(pod.UID) + "\n" + path + "\n" + pod.Annotations[nodenet.Annotation]
	if a.last(key) == done {
		return 0, nil
	}
	if err := a.Apply(path, c); err != nil {
		return 0, retrying(ctx, key, err)
	}
	a.remember(key, done)
	klog.FromContext(ctx).Info("Pod's node network set up", "pod", key, "netns", path, "mappings", len(c.Mappings))
	return 0, nil
}

// nodePod is the pod of key ("namespace/name") in pods when it runs on
// node; nil when it is gone, its key does not parse, or it is another
// node's: the informers' field selector keeps those away, and a pod of
// another node is never touched here, whatever the API server sends.
func nodePod(pods corelisters.PodLister, node, key string) (*corev1.Pod, error) {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil, nil
	}
	pod, err := pods.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if pod.Spec.NodeName != node {
		return nil, nil
	}
	return pod, nil
}

// retrying logs err where an operator looks first (the pod's helper waits
// for the agent and names it when it gives up) and returns it for a retry
// with backoff.
func retrying(ctx context.Context, key string, err error) error {
	klog.FromContext(ctx).Info("Setting up a pod's network failed; retrying", "pod", key, "err", err.Error())
	return err
}

func (a *Agent) last(key string) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.applied[key]
}

func (a *Agent) remember(key, done string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.applied[key] = done
}

func (a *Agent) forget(key string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.applied, key)
}

// Wanted is the pod's IP and the network its namespace should get, for a
// pod that wants one; an invalid IP for one that does not (yet): no
// annotation, not running, no IPv4 address. A pod on the host node's own
// network, or with an annotation that does not parse, is an error: the
// agent never sets it up.
func Wanted(pod *corev1.Pod) (netip.Addr, nodenet.Config, error) {
	raw, ok := pod.Annotations[nodenet.Annotation]
	if !ok || pod.Labels[contract.LabelTenantOf] == "" || pod.Annotations[contract.AnnotationTenantUID] == "" {
		return netip.Addr{}, nodenet.Config{}, nil
	}
	if pod.Spec.HostNetwork {
		return netip.Addr{}, nodenet.Config{}, fmt.Errorf("spec.hostNetwork is true: the agent sets up pod network namespaces only, never the host node's")
	}
	c, err := nodenet.Parse(raw)
	if err != nil {
		return netip.Addr{}, nodenet.Config{}, fmt.Errorf("annotation %s: %w", nodenet.Annotation, err)
	}
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed || pod.DeletionTimestamp != nil {
		return netip.Addr{}, nodenet.Config{}, nil
	}
	ip, err := netip.ParseAddr(pod.Status.PodIP)
	if err != nil || !ip.Is4() {
		return netip.Addr{}, nodenet.Config{}, nil
	}
	return ip, ForPod(c, ip.String()), nil
}

// ForPod is c as the pod with IP podIP gets it: its own host ports reach
// it at the node's address only, since its 127.0.0.1 is its own loopback,
// where it may listen itself, as a process on a node does.
func ForPod(c nodenet.Config, podIP string) nodenet.Config {
	out := nodenet.Config{NodeIP: c.NodeIP}
	for _, m := range c.Mappings {
		if m.PodIP == podIP {
			switch m.HostIP {
			case "127.0.0.1":
				continue
			case nodenet.AllAddresses:
				m.HostIP = c.NodeIP
			}
		}
		out.Mappings = append(out.Mappings, m)
	}
	return out
}
