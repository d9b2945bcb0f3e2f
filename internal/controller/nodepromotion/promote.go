package nodepromotion

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/addons"
	"github.com/nestdev/nest/internal/agent"
	"github.com/nestdev/nest/internal/kube"
	"github.com/nestdev/nest/internal/pki"
)

// How soon a waiting phase looks again.
const (
	pollSoon   = 2 * time.Second
	pollTenant = time.Minute
)

// holder is the VirtualCluster that holds gn.
func holder(gn *nestv1.GlobalNode) (types.NamespacedName, error) {
	h := gn.Annotations[nestv1.AnnotationHeldBy]
	if h == "" {
		h = gn.Status.VirtualCluster
	}
	ns, name, ok := strings.Cut(h, "/")
	if !ok || ns == "" || name == "" {
		return types.NamespacedName{}, fmt.Errorf("GlobalNode %s names no VirtualCluster as namespace/name (%q)", gn.Name, h)
	}
	return types.NamespacedName{Namespace: ns, Name: name}, nil
}

// tenantOf is the VirtualCluster that holds gn and its tenant cluster.
func (r *Reconciler) tenantOf(ctx context.Context, gn *nestv1.GlobalNode) (types.NamespacedName, *Tenant, error) {
	key, err := holder(gn)
	if err != nil {
		return key, nil, err
	}
	t, err := r.Tenants.For(ctx, key)
	return key, t, err
}

// startMove begins a promotion: it checks that the node's agent answers for
// the node and that nodes can reach the holder's tenant API server, so a
// node is never taken out of the host for a move that cannot finish. The
// node is cordoned in Draining, once that phase is recorded: a release
// that comes first then finds nothing to undo.
func (r *Reconciler) startMove(ctx context.Context, gn *nestv1.GlobalNode) (step, error) {
	a, err := r.Agents.For(ctx, gn)
	if err != nil {
		return step{}, err
	}
	if _, err := a.Status(ctx); err != nil {
		return step{}, fmt.Errorf("the node's nest-agent does not answer, so the node stays in the host: %w", err)
	}
	_, t, err := r.tenantOf(ctx, gn)
	if err != nil {
		return step{}, err
	}
	if t.Unreachable != nil {
		return step{}, fmt.Errorf("the node stays in the host: %w", t.Unreachable)
	}
	// A stay begins with no CA bundle: a rotation waits only for nodes
	// that were in the tenant (virtualcluster's nodesBehind).
	gn.Status.CABundleHash = ""
	return step{phase: nestv1.NodePhaseDraining, message: "cordoning in the host and evicting its pods"}, nil
}

// drainHost cordons the host Node and evicts its pods; once none is left
// the node leaves.
func (r *Reconciler) drainHost(ctx context.Context, gn *nestv1.GlobalNode) (step, error) {
	if err := cordon(ctx, r.HostClient, gn.Name, true); err != nil {
		return step{}, err
	}
	left, err := drain(ctx, r.HostClient, gn.Name)
	if err != nil {
		return step{}, err
	}
	if len(left) == 0 {
		return step{phase: nestv1.NodePhaseLeaving, message: "drained; the agent stops and resets the node"}, nil
	}
	if since(gn) > r.drainTimeout() {
		return step{phase: nestv1.NodePhaseFailed, reason: "DrainTimeout", failed: true,
			message: fmt.Sprintf("pods still on the node after %s (a PodDisruptionBudget may forbid their eviction): %s; the node stays cordoned in the host until it is released", r.drainTimeout(), strings.Join(left, ", "))}, nil
	}
	return step{phase: nestv1.NodePhaseDraining, requeue: pollSoon, message: fmt.Sprintf("evicting %d pods: %s", len(left), strings.Join(left, ", "))}, nil
}

// leaveHost has the agent stop and reset the node, then deletes the host
// Node, whose pods the host then garbage-collects.
func (r *Reconciler) leaveHost(ctx context.Context, gn *nestv1.GlobalNode) (step, error) {
	a, err := r.Agents.For(ctx, gn)
	if err != nil {
		return step{}, err
	}
	if gn.Status.PodCIDR == "" {
		if gn.Status.PodCIDR, err = r.ownPodCIDR(ctx, a, gn.Name); err != nil {
			return step{}, err
		}
	}
	if err := leave(ctx, a); err != nil {
		return step{}, err
	}
	if err := r.HostClient.CoreV1().Nodes().Delete(ctx, gn.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return step{}, fmt.Errorf("delete host Node %s: %w", gn.Name, err)
	}
	return step{phase: nestv1.NodePhaseJoining, message: "left the host; joining the tenant"}, nil
}

// ownPodCIDR is the pod CIDR of node, read from its agent while the node
// is still the host's and before any tenant pod ran there in this stay, so
// what the holder's pods will be admitted by is the node's own range. It
// is refused when a pod on another host node has an address in it: a range
// wider than the node's own (rewritten by an earlier tenant with root
// there) would admit other pods to the tenant. An empty CIDR (no CNI
// configuration) admits nothing.
func (r *Reconciler) ownPodCIDR(ctx context.Context, a Agent, node string) (string, error) {
	st, err := a.Status(ctx)
	if err != nil {
		return "", fmt.Errorf("agent: status: %w", err)
	}
	if st.PodCIDR == "" {
		return "", nil
	}
	cidr, err := netip.ParsePrefix(st.PodCIDR)
	if err != nil {
		return "", fmt.Errorf("the node's agent reports pod CIDR %q: %w", st.PodCIDR, err)
	}
	cidr = cidr.Masked()
	pods, err := r.HostClient.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", fmt.Errorf("list host pods to check the node's pod CIDR: %w", err)
	}
	for _, p := range pods.Items {
		if p.Spec.NodeName == node || p.Spec.HostNetwork {
			continue
		}
		for _, ip := range p.Status.PodIPs {
			if addr, err := netip.ParseAddr(ip.IP); err == nil && cidr.Contains(addr.Unmap()) {
				return "", fmt.Errorf("the node's agent reports pod CIDR %s, which holds %s of pod %s/%s on node %s: the node's CNI configuration is not its own; reimage the node", cidr, ip.IP, p.Namespace, p.Name, p.Spec.NodeName)
			}
		}
	}
	return cidr.String(), nil
}

// leave stops and resets the node through its agent.
func leave(ctx context.Context, a Agent) error {
	if err := a.Stop(ctx); err != nil {
		return fmt.Errorf("agent: stop: %w", err)
	}
	if err := a.Reset(ctx); err != nil {
		return fmt.Errorf("agent: reset: %w", err)
	}
	return nil
}

// joinTenant joins the node to its holder's tenant cluster and waits until
// it is Ready there with a serving certificate the tenant signed; then the
// GlobalNode is occupied. Past JoinTimeout it says so, and keeps trying.
func (r *Reconciler) joinTenant(ctx context.Context, gn *nestv1.GlobalNode) (step, error) {
	key, t, err := r.tenantOf(ctx, gn)
	if err != nil {
		return step{}, err
	}
	if t.Unreachable != nil {
		return step{}, t.Unreachable
	}
	ready, err := nodeReady(ctx, t.Client, gn.Name)
	if err != nil {
		return step{}, err
	}
	if _, err := approveServing(ctx, t.Client, gn.Name, gn.Spec.NodeIP); err != nil {
		return step{}, err
	}
	var joining time.Time
	if gn.Status.PhaseTransitionTime != nil {
		joining = gn.Status.PhaseTransitionTime.Time
	}
	serving, err := servingIssued(ctx, t.Client, gn.Name, joining)
	if err != nil {
		return step{}, err
	}
	a, err := r.Agents.For(ctx, gn)
	if err != nil {
		return step{}, err
	}
	if ready && serving {
		trust, err := bundleTrust(ctx, a, t.Join.CACertPEM)
		if err != nil {
			return step{}, err
		}
		// An agent that reports no bundle cannot be checked: the node
		// joined, and its GlobalNode records no bundle (serveTenant says why).
		if trust != trustsOther {
			if err := deleteBootstrapTokens(ctx, t.Client, gn.Name); err != nil {
				return step{}, err
			}
			if err := r.setState(ctx, gn, nestv1.NodeStateOccupied, nil); err != nil {
				return step{}, err
			}
			gn.Status.CABundleHash = ""
			if trust == trustsThis {
				gn.Status.CABundleHash = pki.BundleHash(t.Join.CACertPEM)
			}
			return step{phase: nestv1.NodePhaseTenant, requeue: pollTenant, message: "Ready in the tenant cluster of " + key.String()}, nil
		}
	}
	// Before join makes a token, and on every pass: a kubelet that joined
	// before the tenant had the policy is listed too.
	if err := admitNode(ctx, t, gn); err != nil {
		return step{}, err
	}
	approve := func(ctx context.Context) (int, error) { return ApproveNodeClient(ctx, t.Client, gn.Name) }
	if err := join(ctx, a, t.Client, r.tenantJoin(t), gn.Name, "Nest: "+gn.Name+" joins "+key.String(), func(ctx context.Context) error {
		return addons.Apply(ctx, t.Objects, addons.NodeBootstrapRBAC())
	}, approve); err != nil {
		return step{}, err
	}
	s := step{phase: nestv1.NodePhaseJoining, requeue: pollSoon, message: "the kubelet runs; waiting for the node to be Ready in the tenant, with a serving certificate the tenant signed"}
	if since(gn) > r.joinTimeout() {
		s.reason, s.failed = "JoinTimeout", true
		s.message = fmt.Sprintf("not Ready in the tenant after %s: see the node's kubelet log; still trying", r.joinTimeout())
	}
	return s, nil
}

// tenantJoin is t's join request with the node's pull proxy asked for,
// unless the host serves none (PullProxyDeny nil).
func (r *Reconciler) tenantJoin(t *Tenant) agent.JoinRequest {
	req := t.Join
	if r.PullProxyDeny != nil {
		req.PullProxy = &agent.PullProxy{Deny: slices.Clone(r.PullProxyDeny)}
	}
	return req
}

// join has the agent join the cluster cs serves and start the kubelet and
// kube-proxy, unless they already run joined there. A kubelet that runs
// joined there but whose start did not finish (its certificate not yet
// signed) is started again; if that fails too, or the kubelet trusts
// another CA bundle of that cluster (rejoinsInPlace), it is stopped and
// joins again with a fresh token, its pods kept; one joined elsewhere
// leaves (stop and reset) first. prepare runs on that cluster before a token is
// made (its RBAC). approve, when set, approves the kubelet's client
// certificate request while the agent starts it.
func join(ctx context.Context, a Agent, cs kubernetes.Interface, req agent.JoinRequest, node, description string,
	prepare func(context.Context) error, approve func(context.Context) (int, error)) error {
	start := func() error {
		if approve == nil {
			return a.Start(ctx)
		}
		return startApproving(ctx, a, approve)
	}
	st, err := a.Status(ctx)
	if err != nil {
		return fmt.Errorf("agent: status: %w", err)
	}
	if st.Kubelet.Running && st.Server == req.Server && !rejoinsInPlace(st, req) {
		if st.Bootstrapped && st.KubeProxy.Running {
			return nil
		}
		if err := start(); err == nil {
			return nil
		}
	}
	if err := prepare(ctx); err != nil {
		return err
	}
	tok, err := addons.NewBootstrapToken(node, description, bootstrapTokenTTL, time.Now())
	if err != nil {
		return err
	}
	if _, err := cs.CoreV1().Secrets(tok.Secret.Namespace).Create(ctx, tok.Secret, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create bootstrap token Secret: %w", err)
	}
	req.BootstrapToken = tok.Token
	switch running := st.Kubelet.Running || st.KubeProxy.Running; {
	case running && st.Server == req.Server:
		// Joined there already, with another CA bundle or a start that
		// did not finish: stopped, not reset, so its pods keep running;
		// the agent's Join has the kubelet bootstrap anew where its
		// bundle changed.
		if err := a.Stop(ctx); err != nil {
			return fmt.Errorf("agent: stop: %w", err)
		}
	case running:
		if err := leave(ctx, a); err != nil {
			return err
		}
	}
	if err := a.Join(ctx, req); err != nil {
		if agent.IsConflict(err) {
			// Joined elsewhere while stopped: reset, and join on the next pass.
			return errors.Join(err, a.Reset(ctx))
		}
		return fmt.Errorf("agent: join: %w", err)
	}
	if err := start(); err != nil {
		return fmt.Errorf("agent: start: %w", err)
	}
	return nil
}

// rejoinsInPlace reports whether a node whose agent reports st, joined to
// req's cluster, rejoins it in place: its kubelet holds a kubeconfig of
// that cluster trusting another CA bundle than req's, as after a phase of
// a rotation of the cluster's CA.
func rejoinsInPlace(st agent.Status, req agent.JoinRequest) bool {
	return st.Server == req.Server && st.Bootstrapped && st.CAHash != "" && st.CAHash != pki.BundleHash(req.CACertPEM)
}

// What a node's agent says of the CA bundle its kubelet trusts.
type trust int

const (
	// trustsOther: the kubelet is not bootstrapped, or trusts another bundle.
	trustsOther trust = iota
	// trustsThis: the kubelet bootstrapped with the bundle asked about.
	trustsThis
	// trustUnknown: the agent, older than nest-manager, reports no bundle.
	trustUnknown
)

// agentWithoutCAHash says what to do about an agent that reports no bundle.
const agentWithoutCAHash = "the node's nest-agent reports no caHash (GET /v1/status): it is older than nest-manager; upgrade it, or the node cannot follow a rotation of the tenant's cluster CA"

// bundleTrust asks the node's agent whether its kubelet bootstrapped with
// the CA bundle caPEM (agent.Status.CAHash).
func bundleTrust(ctx context.Context, a Agent, caPEM []byte) (trust, error) {
	st, err := a.Status(ctx)
	if err != nil {
		return trustsOther, fmt.Errorf("agent: status: %w", err)
	}
	switch {
	case !st.Bootstrapped:
		return trustsOther, nil
	case st.CAHash == "":
		return trustUnknown, nil
	case st.CAHash == pki.BundleHash(caPEM):
		return trustsThis, nil
	}
	return trustsOther, nil
}

// startApproving runs approve every half second while the agent starts the
// kubelet, which waits for its certificate.
func startApproving(ctx context.Context, a Agent, approve func(context.Context) (int, error)) error {
	approving, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = wait.PollUntilContextCancel(approving, 500*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			if _, err := approve(ctx); err != nil {
				ctrl.LoggerFrom(ctx).Info("Approving a node client certificate failed; trying again", "error", err.Error())
			}
			return false, nil
		})
	}()
	err := a.Start(ctx)
	stop()
	<-done
	return err
}

// serveTenant keeps a node in the tenant: it keeps the node admitted, so
// its kubelet may go on writing its Node should the policy's parameter have
// lost it, and approves the kubelet's serving certificate renewals. When
// the tenant's cluster CA bundle is no longer the one the node joined with
// (a phase of a CA rotation rolled out), the node rejoins in place:
// Joining, whose join has the kubelet bootstrap anew.
func (r *Reconciler) serveTenant(ctx context.Context, gn *nestv1.GlobalNode) (step, error) {
	key, t, err := r.tenantOf(ctx, gn)
	if err != nil {
		return step{}, err
	}
	if err := admitNode(ctx, t, gn); err != nil {
		return step{}, err
	}
	if _, err := approveServing(ctx, t.Client, gn.Name, gn.Spec.NodeIP); err != nil {
		return step{}, err
	}
	if want := pki.BundleHash(t.Join.CACertPEM); t.Unreachable == nil && gn.Status.CABundleHash != want {
		a, err := r.Agents.For(ctx, gn)
		if err != nil {
			return step{}, err
		}
		// A node that joined before Nest recorded the bundle may trust it.
		switch trust, err := bundleTrust(ctx, a, t.Join.CACertPEM); {
		case err != nil:
			return step{}, err
		case trust == trustUnknown:
			return step{phase: nestv1.NodePhaseTenant, requeue: pollTenant, reason: "AgentReportsNoCAHash", failed: true, message: agentWithoutCAHash}, nil
		case trust == trustsOther:
			return step{phase: nestv1.NodePhaseJoining, message: "rejoining in place with the tenant's new cluster CA bundle (a CA rotation); its pods keep running"}, nil
		}
		gn.Status.CABundleHash = want
	}
	return step{phase: nestv1.NodePhaseTenant, requeue: pollTenant, message: "a node of the tenant cluster of " + key.String()}, nil
}

// admitNode has the tenant admit gn's kubelet, and no kubelet of a name
// Nest did not assign (addons.NodeAdmission): the policy, and gn listed in
// its parameter.
func admitNode(ctx context.Context, t *Tenant, gn *nestv1.GlobalNode) error {
	if err := addons.Apply(ctx, t.Objects, addons.NodeAdmission()); err != nil {
		return fmt.Errorf("the tenant's admission policy for kubelets: %w", err)
	}
	return addons.AssignNode(ctx, t.Objects, gn.Name, gn.Spec.NodeIP)
}

// nodeReady reports whether cs has node name with Ready True.
func nodeReady(ctx context.Context, cs kubernetes.Interface, name string) (bool, error) {
	node, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("get node %s: %w", name, err)
	}
	return kube.NodeReady(node), nil
}
