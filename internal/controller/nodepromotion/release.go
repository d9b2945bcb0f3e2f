package nodepromotion

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/addons"
	"github.com/nestdev/nest/internal/agent"
	"github.com/nestdev/nest/internal/syncer/contract"
)

// uncordonHost gives back a node that was still draining in the host.
func (r *Reconciler) uncordonHost(ctx context.Context, gn *nestv1.GlobalNode) (step, error) {
	if err := cordon(ctx, r.HostClient, gn.Name, false); err != nil {
		return step{}, err
	}
	return r.free(ctx, gn, "released while draining; schedulable in the host again")
}

// releaseFailed gives back a node whose promotion failed while it was still
// in the host (its drain timed out): it is uncordoned and freed. A node that
// failed anywhere else stays Failed, for the platform team to look at: it
// is never forced out of a tenant half drained.
func (r *Reconciler) releaseFailed(ctx context.Context, gn *nestv1.GlobalNode) (step, error) {
	node, err := r.hostNode(ctx, gn.Name)
	if err != nil {
		return step{}, err
	}
	if node == nil {
		if _, _, err := r.tenantOf(ctx, gn); errors.Is(err, ErrTenantGone) {
			// Its tenant cluster is gone, and its pods with it.
			return step{phase: nestv1.NodePhaseReturning, message: "the tenant cluster is gone; returning to the host"}, nil
		}
		c := meta.FindStatusCondition(gn.Status.Conditions, ConditionMoving)
		if c == nil {
			return step{phase: nestv1.NodePhaseFailed, reason: "Failed", failed: true, message: "released while Failed outside the host: needs the platform team"}, nil
		}
		return step{phase: nestv1.NodePhaseFailed, reason: c.Reason, failed: true, message: c.Message}, nil
	}
	return r.uncordonHost(ctx, gn)
}

// drainTenant cordons and drains the node in its tenant cluster, then
// deletes the tenant Node. A tenant that is gone is skipped: its pods went
// with it. Pods a PodDisruptionBudget keeps past DrainTimeout leave the node
// Failed, cordoned in the tenant, still joined there.
func (r *Reconciler) drainTenant(ctx context.Context, gn *nestv1.GlobalNode) (step, error) {
	key, t, err := r.tenantOf(ctx, gn)
	if errors.Is(err, ErrTenantGone) {
		return step{phase: nestv1.NodePhaseReturning, message: "the tenant cluster of " + key.String() + " is gone; returning to the host"}, nil
	}
	if err != nil {
		return step{}, err
	}
	if gn.Status.Phase != nestv1.NodePhaseReleasing {
		if err := cordon(ctx, t.Client, gn.Name, true); err != nil {
			return step{}, err
		}
		return step{phase: nestv1.NodePhaseReleasing, message: "cordoned in the tenant; evicting its pods"}, nil
	}
	left, err := drain(ctx, t.Client, gn.Name)
	if err != nil {
		return step{}, err
	}
	if len(left) > 0 {
		if since(gn) > r.drainTimeout() {
			return step{phase: nestv1.NodePhaseFailed, reason: "DrainTimeout", failed: true,
				message: fmt.Sprintf("tenant pods still on the node after %s (a PodDisruptionBudget may forbid their eviction): %s; the node stays cordoned in the tenant", r.drainTimeout(), strings.Join(left, ", "))}, nil
		}
		return step{phase: nestv1.NodePhaseReleasing, requeue: pollSoon, message: fmt.Sprintf("evicting %d tenant pods: %s", len(left), strings.Join(left, ", "))}, nil
	}
	// A running kubelet would register its Node again.
	a, err := r.Agents.For(ctx, gn)
	if err != nil {
		return step{}, err
	}
	if err := a.Stop(ctx); err != nil {
		return step{}, fmt.Errorf("agent: stop: %w", err)
	}
	if err := t.Client.CoreV1().Nodes().Delete(ctx, gn.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return step{}, fmt.Errorf("delete tenant Node %s: %w", gn.Name, err)
	}
	// Not before: the kubelet wrote its Node while the node drained.
	if err := addons.UnassignNode(ctx, t.Objects, gn.Name); err != nil {
		return step{}, err
	}
	// Its tenant pods are gone: in Returning the holder's policies and
	// nest-syncer stop admitting its range (HoldsTenantPods), which
	// returnHome waits for.
	return step{phase: nestv1.NodePhaseReturning, message: "left the tenant; returning to the host"}, nil
}

// returnHome resets the node and joins it to the host with a host bootstrap
// token; once its new host Node is Ready with the labels the GlobalNode
// kept, the GlobalNode is free.
func (r *Reconciler) returnHome(ctx context.Context, gn *nestv1.GlobalNode) (step, error) {
	if r.Host.Server == "" {
		return step{}, errors.New("--host-api-server is not set: nest-manager does not know where a node joins the host")
	}
	a, err := r.Agents.For(ctx, gn)
	if err != nil {
		return step{}, err
	}
	st, err := a.Status(ctx)
	if err != nil {
		return step{}, fmt.Errorf("agent: status: %w", err)
	}
	ready, err := nodeReady(ctx, r.HostClient, gn.Name)
	if err != nil {
		return step{}, err
	}
	// A Ready condition alone may be the last word of a kubelet that was
	// stopped a moment ago: the agent must show it running, joined here.
	home := st.Kubelet.Running && st.KubeProxy.Running && st.Bootstrapped && st.Server == r.Host.Server
	if ready && home {
		if err := deleteBootstrapTokens(ctx, r.HostClient, gn.Name); err != nil {
			return step{}, err
		}
		if err := r.restoreLabels(ctx, gn); err != nil {
			return step{}, err
		}
		// A Node that was never deleted still carries the cordon.
		if err := cordon(ctx, r.HostClient, gn.Name, false); err != nil {
			return step{}, err
		}
		return r.free(ctx, gn, "Ready in the host again")
	}
	if waiting, err := r.rangeInUse(ctx, gn); err != nil || waiting != "" {
		if err != nil {
			return step{}, err
		}
		return step{phase: nestv1.NodePhaseReturning, requeue: pollSoon, message: waiting}, nil
	}
	req := agent.JoinRequest{Server: r.Host.Server, CACertPEM: r.Host.CACertPEM}
	approve := func(ctx context.Context) (int, error) { return ApproveNodeClient(ctx, r.HostClient, gn.Name) }
	if err := join(ctx, a, r.HostClient, req, gn.Name, "Nest: "+gn.Name+" returns to the host", func(context.Context) error { return nil }, approve); err != nil {
		return step{}, err
	}
	return step{phase: nestv1.NodePhaseReturning, requeue: pollSoon, message: "the kubelet runs; waiting for the node to be Ready in the host"}, nil
}

// rangeInUse says what still admits the node's pod CIDR as its holder's,
// or "" once nothing does: the holder's ConfigMap of dedicated pod CIDRs
// (written with its NetworkPolicies) and nest-syncer's host EndpointSlices
// in its namespace. Until then the node must not join the host, whose pods
// it would give addresses in that range. A holder whose namespace is gone
// holds nothing.
func (r *Reconciler) rangeInUse(ctx context.Context, gn *nestv1.GlobalNode) (string, error) {
	cidr, err := netip.ParsePrefix(gn.Status.PodCIDR)
	if err != nil {
		return "", nil
	}
	key, err := holder(gn)
	if err != nil {
		return "", nil
	}
	cm, err := r.HostClient.CoreV1().ConfigMaps(key.Namespace).Get(ctx, contract.DedicatedNodesConfigMap(key.Name), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return "", fmt.Errorf("read the dedicated pod CIDRs of %s: %w", key, err)
	case slices.Contains(contract.ParsePodCIDRs(cm.Data[contract.DedicatedPodCIDRsKey]), cidr.Masked()):
		return fmt.Sprintf("waiting for %s to stop admitting the node's pod CIDR %s (ConfigMap %s)", key, cidr, cm.Name), nil
	}
	hostSlices, err := r.HostClient.DiscoveryV1().EndpointSlices(key.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: discoveryv1.LabelManagedBy + "=" + contract.EndpointSliceManager,
	})
	if err != nil {
		return "", fmt.Errorf("list nest-syncer's host EndpointSlices of %s: %w", key, err)
	}
	for _, es := range hostSlices.Items {
		for _, e := range es.Endpoints {
			for _, a := range e.Addresses {
				if addr, err := netip.ParseAddr(a); err == nil && cidr.Contains(addr.Unmap()) {
					return fmt.Sprintf("waiting for nest-syncer of %s to drop %s, in the node's pod CIDR, from host EndpointSlice %s", key, a, es.Name), nil
				}
			}
		}
	}
	return "", nil
}

// restoreLabels puts the labels the GlobalNode kept back on the new host
// Node, which its kubelet registered with its own labels only.
func (r *Reconciler) restoreLabels(ctx context.Context, gn *nestv1.GlobalNode) error {
	node, err := r.hostNode(ctx, gn.Name)
	if err != nil || node == nil {
		return err
	}
	before := node.DeepCopy()
	for k, v := range gn.Spec.Labels {
		if _, set := node.Labels[k]; !set {
			if node.Labels == nil {
				node.Labels = map[string]string{}
			}
			node.Labels[k] = v
		}
	}
	if len(node.Labels) == len(before.Labels) {
		return nil
	}
	if err := r.Patch(ctx, node, client.MergeFrom(before)); err != nil {
		return fmt.Errorf("restore the labels of host Node %s: %w", gn.Name, err)
	}
	return nil
}

// free ends a release: phase Host, state free, no holder. The inventory
// controller then keeps the GlobalNode in step with its host Node again.
func (r *Reconciler) free(ctx context.Context, gn *nestv1.GlobalNode, message string) (step, error) {
	none := ""
	if err := r.setState(ctx, gn, nestv1.NodeStateFree, &none); err != nil {
		return step{}, err
	}
	gn.Status.PodCIDR, gn.Status.CABundleHash = "", ""
	return step{phase: nestv1.NodePhaseHost, reason: "Released", message: message}, nil
}
