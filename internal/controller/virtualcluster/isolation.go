package virtualcluster

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/controlplane"
)

// refuseNamespace reports that another VirtualCluster holds vc's namespace
// and stops: nothing is created, and only a change to vc, or the holder's
// deletion, reconciles it again.
func (r *Reconciler) refuseNamespace(ctx context.Context, vc *nestv1.VirtualCluster, holder string) (ctrl.Result, error) {
	s := newReconcileState(vc)
	s.obs.namespaceHolder = holder
	if err := r.patchStatus(ctx, s, nil); err != nil {
		return ctrl.Result{}, err
	}
	ctrl.LoggerFrom(ctx).Info("Namespace held by another VirtualCluster", "virtualCluster", klog.KObj(vc), "holder", holder)
	return ctrl.Result{}, reconcile.TerminalError(errors.New(controlplane.NamespaceInUseMessage(vc.Namespace, holder, vc.Name)))
}

// reconcileNamespace puts the Pod Security labels on the host namespace. It
// reads without the cache, which holds no namespaces, and patches only when
// a label differs.
func (r *Reconciler) reconcileNamespace(ctx context.Context, s *reconcileState) (bool, error) {
	ns := &corev1.Namespace{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Name: s.vc.Namespace}, ns); err != nil {
		return false, fmt.Errorf("get namespace %s of %s: %w", s.vc.Namespace, klog.KObj(s.vc), err)
	}
	want := controlplane.NamespaceLabelsFor(s.vc)
	if labels.SelectorFromSet(want).Matches(labels.Set(ns.Labels)) {
		return true, nil
	}
	patch := client.MergeFrom(ns.DeepCopy())
	if ns.Labels == nil {
		ns.Labels = map[string]string{}
	}
	maps.Copy(ns.Labels, want)
	if err := r.Patch(ctx, ns, patch); err != nil {
		return false, fmt.Errorf("label namespace %s of %s for Pod Security: %w", ns.Name, klog.KObj(s.vc), err)
	}
	return true, nil
}

// reconcileNetworkPolicies keeps the namespace's NetworkPolicies. A spec
// the builder refuses (an egress CIDR that is no CIDR) is terminal: only an
// edit of the VirtualCluster fixes it.
func (r *Reconciler) reconcileNetworkPolicies(ctx context.Context, s *reconcileState) (bool, error) {
	dedicated, err := r.dedicatedPodCIDRs(ctx, s.vc)
	if err != nil {
		return false, err
	}

	policies, err := controlplane.NetworkPoliciesWith(s.vc, r.ControlPlane, dedicated)
	if err != nil {
		return false, reconcile.TerminalError(fmt.Errorf("NetworkPolicies of %s: %w", klog.KObj(s.vc), err))
	}
	for _, want := range policies {
		np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: want.Name, Namespace: want.Namespace}}
		if err := r.ensure(ctx, s, np, func() { np.Labels, np.Spec = want.Labels, want.Spec }); err != nil {
			return false, err
		}
	}
	return true, nil
}

// reconcileLimits keeps the namespace's LimitRange, the ResourceQuota that
// enforces the tenant's share, and the one that bounds its objects.
func (r *Reconciler) reconcileLimits(ctx context.Context, s *reconcileState) (bool, error) {
	lr, wantLR := &corev1.LimitRange{}, controlplane.LimitRangeFor(s.vc)
	lr.ObjectMeta = metav1.ObjectMeta{Name: wantLR.Name, Namespace: wantLR.Namespace}
	if err := r.ensure(ctx, s, lr, func() { lr.Labels, lr.Spec = wantLR.Labels, wantLR.Spec }); err != nil {
		return false, err
	}
	for _, want := range []*corev1.ResourceQuota{controlplane.TenantQuotaFor(s.vc), controlplane.ObjectQuotaFor(s.vc)} {
		quota := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: want.Name, Namespace: want.Namespace}}
		if err := r.ensure(ctx, s, quota, func() { quota.Labels, quota.Spec = want.Labels, want.Spec }); err != nil {
			return false, err
		}
	}
	return true, nil
}

// reconcileDedicatedNodes keeps the ConfigMap that gives nest-syncer the
// dedicated pod CIDRs the NetworkPolicies admit and the dedicated node IPs,
// whose kubelets the tenant API server reaches through the egress proxy. It
// runs after the quotas (reconcileLimits), which count the ConfigMap, and
// after the policies, which a failure here must not hold back.
func (r *Reconciler) reconcileDedicatedNodes(ctx context.Context, s *reconcileState) (bool, error) {
	nodes, err := r.globalNodes(ctx)
	if err != nil {
		return false, err
	}
	holder := holderKey(s.vc)
	cm := &corev1.ConfigMap{}
	want := controlplane.DedicatedNodesConfigMapFor(s.vc, podCIDRsOf(nodes, holder, r.ControlPlane.HostNetwork.PodCIDRs), nodeIPsOf(nodes, holder))
	cm.ObjectMeta = metav1.ObjectMeta{Name: want.Name, Namespace: want.Namespace}
	if err := r.ensure(ctx, s, cm, func() { cm.Labels, cm.Data = want.Labels, want.Data }); err != nil {
		return false, err
	}
	return true, nil
}

// dedicatedPodCIDRs are the pod subnets of the nodes node promotion moved
// out of the host for vc (GlobalNode status.podCIDR), sorted.
func (r *Reconciler) dedicatedPodCIDRs(ctx context.Context, vc *nestv1.VirtualCluster) ([]netip.Prefix, error) {
	nodes, err := r.globalNodes(ctx)
	if err != nil {
		return nil, err
	}
	return podCIDRsOf(nodes, holderKey(vc), r.ControlPlane.HostNetwork.PodCIDRs), nil
}

// globalNodes are every GlobalNode, from the cache.
func (r *Reconciler) globalNodes(ctx context.Context) ([]nestv1.GlobalNode, error) {
	var list nestv1.GlobalNodeList
	if err := r.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("list GlobalNodes: %w", err)
	}
	return list.Items, nil
}

// holderKey is vc as a GlobalNode's status.virtualCluster names its holder.
func holderKey(vc *nestv1.VirtualCluster) string { return vc.Namespace + "/" + vc.Name }

// holdsPodsOf reports whether gn is a dedicated node of holder whose pods
// are the tenant's (HoldsTenantPods): only then do its pod CIDR and node IP
// belong to the tenant.
func holdsPodsOf(gn *nestv1.GlobalNode, holder string) bool {
	return gn.Status.VirtualCluster == holder && gn.HoldsTenantPods()
}

// podCIDRsOf are the status.podCIDRs of the GlobalNodes whose status names
// holder and that hold its pods (holdsPodsOf), sorted. Only a range
// inside one of the host's pod ranges counts: status.podCIDR comes from
// the node's agent, on a node its last tenant had root on, and must never
// admit node, Service or other addresses to a tenant.
func podCIDRsOf(nodes []nestv1.GlobalNode, holder string, hostPodCIDRs []netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	for i := range nodes {
		gn := &nodes[i]
		if !holdsPodsOf(gn, holder) {
			continue
		}
		p, err := netip.ParsePrefix(gn.Status.PodCIDR)
		if err != nil {
			continue
		}
		p = p.Masked()
		if slices.ContainsFunc(hostPodCIDRs, func(h netip.Prefix) bool { return h.Bits() < p.Bits() && h.Contains(p.Addr()) }) {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b netip.Prefix) int { return strings.Compare(a.String(), b.String()) })
	return out
}

// nodeIPsOf are the spec.nodeIPs of the GlobalNodes that hold holder's pods
// (holdsPodsOf), sorted: the addresses the tenant's dedicated kubelets
// serve at, which nest-manager took from the host Node before the move. A
// value that is no IP address is left out.
func nodeIPsOf(nodes []nestv1.GlobalNode, holder string) []netip.Addr {
	var out []netip.Addr
	for i := range nodes {
		gn := &nodes[i]
		if !holdsPodsOf(gn, holder) {
			continue
		}
		if a, err := netip.ParseAddr(gn.Spec.NodeIP); err == nil {
			out = append(out, a.Unmap())
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}
