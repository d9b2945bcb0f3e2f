package syncer

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/nestdev/nest/internal/syncer/contract"
	"github.com/nestdev/nest/internal/syncer/egress"
	"github.com/nestdev/nest/internal/syncer/kinds"
)

// runEgressProxy serves the tenant API server's egress proxy on
// o.EgressProxySocket until ctx ends, allowing what egressPublisher
// publishes from the host. It serves only once the host informers have
// synced, so a refusal is always the policy's and never an empty cache's;
// until then the API server's dial fails, on no socket or on the one an
// earlier run of the container left (ListenUnix replaces it). It returns
// nil when ctx ends, and an error when the informers, the listener or the
// proxy fail.
func runEgressProxy(ctx context.Context, o Options, host kubernetes.Interface) error {
	pub, err := newEgressPublisher(o, host)
	if err != nil {
		return err
	}
	if err := pub.start(ctx); err != nil {
		return err
	}
	l, err := egress.ListenUnix(o.EgressProxySocket)
	if err != nil {
		return err
	}
	klog.FromContext(ctx).Info("Serving the tenant API server's egress proxy", "socket", o.EgressProxySocket)
	p := &egress.Proxy{Allowed: pub.published.Allowed}
	return p.Serve(ctx, l)
}

// egressPublisher keeps published current from host objects only: the pods
// of the host namespace and the dedicated-nodes ConfigMap nest-manager
// writes. Never from tenant objects, which the tenant can forge: a tenant
// Node's addresses, a Service's endpoints or a webhook's URL are what the
// proxy checks, not what it trusts.
type egressPublisher struct {
	vc        string
	pods      corelisters.PodNamespaceLister
	dedicated corelisters.ConfigMapNamespaceLister
	factories []informers.SharedInformerFactory
	published *egress.Published

	// mu makes each publish read the listers and set published as one
	// step, so an older read never overwrites a newer one.
	mu sync.Mutex
	// synced is set once the informers have synced: the events of the
	// initial lists publish nothing, start publishes once after them.
	synced atomic.Bool
}

// newEgressPublisher watches, in o.HostNamespace, every pod (control-plane
// pods carry no contract.LabelTenantOf, so the syncer's own informers, which
// select on it, miss them) and the ConfigMap
// contract.DedicatedNodesConfigMap(o.VirtualCluster).
func newEgressPublisher(o Options, host kubernetes.Interface) (*egressPublisher, error) {
	podsF := informers.NewSharedInformerFactoryWithOptions(host, 0, informers.WithNamespace(o.HostNamespace))
	dedicatedName := contract.DedicatedNodesConfigMap(o.VirtualCluster)
	dedicatedF := informers.NewSharedInformerFactoryWithOptions(host, 0, informers.WithNamespace(o.HostNamespace),
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
			lo.FieldSelector = fields.OneTermEqualSelector("metadata.name", dedicatedName).String()
		}))
	e := &egressPublisher{
		vc:        o.VirtualCluster,
		pods:      podsF.Core().V1().Pods().Lister().Pods(o.HostNamespace),
		dedicated: dedicatedF.Core().V1().ConfigMaps().Lister().ConfigMaps(o.HostNamespace),
		factories: []informers.SharedInformerFactory{podsF, dedicatedF},
		published: &egress.Published{},
	}
	podInformer := podsF.Core().V1().Pods().Informer()
	// Only what publishing reads stays in memory: the namespace may hold
	// hundreds of tenant pods.
	if err := podInformer.SetTransform(egressPodFields); err != nil {
		return nil, err
	}
	changed := kinds.OnEvery(func(metav1.Object) {
		if e.synced.Load() {
			e.publish()
		}
	})
	for _, inf := range []cache.SharedIndexInformer{podInformer, dedicatedF.Core().V1().ConfigMaps().Informer()} {
		if _, err := inf.AddEventHandler(changed); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// start starts the informers, waits until they have synced, and publishes.
func (e *egressPublisher) start(ctx context.Context) error {
	for _, f := range e.factories {
		f.Start(ctx.Done())
	}
	for _, f := range e.factories {
		for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
			if !ok {
				return fmt.Errorf("egress proxy: informer for host %v did not sync", typ)
			}
		}
	}
	e.synced.Store(true)
	e.publish()
	return nil
}

// publish replaces published with what the listers hold now.
func (e *egressPublisher) publish() {
	e.mu.Lock()
	defer e.mu.Unlock()
	pods, err := e.pods.List(labels.Everything())
	if err != nil {
		// A lister lists its cache and does not fail; keep what was
		// published rather than publish less than is there.
		klog.ErrorS(err, "Egress proxy: listing host pods")
		return
	}
	cm, err := e.dedicated.Get(contract.DedicatedNodesConfigMap(e.vc))
	if err != nil && !apierrors.IsNotFound(err) {
		klog.ErrorS(err, "Egress proxy: reading the dedicated nodes' ConfigMap")
		return
	}
	d := egressDestinationsOf(e.vc, pods, cm)
	d.publish(e.published)
	klog.V(4).InfoS("Egress proxy: published", "controlPlanePods", len(d.controlPlane), "tenantPods", len(d.tenantPods),
		"dedicatedNodes", len(d.nodeIPs), "dedicatedPodCIDRs", len(d.podCIDRs))
}

// egressDestinations are what the tenant API server may dial through the
// egress proxy, as the host has them.
type egressDestinations struct {
	// controlPlane are the IPs of the VirtualCluster's control-plane pods,
	// reachable on the kubelet API ports nest-syncer serves only
	// (controlPlaneKubeletPorts): any replica's syncer may be the one that
	// serves the virtual and member nodes.
	controlPlane []netip.Addr
	// tenantPods are the IPs of the tenant's host pods, reachable on any
	// port: its pods, webhooks and aggregated API servers.
	tenantPods []netip.Addr
	// nodeIPs are the dedicated nodes' IPs, reachable on
	// contract.DedicatedKubeletPort only; podCIDRs their pod ranges,
	// reachable on any port.
	nodeIPs  []netip.Addr
	podCIDRs []netip.Prefix
}

// egressDestinationsOf reads the destinations from host objects: pods of
// the VirtualCluster vc's host namespace, and its dedicated-nodes ConfigMap
// (nil when there is none).
//
// A pod labelled contract.LabelTenantOf=vc is a tenant pod; one labelled
// for another VirtualCluster is neither the tenant's nor the control
// plane's; an unlabelled one is a control-plane pod, as only nest-syncer
// makes pods in the namespace and it labels every one. Pods on the host
// network are skipped, as their IPs are their node's, and so are finished
// pods (Succeeded, Failed), whose IPs the node may already have given to
// another pod. A ConfigMap value that does not parse admits nothing
// (contract.ParseNodeIPs, contract.ParsePodCIDRs).
func egressDestinationsOf(vc string, pods []*corev1.Pod, dedicated *corev1.ConfigMap) egressDestinations {
	var d egressDestinations
	for _, p := range pods {
		if p.Spec.HostNetwork || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		owner, labelled := p.Labels[contract.LabelTenantOf]
		switch {
		case !labelled:
			d.controlPlane = append(d.controlPlane, podIPsOf(p)...)
		case owner == vc:
			d.tenantPods = append(d.tenantPods, podIPsOf(p)...)
		}
	}
	if dedicated != nil {
		d.nodeIPs = contract.ParseNodeIPs(dedicated.Data[contract.DedicatedNodeIPsKey])
		d.podCIDRs = contract.ParsePodCIDRs(dedicated.Data[contract.DedicatedPodCIDRsKey])
	}
	return d
}

// publish replaces every part of p with d.
func (d egressDestinations) publish(p *egress.Published) {
	p.SetControlPlane(d.controlPlane, controlPlaneKubeletPorts())
	p.SetTenantPods(d.tenantPods)
	p.SetDedicated(d.nodeIPs, contract.DedicatedKubeletPort, d.podCIDRs)
}

// controlPlaneKubeletPorts are the kubelet API ports a control-plane pod's
// nest-syncer serves: the virtual nodes' and every member node's
// (contract.KubeletPorts).
func controlPlaneKubeletPorts() []uint16 {
	virtualNode, firstMember, lastMember := contract.KubeletPorts()
	ports := []uint16{uint16(virtualNode)}
	for p := firstMember; p <= lastMember; p++ {
		ports = append(ports, uint16(p))
	}
	return ports
}

// podIPsOf are p's status.podIPs, or its status.podIP where the list is
// empty; what does not parse is skipped.
func podIPsOf(p *corev1.Pod) []netip.Addr {
	ips := make([]string, 0, len(p.Status.PodIPs)+1)
	for _, ip := range p.Status.PodIPs {
		ips = append(ips, ip.IP)
	}
	if len(ips) == 0 {
		ips = append(ips, p.Status.PodIP)
	}
	var out []netip.Addr
	for _, ip := range ips {
		if a, err := netip.ParseAddr(ip); err == nil {
			out = append(out, a)
		}
	}
	return out
}

// egressPodFields is the informer's transform: a pod with only the fields
// egressDestinationsOf reads, and those the informer itself needs.
func egressPodFields(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion, Labels: p.Labels,
		},
		Spec:   corev1.PodSpec{HostNetwork: p.Spec.HostNetwork},
		Status: corev1.PodStatus{Phase: p.Status.Phase, PodIP: p.Status.PodIP, PodIPs: p.Status.PodIPs},
	}, nil
}
