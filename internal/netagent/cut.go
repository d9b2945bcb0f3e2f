package netagent

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/nestdev/nest/internal/kindsync"
	"github.com/nestdev/nest/internal/kube"
	"github.com/nestdev/nest/internal/syncer/contract"
)

// DefaultCutAgain is when ConnectionCutter cuts a pod's connections again
// after the first cut, each delay counted from the cut before. The host's
// NetworkPolicy enforcer applies a policy from its own watch and tells no
// one when: a connection cut before the enforcer has the policy is judged
// by the old rules and lives on, so the cut is repeated once the enforcer
// has surely caught up (it applies a policy about a second after it is
// written on the local host cluster).
var DefaultCutAgain = []time.Duration{2 * time.Second, 10 * time.Second}

// ConnectionCutter ends the host node's tracked connections (conntrack
// entries) of tenant pods on its node whenever what their NetworkPolicies
// allow may have narrowed: a tenant-owned host NetworkPolicy (labelled
// contract.LabelTenantOf: Nest's isolation policies and the host copies of
// tenant policies) that selects them is created, changed or deleted, or
// their own labels change. Enforcers judge the first packet of a
// connection only (kube-network-policies, Calico's iptables mode); without
// its entry, a connection's next packet is a new one to the kernel, so the
// enforcer judges it against today's policies and drops it if they forbid
// it, while an allowed connection goes on. The next packet decides: one
// from the side no policy restricts is judged as a connection from there.
//
// It runs in the host node's network namespace (the DaemonSet has
// hostNetwork), where the node's conntrack table tracks its pods' traffic.
// At start it cuts every pod a tenant policy selects, for changes made
// while it was down.
type ConnectionCutter struct {
	// Client reads pods and NetworkPolicies of the host cluster (list,
	// watch).
	Client kubernetes.Interface
	// NodeName is the host node the cutter runs on; only its pods are cut.
	NodeName string
	// Forget deletes the node's conntrack entries in which any of ips takes
	// part, at either end and before or after NAT, and returns how many
	// (ForgetConnections).
	Forget func(ips []netip.Addr) (int, error)
	// Again is when the cut is repeated (DefaultCutAgain).
	Again []time.Duration

	pods  corelisters.PodLister
	syncs *kindsync.Syncer
	mu    sync.Mutex
	// round is, per pod key, how many cuts of its current series are done.
	round map[string]int
}

// Run watches the node's tenant pods and every tenant-owned
// NetworkPolicy and cuts connections until ctx ends.
func (c *ConnectionCutter) Run(ctx context.Context) error {
	if c.NodeName == "" {
		return fmt.Errorf("the node name is empty: pass --node-name=$(NODE_NAME) from the downward API")
	}
	tenantOwned := func(o *metav1.ListOptions) {
		req, _ := labels.NewRequirement(contract.LabelTenantOf, selection.Exists, nil)
		o.LabelSelector = labels.NewSelector().Add(*req).String()
	}
	podFactory := informers.NewSharedInformerFactoryWithOptions(c.Client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		tenantOwned(o)
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", c.NodeName).String()
	}))
	policyFactory := informers.NewSharedInformerFactoryWithOptions(c.Client, 0, informers.WithTweakListOptions(tenantOwned))
	pods := podFactory.Core().V1().Pods()
	c.pods = pods.Lister()
	c.round = map[string]int{}
	// No resync: a cut is for a change, and the informers' first list
	// counts every policy as one.
	c.syncs = kindsync.New("connection-cutter", 1, c.sync, nil)
	if _, err := pods.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(old, obj any) { c.podChanged(old, obj) },
	}); err != nil {
		return err
	}
	if _, err := policyFactory.Networking().V1().NetworkPolicies().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.policyChanged,
		UpdateFunc: func(old, obj any) { c.policyUpdated(old, obj) },
		DeleteFunc: c.policyChanged,
	}); err != nil {
		return err
	}
	// Pods first: the policies' first list needs them to find whom it selects.
	for _, f := range []informers.SharedInformerFactory{podFactory, policyFactory} {
		f.Start(ctx.Done())
		for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
			if !ok {
				return fmt.Errorf("informer for %v did not sync", typ)
			}
		}
	}
	klog.FromContext(ctx).Info("Connection cutter started", "node", c.NodeName)
	c.syncs.Run(ctx)
	return nil
}

// podChanged cuts a pod whose labels changed: a policy may select it now,
// or no longer admit it.
func (c *ConnectionCutter) podChanged(old, obj any) {
	o, ok1 := old.(*corev1.Pod)
	p, ok2 := obj.(*corev1.Pod)
	if ok1 && ok2 && !maps.Equal(o.Labels, p.Labels) {
		c.cut(p.Namespace + "/" + p.Name)
	}
}

// policyUpdated cuts for a policy whose spec changed (its generation);
// label and status changes allow nothing new.
func (c *ConnectionCutter) policyUpdated(old, obj any) {
	o, ok1 := old.(*networkingv1.NetworkPolicy)
	p, ok2 := obj.(*networkingv1.NetworkPolicy)
	if ok1 && ok2 && o.Generation == p.Generation {
		return
	}
	c.policyChanged(old)
	c.policyChanged(obj)
}

// policyChanged cuts every pod of the node the policy selects. A deleted
// policy may have been what admitted a connection, so its pods are cut too.
func (c *ConnectionCutter) policyChanged(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	p, ok := obj.(*networkingv1.NetworkPolicy)
	if !ok {
		return
	}
	for _, key := range c.selected(p) {
		c.cut(key)
	}
}

// selected lists the keys ("namespace/name") of the node's pods that the
// policy's pod selector selects; none for a selector that does not parse,
// which no enforcer applies either.
func (c *ConnectionCutter) selected(p *networkingv1.NetworkPolicy) []string {
	sel, err := metav1.LabelSelectorAsSelector(&p.Spec.PodSelector)
	if err != nil {
		return nil
	}
	pods, err := c.pods.Pods(p.Namespace).List(sel)
	if err != nil {
		return nil
	}
	keys := make([]string, 0, len(pods))
	for _, pod := range pods {
		keys = append(keys, pod.Namespace+"/"+pod.Name)
	}
	return keys
}

// cut starts a new series of cuts for the pod key.
func (c *ConnectionCutter) cut(key string) {
	c.mu.Lock()
	c.round[key] = 0
	c.mu.Unlock()
	c.syncs.Add(key)
}

// sync cuts the pod key's connections and asks for the series' next cut.
func (c *ConnectionCutter) sync(ctx context.Context, key string) (time.Duration, error) {
	pod, err := nodePod(c.pods, c.NodeName, key)
	if err != nil {
		return 0, err
	}
	if pod == nil || pod.Spec.HostNetwork {
		// Gone (its connections went with its sandbox), or on the node's
		// own addresses, which are never cut.
		c.done(key)
		return 0, nil
	}
	ips := kube.PodAddrs(pod)
	if len(ips) > 0 {
		n, err := c.Forget(ips)
		if err != nil {
			return 0, fmt.Errorf("pod %s: cut its connections: %w", key, err)
		}
		klog.FromContext(ctx).V(2).Info("Pod's connections cut for the enforcer to judge again", "pod", key, "entries", n)
	}
	return c.next(key), nil
}

// next is how long until the series' next cut of key, 0 when it is done.
func (c *ConnectionCutter) next(key string) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.round[key]
	if r >= len(c.Again) {
		delete(c.round, key)
		return 0
	}
	c.round[key] = r + 1
	return c.Again[r]
}

func (c *ConnectionCutter) done(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.round, key)
}
