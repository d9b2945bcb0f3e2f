package nodepromotion

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/addons"
	"github.com/nestdev/nest/internal/pki"
)

// newWorker registers a host worker with labels, its agent, and waits for
// its free GlobalNode.
func newWorker(t *testing.T, name string, labels map[string]string) *fakeNode {
	t.Helper()
	ctx := context.Background()
	n := agents.add(name)
	if err := registerNode(ctx, host, name); err != nil {
		t.Fatal(err)
	}
	if len(labels) > 0 {
		node := &corev1.Node{}
		if err := host.Get(ctx, client.ObjectKey{Name: name}, node); err != nil {
			t.Fatal(err)
		}
		before := node.DeepCopy()
		for k, v := range labels {
			node.Labels[k] = v
		}
		if err := host.Patch(ctx, node, client.MergeFrom(before)); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "free GlobalNode "+name, func() error {
		gn, err := globalNode(name)
		if err != nil {
			return err
		}
		for k, v := range labels {
			if gn.Spec.Labels[k] != v {
				return fmt.Errorf("labels %v", gn.Spec.Labels)
			}
		}
		return nil
	})
	return n
}

func globalNode(name string) (*nestv1.GlobalNode, error) {
	gn := &nestv1.GlobalNode{}
	return gn, host.Get(context.Background(), client.ObjectKey{Name: name}, gn)
}

// newVirtualCluster creates a VirtualCluster that asks for the named node.
func newVirtualCluster(t *testing.T, name, node string) *nestv1.VirtualCluster {
	t.Helper()
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "vc-" + name}}
	if err := host.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	vc := &nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns.Name},
		Spec: nestv1.VirtualClusterSpec{PromoteResources: nestv1.PromoteResources{NodeInfos: []nestv1.NodeInfo{{NodeName: node}}}}}
	if err := host.Create(ctx, vc); err != nil {
		t.Fatal(err)
	}
	return vc
}

func waitPhase(t *testing.T, name string, phase nestv1.NodePhase, state nestv1.NodeState) *nestv1.GlobalNode {
	t.Helper()
	var last *nestv1.GlobalNode
	eventually(t, fmt.Sprintf("GlobalNode %s %s/%s", name, phase, state), func() error {
		gn, err := globalNode(name)
		if err != nil {
			return err
		}
		last = gn
		if gn.Status.Phase != phase || gn.Spec.State != state {
			return fmt.Errorf("phase %s state %s, Moving %+v", gn.Status.Phase, gn.Spec.State, meta.FindStatusCondition(gn.Status.Conditions, ConditionMoving))
		}
		return nil
	})
	return last
}

func hostNodeOf(t *testing.T, name string) *corev1.Node {
	t.Helper()
	node := &corev1.Node{}
	err := host.Get(context.Background(), client.ObjectKey{Name: name}, node)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return node
}

func TestPromoteAndReleaseMoveTheNodeThroughBothClusters(t *testing.T) {
	ctx := context.Background()
	node := newWorker(t, "move-a", map[string]string{"pool": "gpu"})
	vc := newVirtualCluster(t, "move", "move-a")

	gn := waitPhase(t, "move-a", nestv1.NodePhaseTenant, nestv1.NodeStateOccupied)
	if gn.Status.VirtualCluster != "vc-move/move" || gn.Status.PodCIDR != podCIDROf("move-a") {
		t.Errorf("status.virtualCluster = %q, podCIDR = %q; want vc-move/move and the node's own %s", gn.Status.VirtualCluster, gn.Status.PodCIDR, podCIDROf("move-a"))
	}
	if hostNodeOf(t, "move-a") != nil {
		t.Error("the host still has the promoted Node")
	}
	if err := tenant.Get(ctx, client.ObjectKey{Name: "move-a"}, &corev1.Node{}); err != nil {
		t.Errorf("the tenant has no Node move-a: %v", err)
	}
	calls := node.callList()
	for _, want := range [][]string{{"stop", "reset"}, {"join", "start"}} {
		i := slices.Index(calls, want[0])
		if i < 0 || i+1 >= len(calls) || calls[i+1] != want[1] {
			t.Errorf("agent calls %v lack %v in a row", calls, want)
		}
	}
	joins := node.joinList()
	if len(joins) != 1 || joins[0].Server != tenantServer || !joins[0].ServerTLSBootstrap || string(joins[0].KubeletClientCAPEM) != "kubelet client CA" {
		t.Fatalf("joins = %+v, want one to the tenant with its kubelet client CA and serving bootstrap", joins)
	}
	// In the tenant the node's agent serves the pull proxy the host's node
	// network agent served.
	if p := joins[0].PullProxy; p == nil || !slices.Equal(p.Deny, testPullProxyDeny) {
		t.Errorf("the tenant join's pullProxy = %+v, want one denying %v", p, testPullProxyDeny)
	}
	requireBootstrapToken(t, tenant, node, joins[0].BootstrapToken)
	csrs, err := tenantCS.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	approved := 0
	for _, csr := range csrs.Items {
		for _, c := range csr.Status.Conditions {
			if csr.Spec.Username == "system:node:move-a" && c.Type == certificatesv1.CertificateApproved && c.Reason == "NestNodeServing" {
				approved++
			}
		}
	}
	if approved != 1 {
		t.Errorf("%d serving requests of move-a approved by Nest, want 1 (of %d requests)", approved, len(csrs.Items))
	}
	for _, crb := range addons.NodeBootstrapRBAC() {
		if err := tenant.Get(ctx, client.ObjectKeyFromObject(crb), &rbacv1.ClusterRoleBinding{}); err != nil {
			t.Errorf("tenant ClusterRoleBinding %s: %v", crb.GetName(), err)
		}
	}
	// kubeadm's binding by which the controller-manager approves any name a
	// bootstrap token asks for: nest-manager approves instead.
	if err := tenant.Get(ctx, client.ObjectKey{Name: "nest:node-autoapprove-bootstrap"}, &rbacv1.ClusterRoleBinding{}); !apierrors.IsNotFound(err) {
		t.Errorf("tenant ClusterRoleBinding nest:node-autoapprove-bootstrap: %v; want none", err)
	}
	requireNodeAdmission(t, "move-a", gn.Spec.NodeIP)

	before := vc.DeepCopy()
	vc.Spec.PromoteResources.NodeInfos = nil
	if err := host.Patch(ctx, vc, client.MergeFrom(before)); err != nil {
		t.Fatal(err)
	}
	waitPhase(t, "move-a", nestv1.NodePhaseHost, nestv1.NodeStateFree)
	gn, err = globalNode("move-a")
	if err != nil {
		t.Fatal(err)
	}
	if gn.Status.VirtualCluster != "" || gn.Annotations[nestv1.AnnotationHeldBy] != "" || gn.Status.PodCIDR != "" {
		t.Errorf("released GlobalNode still names a holder or a pod CIDR: %q, %q, %q", gn.Status.VirtualCluster, gn.Annotations[nestv1.AnnotationHeldBy], gn.Status.PodCIDR)
	}
	if err := tenant.Get(ctx, client.ObjectKey{Name: "move-a"}, &corev1.Node{}); !apierrors.IsNotFound(err) {
		t.Errorf("the tenant still has Node move-a: %v", err)
	}
	if listed, ok := assignedNodes(t); !ok || hasKey(listed, "move-a") {
		t.Errorf("the tenant's assigned nodes after the release: %v (ConfigMap there: %t); want the ConfigMap without move-a", listed, ok)
	}
	back := hostNodeOf(t, "move-a")
	if back == nil || back.Labels["pool"] != "gpu" || back.Spec.Unschedulable {
		t.Fatalf("host Node after release: %+v; want it back with pool=gpu, schedulable", back)
	}
	joins = node.joinList()
	if len(joins) != 2 || joins[1].Server != hostServer || len(joins[1].KubeletClientCAPEM) != 0 || joins[1].ServerTLSBootstrap {
		t.Fatalf("second join = %+v, want the host keeping the node's own kubelet client CA and serving certificate", joins[1:])
	}
	if p := joins[1].PullProxy; p != nil {
		t.Errorf("the host join's pullProxy = %+v, want none: the host's node network agent serves it there", p)
	}
	requireBootstrapToken(t, host, node, joins[1].BootstrapToken)
	eventually(t, "finalizer of a VirtualCluster that holds nothing", func() error {
		if err := host.Get(ctx, client.ObjectKeyFromObject(vc), vc); err != nil {
			return err
		}
		if len(vc.Finalizers) > 0 || len(vc.Status.AssignedNodes) > 0 {
			return fmt.Errorf("finalizers %v, assignedNodes %v", vc.Finalizers, vc.Status.AssignedNodes)
		}
		return nil
	})
}

// requireNodeAdmission checks that the tenant has the admission policy for
// kubelets, with node listed at ip, and that the policy refuses a kubelet
// of another name.
func requireNodeAdmission(t *testing.T, node, ip string) {
	t.Helper()
	ctx := context.Background()
	if err := tenant.Get(ctx, client.ObjectKey{Name: addons.AssignedNodesName}, &admissionregistrationv1.ValidatingAdmissionPolicy{}); err != nil {
		t.Errorf("tenant ValidatingAdmissionPolicy: %v", err)
	}
	if err := tenant.Get(ctx, client.ObjectKey{Name: addons.AssignedNodesName}, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}); err != nil {
		t.Errorf("tenant ValidatingAdmissionPolicyBinding: %v", err)
	}
	if listed, _ := assignedNodes(t); listed[node] != ip || ip == "" {
		t.Errorf("the tenant's assigned nodes: %v; want %s at %q", listed, node, ip)
	}
	intruder, err := client.New(kubeletConfig("intruder"), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "a kubelet of a name Nest did not assign refused", func() error {
		err := intruder.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "intruder"}})
		if err == nil {
			if err := tenant.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "intruder"}}); err != nil {
				return err
			}
			return errors.New("Node intruder registered")
		}
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "node intruder is not assigned to this cluster by Nest") {
			return fmt.Errorf("refused with %w", err)
		}
		return nil
	})
}

// assignedNodes is the tenant's list of assigned nodes, each one's address,
// and whether the ConfigMap is there.
func assignedNodes(t *testing.T) (map[string]string, bool) {
	t.Helper()
	cm := &corev1.ConfigMap{}
	err := tenant.Get(context.Background(), client.ObjectKey{Namespace: metav1.NamespaceSystem, Name: addons.AssignedNodesName}, cm)
	if apierrors.IsNotFound(err) {
		return nil, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return cm.Data, true
}

func hasKey(m map[string]string, key string) bool {
	_, ok := m[key]
	return ok
}

// requireBootstrapToken checks that the join with token had a valid,
// authentication-only bootstrap token Secret for it in c, for node, and that
// the Secret is gone now that the node has joined.
func requireBootstrapToken(t *testing.T, c client.Client, node *fakeNode, token string) {
	t.Helper()
	id, secret, ok := strings.Cut(token, ".")
	if !ok {
		t.Fatalf("token %q is not id.secret", token)
	}
	name := bootstrapapi.BootstrapTokenSecretPrefix + id
	var s *corev1.Secret
	for _, tok := range node.tokenList() {
		if tok.Name == name {
			s = tok
		}
	}
	if s == nil {
		t.Fatalf("no bootstrap token Secret %s at the join", name)
	}
	if s.Labels[addons.LabelBootstrapFor] != node.name {
		t.Errorf("bootstrap token Secret %s labels %v, want %s=%s", name, s.Labels, addons.LabelBootstrapFor, node.name)
	}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: metav1.NamespaceSystem, Name: name}, &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Errorf("bootstrap token Secret %s still there after the node joined (get: %v)", name, err)
	}
	if s.Type != bootstrapapi.SecretTypeBootstrapToken || string(s.Data[bootstrapapi.BootstrapTokenSecretKey]) != secret ||
		string(s.Data[bootstrapapi.BootstrapTokenUsageAuthentication]) != "true" || len(s.Data[bootstrapapi.BootstrapTokenUsageSigningKey]) != 0 ||
		len(s.Data[bootstrapapi.BootstrapTokenExpirationKey]) == 0 {
		t.Errorf("bootstrap token Secret %s: type %s data %v", s.Name, s.Type, s.StringData)
	}
}

func TestANodeWhoseAgentDoesNotAnswerStaysInTheHost(t *testing.T) {
	node := newWorker(t, "mute-a", nil)
	node.mu.Lock()
	node.down = true
	node.mu.Unlock()
	newVirtualCluster(t, "mute", "mute-a")
	eventually(t, "Moving False naming the agent", func() error {
		gn, err := globalNode("mute-a")
		if err != nil {
			return err
		}
		c := meta.FindStatusCondition(gn.Status.Conditions, ConditionMoving)
		if c == nil || c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, "nest-agent does not answer") {
			return fmt.Errorf("Moving %+v", c)
		}
		if gn.Status.Phase != nestv1.NodePhaseHost {
			return fmt.Errorf("phase %s", gn.Status.Phase)
		}
		return nil
	})
	if n := hostNodeOf(t, "mute-a"); n == nil || n.Spec.Unschedulable {
		t.Errorf("host Node %+v: want it there and schedulable", n)
	}
}

func TestADrainThatTimesOutFailsAndAReleaseUncordons(t *testing.T) {
	ctx := context.Background()
	newWorker(t, "stuck-a", nil)
	// A running pod that a PodDisruptionBudget keeps: no eviction is
	// allowed (a pending one could always be evicted).
	labels := map[string]string{"app": "stuck"}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "keep", Namespace: metav1.NamespaceDefault, Labels: labels},
		Spec: corev1.PodSpec{NodeName: "stuck-a", Containers: []corev1.Container{{Name: "c", Image: "x"}},
			TerminationGracePeriodSeconds: ptr.To[int64](0), AutomountServiceAccountToken: ptr.To(false)},
	}
	if err := host.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	if err := host.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	createPDB(t, labels)
	vc := newVirtualCluster(t, "stuck", "stuck-a")
	gn := waitPhase(t, "stuck-a", nestv1.NodePhaseFailed, nestv1.NodeStateReserved)
	if c := meta.FindStatusCondition(gn.Status.Conditions, ConditionMoving); c == nil || c.Reason != "DrainTimeout" || !strings.Contains(c.Message, "default/keep") {
		t.Errorf("Moving = %+v, want DrainTimeout naming default/keep", c)
	}
	if n := hostNodeOf(t, "stuck-a"); n == nil || !n.Spec.Unschedulable {
		t.Fatalf("host Node %+v: want it cordoned", n)
	}
	before := vc.DeepCopy()
	vc.Spec.PromoteResources.NodeInfos = nil
	if err := host.Patch(ctx, vc, client.MergeFrom(before)); err != nil {
		t.Fatal(err)
	}
	waitPhase(t, "stuck-a", nestv1.NodePhaseHost, nestv1.NodeStateFree)
	if n := hostNodeOf(t, "stuck-a"); n == nil || n.Spec.Unschedulable {
		t.Errorf("host Node %+v: want it schedulable again", n)
	}
}

// createPDB makes a PodDisruptionBudget that allows no disruption of the
// pods with labels, with the status the disruption controller (which
// envtest does not run) would write: the Eviction API refuses (429).
func createPDB(t *testing.T, labels map[string]string) {
	t.Helper()
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "keep", Namespace: metav1.NamespaceDefault},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable: ptr.To(intstr.FromInt32(0)),
			Selector:       &metav1.LabelSelector{MatchLabels: labels},
		},
	}
	if err := host.Create(context.Background(), pdb); err != nil {
		t.Fatal(err)
	}
	pdb.Status = policyv1.PodDisruptionBudgetStatus{ObservedGeneration: pdb.Generation, DisruptionsAllowed: 0,
		CurrentHealthy: 1, DesiredHealthy: 1, ExpectedPods: 1}
	if err := host.Status().Update(context.Background(), pdb); err != nil {
		t.Fatal(err)
	}
}

// When the tenant's cluster CA bundle changes (a phase of a CA rotation
// rolled out), a node in the tenant rejoins in place: its kubelet stops,
// bootstraps anew with the new bundle and starts, and nothing resets it.
func TestANodeRejoinsInPlaceWhenTheClusterCABundleChanges(t *testing.T) {
	ctx := context.Background()
	node := newWorker(t, "rotate-a", nil)
	vc := newVirtualCluster(t, "rotate", "rotate-a")
	gn := waitPhase(t, "rotate-a", nestv1.NodePhaseTenant, nestv1.NodeStateOccupied)
	if want := pki.BundleHash(tenantCA.bundle()); gn.Status.CABundleHash != want {
		t.Fatalf("status.caBundleHash = %q after the join, want the tenant bundle's %q", gn.Status.CABundleHash, want)
	}
	joined := len(node.callList())

	before := tenantCA.bundle()
	rotated := tenantCA.rotate()
	t.Cleanup(func() { tenantCA.set(before) })
	// The rotation's phase rolling out is what wakes the held nodes.
	unpatched := vc.DeepCopy()
	vc.Status.Certificates = &nestv1.CertificatesStatus{CARotation: &nestv1.CARotation{Request: "r1", Authorities: []nestv1.CAName{nestv1.CACluster},
		Phase: nestv1.CAPhaseReissue, PhaseTime: metav1.Now(), RolledOutCAHash: pki.BundleHash(rotated)}}
	if err := host.Status().Patch(ctx, vc, client.MergeFrom(unpatched)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "GlobalNode rotate-a back in the tenant with the rotated bundle", func() error {
		gn, err := globalNode("rotate-a")
		if err != nil {
			return err
		}
		if gn.Status.Phase != nestv1.NodePhaseTenant || gn.Status.CABundleHash != pki.BundleHash(rotated) {
			return fmt.Errorf("phase %s, caBundleHash %q; Moving %+v", gn.Status.Phase, gn.Status.CABundleHash, meta.FindStatusCondition(gn.Status.Conditions, ConditionMoving))
		}
		return nil
	})
	calls := node.callList()[joined:]
	if slices.Contains(calls, "reset") || !slices.Contains(calls, "stop") {
		t.Errorf("agent calls of the rejoin %v: want a stop and no reset (the node's pods keep running)", calls)
	}
	if i := slices.Index(calls, "join"); i < 0 || i+1 >= len(calls) || calls[i+1] != "start" {
		t.Errorf("agent calls of the rejoin %v lack a join then a start", calls)
	}
	joins := node.joinList()
	if last := joins[len(joins)-1]; string(last.CACertPEM) != string(rotated) || last.Server != tenantServer {
		t.Errorf("the rejoin's request: server %s with CA %q; want the tenant's with the rotated bundle", last.Server, last.CACertPEM)
	}
	requireBootstrapToken(t, tenant, node, joins[len(joins)-1].BootstrapToken)
}
