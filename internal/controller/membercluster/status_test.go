package membercluster

import (
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
)

func node(name string, cordoned bool, ready corev1.ConditionStatus, capacity, allocatable corev1.ResourceList) corev1.Node {
	n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{Unschedulable: cordoned},
		Status: corev1.NodeStatus{Capacity: capacity, Allocatable: allocatable}}
	if ready != "" {
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready}}
	}
	return n
}

func TestOffered(t *testing.T) {
	a := node("a", false, corev1.ConditionTrue, res("cpu", "4", "memory", "8Gi", "nvidia.com/gpu", "2"), res("cpu", "3500m", "memory", "7Gi", "nvidia.com/gpu", "2"))
	b := node("b", false, corev1.ConditionTrue, res("cpu", "8", "memory", "16Gi"), res("cpu", "8", "memory", "15Gi"))
	for _, tt := range []struct {
		name                  string
		nodes                 []corev1.Node
		limits                corev1.ResourceList
		wantCapacity, wantAll corev1.ResourceList
	}{
		{"no nodes, no limits", nil, nil, nil, nil},
		{"no nodes, a limit offers zero", nil, res("cpu", "4"), nil, res("cpu", "0")},
		{"sum without limits", []corev1.Node{a, b}, nil,
			res("cpu", "12", "memory", "24Gi", "nvidia.com/gpu", "2"), res("cpu", "11500m", "memory", "22Gi", "nvidia.com/gpu", "2")},
		{"limits cap allocatable, not capacity", []corev1.Node{a, b}, res("cpu", "10", "nvidia.com/gpu", "1"),
			res("cpu", "12", "memory", "24Gi", "nvidia.com/gpu", "2"), res("cpu", "10", "memory", "22Gi", "nvidia.com/gpu", "1")},
		{"a limit above what the member has changes nothing", []corev1.Node{a}, res("memory", "1Ti"),
			res("cpu", "4", "memory", "8Gi", "nvidia.com/gpu", "2"), res("cpu", "3500m", "memory", "7Gi", "nvidia.com/gpu", "2")},
		{"a resource the member lacks is offered as zero", []corev1.Node{b}, res("nvidia.com/gpu", "8"),
			res("cpu", "8", "memory", "16Gi"), res("cpu", "8", "memory", "15Gi", "nvidia.com/gpu", "0")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			capacity, allocatable := offered(tt.nodes, tt.limits)
			checkResources(t, "capacity", capacity, tt.wantCapacity)
			checkResources(t, "allocatable", allocatable, tt.wantAll)
		})
	}
}

func TestSchedulable(t *testing.T) {
	nodes := []corev1.Node{
		node("ready", false, corev1.ConditionTrue, nil, nil),
		node("cordoned", true, corev1.ConditionTrue, nil, nil),
		node("notready", false, corev1.ConditionFalse, nil, nil),
		node("unknown", false, corev1.ConditionUnknown, nil, nil),
		node("no-condition", false, "", nil, nil),
	}
	got := schedulable(nodes)
	if len(got) != 1 || got[0].Name != "ready" {
		t.Errorf("schedulable = %v, want only ready", got)
	}
}

func TestSetStatus(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	ref := nestv1.SecretKeyRef{Namespace: "nest-system", Name: "nest-member-gpu"}
	for _, tt := range []struct {
		name         string
		f            *failure
		wantStatus   metav1.ConditionStatus
		wantReason   string
		wantMessage  string
		wantNodes    int32
		wantOffering bool
	}{
		{"reachable", nil, metav1.ConditionTrue, ReasonReachable, "listed 2 Nodes of the member, 1 Ready and schedulable", 1, true},
		{"secret not found", secretNotFound(ref), metav1.ConditionFalse, ReasonSecretNotFound, "Secret nest-system/nest-member-gpu does not exist", 0, false},
		{"secret elsewhere", secretNotAllowed(nestv1.SecretKeyRef{Namespace: "vc-a", Name: "k"}, "nest-system"), metav1.ConditionFalse, ReasonSecretNotAllowed,
			"spec.kubeconfigSecretRef.namespace: nest-manager reads kubeconfig Secrets only in its own namespace nest-system, not vc-a", 0, false},
		{"key missing", keyMissing(ref), metav1.ConditionFalse, ReasonKubeconfigInvalid, "spec.kubeconfigSecretRef.key: Secret nest-system/nest-member-gpu has no key kubeconfig", 0, false},
		{"bad kubeconfig", kubeconfigInvalid(ref, errors.New("not a kubeconfig")), metav1.ConditionFalse, ReasonKubeconfigInvalid,
			"Secret nest-system/nest-member-gpu key kubeconfig: not a kubeconfig", 0, false},
		{"unreachable", listFailed("https://10.20.0.5:6443", errors.New("dial tcp: connection refused")), metav1.ConditionFalse, ReasonUnreachable,
			"list Nodes of the member at https://10.20.0.5:6443: dial tcp: connection refused", 0, false},
		{"forbidden", listFailed("https://10.20.0.5:6443", apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "", errors.New("no"))), metav1.ConditionFalse,
			ReasonAccessDenied, "give the kubeconfig's user get and list on nodes there", 0, false},
		{"unauthorized", listFailed("https://10.20.0.5:6443", apierrors.NewUnauthorized("bad token")), metav1.ConditionFalse, ReasonAccessDenied, "refused to list Nodes", 0, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			mc := &nestv1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: "gpu", Generation: 3}, Spec: nestv1.MemberClusterSpec{KubeconfigSecretRef: ref}}
			// A previous probe's findings, which a failed probe must clear.
			mc.Status.Capacity, mc.Status.Allocatable, mc.Status.Nodes = res("cpu", "1"), res("cpu", "1"), 7
			nodes := []corev1.Node{
				node("a", false, corev1.ConditionTrue, res("cpu", "4"), res("cpu", "4")),
				node("b", true, corev1.ConditionTrue, res("cpu", "4"), res("cpu", "4")),
			}
			setStatus(mc, nodes, tt.f, nil, now)
			c := meta.FindStatusCondition(mc.Status.Conditions, nestv1.ConditionReachable)
			if c == nil || c.Status != tt.wantStatus || c.Reason != tt.wantReason || !strings.Contains(c.Message, tt.wantMessage) || c.ObservedGeneration != 3 {
				t.Errorf("Reachable = %+v, want %s %s saying %q", c, tt.wantStatus, tt.wantReason, tt.wantMessage)
			}
			inj := meta.FindStatusCondition(mc.Status.Conditions, nestv1.ConditionInjectorReady)
			if inj == nil || inj.Status != metav1.ConditionFalse || inj.Reason != ReasonNoGrants {
				t.Errorf("InjectorReady = %+v, want False NoGrants", inj)
			}
			if mc.Status.Nodes != tt.wantNodes || (mc.Status.Allocatable != nil) != tt.wantOffering || (mc.Status.Capacity != nil) != tt.wantOffering {
				t.Errorf("nodes %d, capacity %v, allocatable %v; want %d nodes, offering %v", mc.Status.Nodes, mc.Status.Capacity, mc.Status.Allocatable, tt.wantNodes, tt.wantOffering)
			}
			if mc.Status.ObservedGeneration != 3 || mc.Status.LastProbeTime == nil || !mc.Status.LastProbeTime.Equal(&now) {
				t.Errorf("observedGeneration %d, lastProbeTime %v", mc.Status.ObservedGeneration, mc.Status.LastProbeTime)
			}
		})
	}
}

// A condition whose status holds keeps its transition time across probes.
func TestSetStatusKeepsTransitionTime(t *testing.T) {
	first := metav1.NewTime(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	later := metav1.NewTime(first.Add(time.Minute))
	mc := &nestv1.MemberCluster{}
	setStatus(mc, nil, nil, nil, first)
	setStatus(mc, nil, nil, nil, later)
	if c := meta.FindStatusCondition(mc.Status.Conditions, nestv1.ConditionReachable); !c.LastTransitionTime.Equal(&first) {
		t.Errorf("Reachable moved at %v, want %v", c.LastTransitionTime, first)
	}
	if !mc.Status.LastProbeTime.Equal(&later) {
		t.Errorf("lastProbeTime %v, want %v", mc.Status.LastProbeTime, later)
	}
}

func TestInjectorConditionSumsUpTheGrants(t *testing.T) {
	mc := &nestv1.MemberCluster{Spec: nestv1.MemberClusterSpec{Network: nestv1.MemberNetwork{NodePortAddress: "10.0.0.11"}}}
	vc := func(ns, name string, members ...nestv1.MemberGrantStatus) nestv1.VirtualCluster {
		return nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Status: nestv1.VirtualClusterStatus{Members: members}}
	}
	ready := nestv1.MemberGrantStatus{Name: "gpu", Ready: true, Namespace: "nest-a-1", InjectorReady: true}
	waiting := nestv1.MemberGrantStatus{Name: "gpu", Ready: true, Namespace: "nest-b-2"}
	notSetUp := nestv1.MemberGrantStatus{Name: "gpu", Namespace: "nest-c-3"}
	elsewhere := nestv1.MemberGrantStatus{Name: "other", Ready: true, Namespace: "nest-d-4"}
	// Without a node-port address, the grant's own path decides.
	viaLB := nestv1.MemberGrantStatus{Name: "gpu", Ready: true, Namespace: "nest-e-5", Network: nestv1.MemberNetworkLoadBalancer, InjectorReady: true}
	viaLBWaiting := nestv1.MemberGrantStatus{Name: "gpu", Ready: true, Namespace: "nest-f-6", Network: nestv1.MemberNetworkLoadBalancer}
	dnsOnly := nestv1.MemberGrantStatus{Name: "gpu", Ready: true, Namespace: "nest-g-7", Network: nestv1.MemberNetworkDNSAddress}
	noAddress := &nestv1.MemberCluster{}
	for _, tt := range []struct {
		name   string
		mc     *nestv1.MemberCluster
		vcs    []nestv1.VirtualCluster
		status metav1.ConditionStatus
		reason string
	}{
		{"no grant has a member network", noAddress, []nestv1.VirtualCluster{vc("vc-a", "a", ready), vc("vc-g", "g", dnsOnly)}, metav1.ConditionFalse, ReasonNoMemberNetwork},
		{"through a LoadBalancer, answering", noAddress, []nestv1.VirtualCluster{vc("vc-e", "e", viaLB), vc("vc-g", "g", dnsOnly)}, metav1.ConditionTrue, ReasonInjectorReady},
		{"through a LoadBalancer, not answering", noAddress, []nestv1.VirtualCluster{vc("vc-e", "e", viaLB), vc("vc-f", "f", viaLBWaiting)}, metav1.ConditionFalse, ReasonInjectorNotReady},
		{"no grant at all", noAddress, nil, metav1.ConditionFalse, ReasonNoGrants},
		{"no Ready grant here", mc, []nestv1.VirtualCluster{vc("vc-c", "c", notSetUp), vc("vc-d", "d", elsewhere)}, metav1.ConditionFalse, ReasonNoGrants},
		{"one not answering", mc, []nestv1.VirtualCluster{vc("vc-a", "a", ready), vc("vc-b", "b", waiting)}, metav1.ConditionFalse, ReasonInjectorNotReady},
		{"all answering", mc, []nestv1.VirtualCluster{vc("vc-a", "a", ready), vc("vc-c", "c", notSetUp)}, metav1.ConditionTrue, ReasonInjectorReady},
	} {
		c := injectorCondition(tt.mc, grantsOn(tt.vcs, "gpu"))
		if c.Status != tt.status || c.Reason != tt.reason {
			t.Errorf("%s: %s %s (%s); want %s %s", tt.name, c.Status, c.Reason, c.Message, tt.status, tt.reason)
		}
		if tt.reason == ReasonInjectorNotReady && !strings.Contains(c.Message, "vc-b/b (namespace nest-b-2)") && !strings.Contains(c.Message, "vc-f/f (namespace nest-f-6)") {
			t.Errorf("%s: message %q does not name the grant", tt.name, c.Message)
		}
	}
}
