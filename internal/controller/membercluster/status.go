package membercluster

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/kube"
)

// Reasons of the Reachable condition.
const (
	// ReasonReachable: the probe listed the member's Nodes.
	ReasonReachable = "Reachable"
	// ReasonSecretNotAllowed: the kubeconfig Secret is outside
	// nest-manager's namespace, so it is not read.
	ReasonSecretNotAllowed = "SecretNotAllowed"
	// ReasonSecretNotFound: the kubeconfig Secret does not exist.
	ReasonSecretNotFound = "SecretNotFound"
	// ReasonKubeconfigInvalid: the Secret lacks the key, or its value is not
	// a kubeconfig nest-manager can use.
	ReasonKubeconfigInvalid = "KubeconfigInvalid"
	// ReasonAccessDenied: the member answered, but refused the
	// kubeconfig's credentials or their listing Nodes.
	ReasonAccessDenied = "AccessDenied"
	// ReasonUnreachable: the member's API server did not answer.
	ReasonUnreachable = "Unreachable"
)

// Reasons of the InjectorReady condition.
const (
	// ReasonNoMemberNetwork: no Ready grant on the member has a path back
	// to its tenant through which the member reaches the injector (host node
	// ports at network.nodePortAddress, or a host LoadBalancer): none is
	// installed.
	ReasonNoMemberNetwork = "NoMemberNetwork"
	// ReasonNoGrants: no VirtualCluster has a Ready grant on the member;
	// the injector is installed per grant.
	ReasonNoGrants = "NoGrants"
	// ReasonInjectorNotReady: the injector of some grant does not answer.
	ReasonInjectorNotReady = "NotReady"
	// ReasonInjectorReady: every Ready grant's injector answers.
	ReasonInjectorReady = "Ready"
)

// GrantOn is one VirtualCluster's grant on a member, as the grant's
// status entry (the membergrant controller's) reports it.
type GrantOn struct {
	// VirtualCluster is namespace/name.
	VirtualCluster string
	Status         nestv1.MemberGrantStatus
}

// grantsOn lists the Ready grants on member from the VirtualClusters'
// statuses, sorted.
func grantsOn(vcs []nestv1.VirtualCluster, member string) []GrantOn {
	var out []GrantOn
	for _, vc := range vcs {
		for _, st := range vc.Status.Members {
			if st.Name == member && st.Ready {
				out = append(out, GrantOn{VirtualCluster: vc.Namespace + "/" + vc.Name, Status: st})
			}
		}
	}
	slices.SortFunc(out, func(a, b GrantOn) int { return strings.Compare(a.VirtualCluster, b.VirtualCluster) })
	return out
}

// failure is why a probe did not reach the member: the Reachable
// condition's reason and message.
type failure struct {
	reason, message string
}

func keyOf(ref nestv1.SecretKeyRef) string {
	if ref.Key == "" {
		return nestv1.DefaultKubeconfigKey
	}
	return ref.Key
}

func secretNotAllowed(ref nestv1.SecretKeyRef, managerNamespace string) *failure {
	return &failure{ReasonSecretNotAllowed, fmt.Sprintf(
		"spec.kubeconfigSecretRef.namespace: nest-manager reads kubeconfig Secrets only in its own namespace %s, not %s: put Secret %s in %s and name that namespace",
		managerNamespace, ref.Namespace, ref.Name, managerNamespace)}
}

func secretNotFound(ref nestv1.SecretKeyRef) *failure {
	return &failure{ReasonSecretNotFound, fmt.Sprintf(
		"spec.kubeconfigSecretRef: Secret %s/%s does not exist: create it with the member's kubeconfig under key %s (nest member add does)",
		ref.Namespace, ref.Name, keyOf(ref))}
}

func keyMissing(ref nestv1.SecretKeyRef) *failure {
	return &failure{ReasonKubeconfigInvalid, fmt.Sprintf(
		"spec.kubeconfigSecretRef.key: Secret %s/%s has no key %s, or it is empty: put the member's kubeconfig there, or name the key that holds it",
		ref.Namespace, ref.Name, keyOf(ref))}
}

func kubeconfigInvalid(ref nestv1.SecretKeyRef, err error) *failure {
	return &failure{ReasonKubeconfigInvalid, fmt.Sprintf("Secret %s/%s key %s: %v", ref.Namespace, ref.Name, keyOf(ref), err)}
}

// listFailed tells a member that refused the credentials from one that did
// not answer, since they are fixed in different places.
func listFailed(server string, err error) *failure {
	if apierrors.IsUnauthorized(err) || apierrors.IsForbidden(err) {
		return &failure{ReasonAccessDenied, fmt.Sprintf(
			"the member at %s refused to list Nodes: %v: give the kubeconfig's user get and list on nodes there", server, err)}
	}
	return &failure{ReasonUnreachable, fmt.Sprintf("list Nodes of the member at %s: %v", server, err)}
}

// reachable is mc's Reachable condition, nil before the first probe.
func reachable(mc *nestv1.MemberCluster) *metav1.Condition {
	return meta.FindStatusCondition(mc.Status.Conditions, nestv1.ConditionReachable)
}

// reachableCondition is the Reachable condition of a probe that found nodes,
// or failed with f.
func reachableCondition(mc *nestv1.MemberCluster, nodes []corev1.Node, usable int, f *failure) metav1.Condition {
	c := metav1.Condition{Type: nestv1.ConditionReachable, ObservedGeneration: mc.Generation}
	if f != nil {
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, f.reason, f.message
		return c
	}
	c.Status, c.Reason = metav1.ConditionTrue, ReasonReachable
	c.Message = fmt.Sprintf("listed %d Nodes of the member, %d Ready and schedulable", len(nodes), usable)
	return c
}

// injectorCondition is the InjectorReady condition: True when every Ready
// grant on the member that has an injector (a member network) has one
// that answers (its status entry's injectorReady, from a dry-run pod in its
// namespace).
func injectorCondition(mc *nestv1.MemberCluster, grants []GrantOn) metav1.Condition {
	c := metav1.Condition{Type: nestv1.ConditionInjectorReady, Status: metav1.ConditionFalse, ObservedGeneration: mc.Generation}
	var injected int
	var notReady []string
	for _, g := range grants {
		if !hasInjector(mc, g.Status) {
			continue
		}
		injected++
		if !g.Status.InjectorReady {
			notReady = append(notReady, fmt.Sprintf("%s (namespace %s)", g.VirtualCluster, g.Status.Namespace))
		}
	}
	switch {
	case len(grants) == 0:
		c.Reason, c.Message = ReasonNoGrants, "the injector is installed with each grant, and no VirtualCluster has a Ready grant on this member"
	case injected == 0:
		c.Reason, c.Message = ReasonNoMemberNetwork, "no grant on this member has a path back to its tenant, through which the member reaches the injector (status.members[].network is DNSAddress): set spec.network.nodePortAddress, or give the tenants LoadBalancer Services (spec.controlPlane.service.type), to install it with each grant"
	case len(notReady) > 0:
		c.Reason, c.Message = ReasonInjectorNotReady, "the injector does not answer for "+strings.Join(notReady, ", ")
	default:
		c.Status, c.Reason = metav1.ConditionTrue, ReasonInjectorReady
		c.Message = fmt.Sprintf("the injector admits pods in the namespaces of %d grants", injected)
	}
	return c
}

// hasInjector says whether grant st on mc gets an injector: when its
// tenant is reached through node ports or a LoadBalancer. A status written
// before status.members[].network existed says so through mc's
// nodePortAddress, as it was then.
func hasInjector(mc *nestv1.MemberCluster, st nestv1.MemberGrantStatus) bool {
	switch st.Network {
	case nestv1.MemberNetworkNodePort, nestv1.MemberNetworkLoadBalancer:
		return true
	case "":
		return mc.Spec.Network.NodePortAddress != ""
	}
	return false
}

// setStatus sets mc's status from a probe at now that listed nodes or
// failed with f. A failed probe clears what the member offers: a member
// Nest cannot reach offers nothing.
func setStatus(mc *nestv1.MemberCluster, nodes []corev1.Node, f *failure, grants []GrantOn, now metav1.Time) {
	var usable []corev1.Node
	mc.Status.Capacity, mc.Status.Allocatable = nil, nil
	if f == nil {
		usable = schedulable(nodes)
		mc.Status.Capacity, mc.Status.Allocatable = offered(usable, mc.Spec.Resources)
	}
	mc.Status.Nodes = int32(len(usable))
	for _, c := range []metav1.Condition{reachableCondition(mc, nodes, len(usable), f), injectorCondition(mc, grants)} {
		c.LastTransitionTime = now
		meta.SetStatusCondition(&mc.Status.Conditions, c)
	}
	mc.Status.ObservedGeneration = mc.Generation
	mc.Status.LastProbeTime = &now
}

// schedulable are the nodes new pods may land on: Ready and not cordoned.
// Taints are not looked at: a GPU pool's nodes are often tainted for the
// pods that tolerate it, which are the pods Nest will place there.
func schedulable(nodes []corev1.Node) []corev1.Node {
	var out []corev1.Node
	for _, n := range nodes {
		if !n.Spec.Unschedulable && kube.NodeReady(&n) {
			out = append(out, n)
		}
	}
	return out
}

// offered sums the capacity and allocatable resources of nodes, and caps
// each allocatable resource that limits names at its value. A resource
// limits names that no node has is offered as zero, so the status shows
// the member lacks it. Capacity is not capped: it is what the member has.
func offered(nodes []corev1.Node, limits corev1.ResourceList) (capacity, allocatable corev1.ResourceList) {
	capacity, allocatable = corev1.ResourceList{}, corev1.ResourceList{}
	for _, n := range nodes {
		add(capacity, n.Status.Capacity)
		add(allocatable, n.Status.Allocatable)
	}
	for name, limit := range limits {
		have, ok := allocatable[name]
		switch {
		case !ok:
			allocatable[name] = *resource.NewQuantity(0, limit.Format)
		case have.Cmp(limit) > 0:
			allocatable[name] = limit.DeepCopy()
		}
	}
	if len(capacity) == 0 {
		capacity = nil
	}
	if len(allocatable) == 0 {
		allocatable = nil
	}
	return capacity, allocatable
}

func add(sum, l corev1.ResourceList) {
	for name, q := range l {
		total := sum[name]
		total.Add(q)
		sum[name] = total
	}
}
