package nodeassignment

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/controller/globalnode"
)

// standInFinalizer stands in for the VirtualCluster controller's finalizer,
// which holds a deleted VirtualCluster while its host objects go.
const standInFinalizer = "nest.dev/virtualcluster"

// createNode registers a worker Node with an InternalIP, as its kubelet
// would, and waits for the inventory to give it a GlobalNode.
func createNode(t *testing.T, name string, labels map[string]string) {
	t.Helper()
	ctx := context.Background()
	if err := k8sClient.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = k8sClient.Delete(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
	})
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node := &corev1.Node{}
		if err := k8sClient.Get(ctx, client.ObjectKey{Name: name}, node); err != nil {
			return err
		}
		node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "198.51.100.31"}}
		return k8sClient.Status().Update(ctx, node)
	})
	if err != nil {
		t.Fatal(err)
	}
	// A VirtualCluster waiting for nodes may take it at once.
	eventually(t, "GlobalNode "+name+" is in phase Host", func() error {
		gn, err := getGlobalNode(name)
		if err != nil {
			return err
		}
		if gn.Status.Phase != nestv1.NodePhaseHost {
			return fmt.Errorf("phase %q", gn.Status.Phase)
		}
		return nil
	})
}

func getGlobalNode(name string) (*nestv1.GlobalNode, error) {
	gn := &nestv1.GlobalNode{}
	return gn, k8sClient.Get(context.Background(), client.ObjectKey{Name: name}, gn)
}

func getVC(key types.NamespacedName) (*nestv1.VirtualCluster, error) {
	vc := &nestv1.VirtualCluster{}
	return vc, k8sClient.Get(context.Background(), key, vc)
}

// poolPolicy asks for count nodes labelled pool=pool.
func poolPolicy(pool string, count int32) nestv1.PromotePolicy {
	return nestv1.PromotePolicy{LabelSelector: metav1.LabelSelector{MatchLabels: map[string]string{"pool": pool}}, NodeCount: count}
}

// createVC creates a VirtualCluster named name in a namespace of its own,
// with the given policies, named nodes and finalizers.
func createVC(t *testing.T, name string, policies []nestv1.PromotePolicy, nodeNames []string, finalizers ...string) types.NamespacedName {
	t.Helper()
	ctx := context.Background()
	ns := "na-" + name
	if err := k8sClient.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	vc := &nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Finalizers: finalizers}}
	vc.Spec.PromotePolicies = policies
	for _, n := range nodeNames {
		vc.Spec.PromoteResources.NodeInfos = append(vc.Spec.PromoteResources.NodeInfos, nestv1.NodeInfo{NodeName: n})
	}
	if err := k8sClient.Create(ctx, vc); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(vc)
	t.Cleanup(func() { deleteVC(t, key, true) })
	return key
}

// deleteVC deletes a VirtualCluster, and with standIn removes the stand-in
// finalizer as the VirtualCluster controller would once its host objects are gone.
func deleteVC(t *testing.T, key types.NamespacedName, standIn bool) {
	t.Helper()
	if err := k8sClient.Delete(context.Background(), &nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace}}); client.IgnoreNotFound(err) != nil {
		t.Fatal(err)
	}
	if standIn {
		updateVC(t, key, func(vc *nestv1.VirtualCluster) { controllerutil.RemoveFinalizer(vc, standInFinalizer) })
	}
}

// updateVC changes a VirtualCluster; a missing one is not an error.
func updateVC(t *testing.T, key types.NamespacedName, change func(*nestv1.VirtualCluster)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		vc, err := getVC(key)
		if err != nil {
			return err
		}
		change(vc)
		return k8sClient.Update(context.Background(), vc)
	})
	if client.IgnoreNotFound(err) != nil {
		t.Fatal(err)
	}
}

// checkHeld says how gn differs from a node holder holds: state reserved,
// the held-by annotation and status.virtualCluster naming holder, phase Host.
func checkHeld(name string, holder types.NamespacedName) error {
	gn, err := getGlobalNode(name)
	if err != nil {
		return err
	}
	key := holder.Namespace + "/" + holder.Name
	switch {
	case gn.Spec.State != nestv1.NodeStateReserved:
		return fmt.Errorf("GlobalNode %s: state %q, want reserved", name, gn.Spec.State)
	case gn.Annotations[nestv1.AnnotationHeldBy] != key:
		return fmt.Errorf("GlobalNode %s: %s annotation %q, want %q", name, nestv1.AnnotationHeldBy, gn.Annotations[nestv1.AnnotationHeldBy], key)
	case gn.Status.VirtualCluster != key:
		return fmt.Errorf("GlobalNode %s: status.virtualCluster %q, want %q", name, gn.Status.VirtualCluster, key)
	case gn.Status.Phase != nestv1.NodePhaseHost:
		return fmt.Errorf("GlobalNode %s: phase %q, want Host: node promotion does not run in this suite", name, gn.Status.Phase)
	}
	return nil
}

// checkFree says how gn differs from a free node no one holds, in phase Host.
func checkFree(name string) error {
	gn, err := getGlobalNode(name)
	if err != nil {
		return err
	}
	switch {
	case gn.Spec.State != nestv1.NodeStateFree:
		return fmt.Errorf("GlobalNode %s: state %q, want free", name, gn.Spec.State)
	case gn.Annotations[nestv1.AnnotationHeldBy] != "":
		return fmt.Errorf("GlobalNode %s: held by %q, want no holder", name, gn.Annotations[nestv1.AnnotationHeldBy])
	case gn.Status.VirtualCluster != "":
		return fmt.Errorf("GlobalNode %s: status.virtualCluster %q, want empty", name, gn.Status.VirtualCluster)
	case gn.Status.Phase != nestv1.NodePhaseHost:
		return fmt.Errorf("GlobalNode %s: phase %q, want Host", name, gn.Status.Phase)
	}
	return nil
}

// checkAssigned says how a VirtualCluster differs from one that holds
// exactly nodes (status.assignedNodes, and each GlobalNode held by it) with
// NodesAssigned True and reason reason.
func checkAssigned(key types.NamespacedName, reason string, nodes ...string) error {
	vc, err := getVC(key)
	if err != nil {
		return err
	}
	c := meta.FindStatusCondition(vc.Status.Conditions, nestv1.ConditionNodesAssigned)
	switch {
	case c == nil || c.Status != metav1.ConditionTrue || c.Reason != reason:
		return fmt.Errorf("NodesAssigned = %+v, want True with reason %s", c, reason)
	case c.ObservedGeneration != vc.Generation:
		return fmt.Errorf("NodesAssigned describes generation %d, want %d", c.ObservedGeneration, vc.Generation)
	case !slices.Equal(vc.Status.AssignedNodes, nodes):
		return fmt.Errorf("status.assignedNodes = %v, want %v", vc.Status.AssignedNodes, nodes)
	}
	for _, n := range nodes {
		if err := checkHeld(n, key); err != nil {
			return err
		}
	}
	return nil
}

// checkRefused says how a VirtualCluster differs from one with NodesAssigned
// False for reason, a message holding each of words, and no nodes but keep.
func checkRefused(key types.NamespacedName, reason string, words []string, keep ...string) error {
	vc, err := getVC(key)
	if err != nil {
		return err
	}
	c := meta.FindStatusCondition(vc.Status.Conditions, nestv1.ConditionNodesAssigned)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != reason {
		return fmt.Errorf("NodesAssigned = %+v, want False with reason %s", c, reason)
	}
	for _, w := range words {
		if !strings.Contains(c.Message, w) {
			return fmt.Errorf("NodesAssigned message %q does not name %q", c.Message, w)
		}
	}
	if !slices.Equal(vc.Status.AssignedNodes, keep) {
		return fmt.Errorf("status.assignedNodes = %v, want %v", vc.Status.AssignedNodes, keep)
	}
	return heldOnly(key, keep...)
}

// heldOnly says which GlobalNodes a VirtualCluster holds beyond nodes.
func heldOnly(key types.NamespacedName, nodes ...string) error {
	var list nestv1.GlobalNodeList
	if err := k8sClient.List(context.Background(), &list); err != nil {
		return err
	}
	holder := key.Namespace + "/" + key.Name
	var held []string
	for _, gn := range list.Items {
		if gn.Annotations[nestv1.AnnotationHeldBy] == holder || gn.Status.VirtualCluster == holder {
			held = append(held, gn.Name)
		}
	}
	if !slices.Equal(held, nodes) {
		return fmt.Errorf("VirtualCluster %s holds GlobalNodes %v, want %v", key, held, nodes)
	}
	return nil
}

func TestPolicyClaimsTheFreeMatchingNode(t *testing.T) {
	createNode(t, "claim-a", map[string]string{"pool": "claim"})
	createNode(t, "claim-b", map[string]string{"pool": "claim-other"})
	vc := createVC(t, "claim", []nestv1.PromotePolicy{poolPolicy("claim", 1)}, nil)
	eventually(t, "the VirtualCluster holds claim-a", func() error { return checkAssigned(vc, ReasonAssigned, "claim-a") })
	if err := checkFree("claim-b"); err != nil {
		t.Errorf("the node the policy does not select: %v", err)
	}
	got, err := getVC(vc)
	if err != nil {
		t.Fatal(err)
	}
	if !controllerutil.ContainsFinalizer(got, Finalizer) {
		t.Errorf("finalizers = %v, want %s on a VirtualCluster that holds nodes", got.Finalizers, Finalizer)
	}

	// The inventory leaves a held GlobalNode alone: its Node's labels change,
	// and one pass of the inventory controller, whatever its queue holds,
	// keeps the labels the node had and the holder.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node := &corev1.Node{}
		if err := k8sClient.Get(context.Background(), client.ObjectKey{Name: "claim-a"}, node); err != nil {
			return err
		}
		node.Labels["pool"] = "relabelled"
		return k8sClient.Update(context.Background(), node)
	})
	if err != nil {
		t.Fatal(err)
	}
	err = retry.OnError(retry.DefaultRetry, apierrors.IsConflict, func() error {
		_, err := (&globalnode.Reconciler{Client: k8sClient}).Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Name: "claim-a"}})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	gn, err := getGlobalNode("claim-a")
	if err != nil {
		t.Fatal(err)
	}
	if gn.Spec.Labels["pool"] != "claim" {
		t.Errorf("the inventory changed a held GlobalNode's labels to %v", gn.Spec.Labels)
	}
	if err := checkHeld("claim-a", vc); err != nil {
		t.Errorf("after an inventory pass: %v", err)
	}
}

func TestOneNodeTwoVirtualClusters(t *testing.T) {
	createNode(t, "race-a", map[string]string{"pool": "race"})
	var vcs []types.NamespacedName
	for _, name := range []string{"race-1", "race-2", "race-3", "race-4"} {
		vcs = append(vcs, createVC(t, name, []nestv1.PromotePolicy{poolPolicy("race", 1)}, nil))
	}
	var winner types.NamespacedName
	eventually(t, "one VirtualCluster holds race-a and the others are refused", func() error {
		gn, err := getGlobalNode("race-a")
		if err != nil {
			return err
		}
		w, ok := parseHolder(gn.Annotations[nestv1.AnnotationHeldBy])
		if !ok {
			return errors.New("race-a is held by no one")
		}
		winner = w
		for _, vc := range vcs {
			if vc == w {
				if err := checkAssigned(vc, ReasonAssigned, "race-a"); err != nil {
					return fmt.Errorf("the winner %s: %w", vc, err)
				}
				continue
			}
			if err := checkRefused(vc, ReasonInsufficientNodes, []string{"spec.promotePolicies[0]", "pool=race", "wants 1 node, found 0"}); err != nil {
				return fmt.Errorf("%s: %w", vc, err)
			}
		}
		return nil
	})
	if !slices.Contains(vcs, winner) {
		t.Fatalf("race-a is held by %s, none of the VirtualClusters", winner)
	}
}

func TestTooFewNodesHoldsNothing(t *testing.T) {
	createNode(t, "short-a", map[string]string{"pool": "short"})
	vc := createVC(t, "short", []nestv1.PromotePolicy{poolPolicy("short", 2)}, nil)
	eventually(t, "the VirtualCluster is refused and holds nothing", func() error {
		return checkRefused(vc, ReasonInsufficientNodes, []string{"spec.promotePolicies[0]", "pool=short", "wants 2 nodes, found 1"})
	})
	if err := checkFree("short-a"); err != nil {
		t.Error(err)
	}
	got, err := getVC(vc)
	if err != nil {
		t.Fatal(err)
	}
	if controllerutil.ContainsFinalizer(got, Finalizer) {
		t.Errorf("finalizers = %v: a VirtualCluster that holds nothing needs no %s", got.Finalizers, Finalizer)
	}

	// A second matching node appears: now both are claimed.
	createNode(t, "short-b", map[string]string{"pool": "short"})
	eventually(t, "the VirtualCluster holds both nodes", func() error { return checkAssigned(vc, ReasonAssigned, "short-a", "short-b") })
}

func TestLoweringNodeCountReleases(t *testing.T) {
	createNode(t, "low-a", map[string]string{"pool": "low"})
	createNode(t, "low-b", map[string]string{"pool": "low"})
	vc := createVC(t, "low", []nestv1.PromotePolicy{poolPolicy("low", 2)}, nil)
	eventually(t, "the VirtualCluster holds both nodes", func() error { return checkAssigned(vc, ReasonAssigned, "low-a", "low-b") })

	updateVC(t, vc, func(vc *nestv1.VirtualCluster) { vc.Spec.PromotePolicies[0].NodeCount = 1 })
	eventually(t, "nodeCount 1 keeps low-a and releases low-b, the highest name", func() error {
		if err := checkAssigned(vc, ReasonAssigned, "low-a"); err != nil {
			return err
		}
		return checkFree("low-b")
	})

	updateVC(t, vc, func(vc *nestv1.VirtualCluster) { vc.Spec.PromotePolicies[0].NodeCount = 0 })
	eventually(t, "nodeCount 0 releases every node and the finalizer", func() error {
		if err := checkAssigned(vc, ReasonNoneRequested); err != nil {
			return err
		}
		if err := checkFree("low-a"); err != nil {
			return err
		}
		got, err := getVC(vc)
		if err != nil {
			return err
		}
		if controllerutil.ContainsFinalizer(got, Finalizer) {
			return fmt.Errorf("finalizers = %v, want no %s once nothing is held", got.Finalizers, Finalizer)
		}
		return nil
	})
}

func TestDeletingReleasesFirst(t *testing.T) {
	createNode(t, "del-a", map[string]string{"pool": "del"})
	vc := createVC(t, "del", []nestv1.PromotePolicy{poolPolicy("del", 1)}, nil, standInFinalizer)
	eventually(t, "the VirtualCluster holds del-a", func() error { return checkAssigned(vc, ReasonAssigned, "del-a") })

	// While the API server refuses to release del-a, the deleted
	// VirtualCluster keeps the finalizer.
	unblock := blockRelease(t, "del-a")
	deleteVC(t, vc, false)
	r := &Reconciler{Client: k8sClient, APIReader: apiReader}
	if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: vc}); err == nil {
		t.Error("reconcile of the deleted VirtualCluster succeeded while its node could not be released")
	}
	got, err := getVC(vc)
	if err != nil {
		t.Fatal(err)
	}
	if got.DeletionTimestamp.IsZero() || !controllerutil.ContainsFinalizer(got, Finalizer) {
		t.Errorf("deletionTimestamp %v finalizers %v: the finalizer went before the node was released", got.DeletionTimestamp, got.Finalizers)
	}
	// The holder's annotation is what holds the node (its status was
	// cleared first, which the API server allowed).
	if gn, err := getGlobalNode("del-a"); err != nil {
		t.Fatal(err)
	} else if gn.Annotations[nestv1.AnnotationHeldBy] != "na-del/del" || gn.Spec.State != nestv1.NodeStateReserved {
		t.Errorf("while the release is refused: annotations %v state %q, want still held", gn.Annotations, gn.Spec.State)
	}

	unblock()
	eventually(t, "the finalizer is removed from the deleted VirtualCluster", func() error {
		got, err := getVC(vc)
		if err != nil {
			return err
		}
		if got.DeletionTimestamp.IsZero() || controllerutil.ContainsFinalizer(got, Finalizer) {
			return fmt.Errorf("deletionTimestamp %v finalizers %v, want deleting without %s", got.DeletionTimestamp, got.Finalizers, Finalizer)
		}
		return nil
	})
	if err := checkFree("del-a"); err != nil {
		t.Errorf("once the finalizer is gone: %v", err)
	}
	got, err = getVC(vc)
	if err != nil {
		t.Fatal(err)
	}
	if c := meta.FindStatusCondition(got.Status.Conditions, nestv1.ConditionNodesAssigned); len(got.Status.AssignedNodes) > 0 || c == nil || c.Reason != ReasonDeleting {
		t.Errorf("assignedNodes %v NodesAssigned %+v, want none and reason %s", got.Status.AssignedNodes, c, ReasonDeleting)
	}

	// The VirtualCluster controller's own deletion still completes.
	updateVC(t, vc, func(vc *nestv1.VirtualCluster) { controllerutil.RemoveFinalizer(vc, standInFinalizer) })
	eventually(t, "the VirtualCluster is gone", func() error {
		if _, err := getVC(vc); !apierrors.IsNotFound(err) {
			return fmt.Errorf("get: %v, want NotFound", err)
		}
		return nil
	})
}

// blockRelease makes the API server refuse any update of GlobalNode name
// that removes its held-by annotation, with a ValidatingAdmissionPolicy, and
// waits until it does. The returned func lifts the block.
func blockRelease(t *testing.T, name string) func() {
	t.Helper()
	ctx := context.Background()
	policyName := "test-block-release-" + name
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: policyName},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{nestv1.GroupVersion.Group}, APIVersions: []string{"*"}, Resources: []string{"globalnodes"}},
				},
			}}},
			MatchConditions: []admissionregistrationv1.MatchCondition{{Name: "this-node", Expression: fmt.Sprintf("object.metadata.name == %q", name)}},
			Validations: []admissionregistrationv1.Validation{{
				Expression: fmt.Sprintf("!has(oldObject.metadata.annotations) || !(%[1]q in oldObject.metadata.annotations) || (has(object.metadata.annotations) && %[1]q in object.metadata.annotations)", nestv1.AnnotationHeldBy),
				Message:    "the test refuses to release this node",
			}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: policyName},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName: policyName, ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
		},
	}
	for _, obj := range []client.Object{policy, binding} {
		if err := k8sClient.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	unblock := func() {
		for _, obj := range []client.Object{binding, policy} {
			if err := k8sClient.Delete(ctx, obj); client.IgnoreNotFound(err) != nil {
				t.Error(err)
			}
		}
	}
	t.Cleanup(unblock)
	eventually(t, "the API server refuses to release "+name, func() error {
		gn, err := getGlobalNode(name)
		if err != nil {
			return err
		}
		before := gn.DeepCopy()
		delete(gn.Annotations, nestv1.AnnotationHeldBy)
		if err := k8sClient.Patch(ctx, gn, client.MergeFrom(before), client.DryRunAll); err == nil {
			return errors.New("a dry-run release was admitted")
		}
		return nil
	})
	return unblock
}

func TestNamedNodeHeldByAnotherIsRefused(t *testing.T) {
	createNode(t, "info-a", map[string]string{"pool": "info"})
	first := createVC(t, "info-1", nil, []string{"info-a"})
	eventually(t, "the first VirtualCluster holds info-a", func() error { return checkAssigned(first, ReasonAssigned, "info-a") })

	second := createVC(t, "info-2", nil, []string{"info-a"})
	eventually(t, "the second VirtualCluster is refused, naming the node and its holder", func() error {
		return checkRefused(second, ReasonNodeUnavailable, []string{"spec.promoteResources.nodeInfos[0]", "info-a", "na-info-1/info-1"})
	})
	if err := checkAssigned(first, ReasonAssigned, "info-a"); err != nil {
		t.Errorf("the first VirtualCluster: %v", err)
	}

	missing := createVC(t, "info-3", nil, []string{"info-missing"})
	eventually(t, "a VirtualCluster naming a node without a GlobalNode is refused", func() error {
		return checkRefused(missing, ReasonNodeUnavailable, []string{"spec.promoteResources.nodeInfos[0]", "no GlobalNode info-missing"})
	})

	// The holder lets the node go: the waiting VirtualCluster takes it.
	updateVC(t, first, func(vc *nestv1.VirtualCluster) { vc.Spec.PromoteResources.NodeInfos = nil })
	eventually(t, "the second VirtualCluster holds info-a once the first releases it", func() error {
		if err := checkAssigned(second, ReasonAssigned, "info-a"); err != nil {
			return err
		}
		return checkAssigned(first, ReasonNoneRequested)
	})
}

func TestHeldNodeIsNotSelectedAgain(t *testing.T) {
	createNode(t, "sel-a", map[string]string{"pool": "sel"})
	first := createVC(t, "sel-1", []nestv1.PromotePolicy{poolPolicy("sel", 1)}, nil)
	eventually(t, "the first VirtualCluster holds sel-a", func() error { return checkAssigned(first, ReasonAssigned, "sel-a") })
	createNode(t, "sel-b", map[string]string{"pool": "sel"})
	second := createVC(t, "sel-2", []nestv1.PromotePolicy{poolPolicy("sel", 1)}, nil)
	eventually(t, "the second VirtualCluster holds sel-b", func() error { return checkAssigned(second, ReasonAssigned, "sel-b") })

	// Asking for one more than is free keeps what it holds and takes nothing.
	updateVC(t, second, func(vc *nestv1.VirtualCluster) { vc.Spec.PromotePolicies[0].NodeCount = 2 })
	eventually(t, "the second VirtualCluster is refused and keeps sel-b", func() error {
		return checkRefused(second, ReasonInsufficientNodes, []string{"wants 2 nodes, found 1"}, "sel-b")
	})
	if err := checkAssigned(first, ReasonAssigned, "sel-a"); err != nil {
		t.Errorf("the first VirtualCluster: %v", err)
	}
}

func TestInvalidSelectorIsReported(t *testing.T) {
	createNode(t, "bad-a", map[string]string{"pool": "bad"})
	invalid := nestv1.PromotePolicy{NodeCount: 1, LabelSelector: metav1.LabelSelector{
		MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "pool", Operator: metav1.LabelSelectorOpIn}},
	}}
	vc := createVC(t, "bad", []nestv1.PromotePolicy{invalid}, nil)
	eventually(t, "the VirtualCluster reports the field", func() error {
		return checkRefused(vc, ReasonInvalidPolicy, []string{"spec.promotePolicies[0].labelSelector: "})
	})
	// A reconcile of it succeeds: no error, so no retries.
	r := &Reconciler{Client: k8sClient, APIReader: apiReader}
	if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: vc}); err != nil {
		t.Errorf("reconcile of an invalid policy: %v, want no error", err)
	}
	if err := checkFree("bad-a"); err != nil {
		t.Error(err)
	}

	updateVC(t, vc, func(vc *nestv1.VirtualCluster) {
		vc.Spec.PromotePolicies[0].LabelSelector.MatchExpressions[0].Values = []string{"bad"}
	})
	eventually(t, "the fixed policy is served", func() error { return checkAssigned(vc, ReasonAssigned, "bad-a") })
}

func TestStatusLeavesOtherConditions(t *testing.T) {
	createNode(t, "cond-a", map[string]string{"pool": "cond"})
	vc := createVC(t, "cond", []nestv1.PromotePolicy{poolPolicy("cond", 2)}, nil)
	eventually(t, "the VirtualCluster is refused", func() error {
		return checkRefused(vc, ReasonInsufficientNodes, nil)
	})
	// The VirtualCluster controller writes its conditions with a merge patch.
	ready := metav1.Condition{Type: nestv1.ConditionReady, Status: metav1.ConditionFalse, Reason: "NotReady", Message: "stand-in", LastTransitionTime: metav1.Now()}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		got, err := getVC(vc)
		if err != nil {
			return err
		}
		before := got.DeepCopy()
		meta.SetStatusCondition(&got.Status.Conditions, ready)
		got.Status.Phase = nestv1.PhasePreparing
		return k8sClient.Status().Patch(context.Background(), got, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
	})
	if err != nil {
		t.Fatal(err)
	}
	createNode(t, "cond-b", map[string]string{"pool": "cond"})
	eventually(t, "the VirtualCluster holds both nodes", func() error { return checkAssigned(vc, ReasonAssigned, "cond-a", "cond-b") })
	got, err := getVC(vc)
	if err != nil {
		t.Fatal(err)
	}
	if c := meta.FindStatusCondition(got.Status.Conditions, nestv1.ConditionReady); c == nil || c.Message != "stand-in" || got.Status.Phase != nestv1.PhasePreparing {
		t.Errorf("Ready = %+v phase %q: the VirtualCluster controller's status was written over", c, got.Status.Phase)
	}
}

func TestOrphanedNodesAreReleased(t *testing.T) {
	createNode(t, "orphan-a", map[string]string{"pool": "orphan"})
	// A holder that does not exist, as after a finalizer removed by hand.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		gn, err := getGlobalNode("orphan-a")
		if err != nil {
			return err
		}
		metav1.SetMetaDataAnnotation(&gn.ObjectMeta, nestv1.AnnotationHeldBy, "na-gone/gone")
		gn.Spec.State = nestv1.NodeStateReserved
		return k8sClient.Update(context.Background(), gn)
	})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the orphaned node is free again", func() error { return checkFree("orphan-a") })
}

func TestClaimIsConditionalOnTheVersionRead(t *testing.T) {
	createNode(t, "cas-a", map[string]string{"pool": "cas"})
	stale, err := getGlobalNode("cas-a")
	if err != nil {
		t.Fatal(err)
	}
	if unavailable(stale) != "" {
		t.Fatalf("cas-a is not free: %s", unavailable(stale))
	}
	first := createVC(t, "cas", nil, []string{"cas-a"})
	eventually(t, "the VirtualCluster holds cas-a", func() error { return checkAssigned(first, ReasonAssigned, "cas-a") })

	// Another VirtualCluster claims with what it read while the node was free.
	r := &Reconciler{Client: k8sClient, APIReader: apiReader}
	gn, err := r.claim(context.Background(), stale, "na-other/other")
	if !apierrors.IsConflict(err) || gn != nil {
		t.Errorf("claim with a stale read: %v (got %v), want a conflict and no claim", err, gn)
	}
	if err := checkHeld("cas-a", first); err != nil {
		t.Errorf("after the stale claim: %v", err)
	}
}

// A node that node promotion has moved is not freed by a release: only its
// claim is withdrawn, and the VirtualCluster keeps its finalizer until node
// promotion has brought the node home (here, a test standing in for it).
func TestReleasingAMovedNodeWithdrawsTheClaimOnly(t *testing.T) {
	ctx := context.Background()
	createNode(t, "moved-a", map[string]string{"pool": "moved"})
	vc := createVC(t, "moved", []nestv1.PromotePolicy{poolPolicy("moved", 1)}, nil)
	eventually(t, "the VirtualCluster holds moved-a", func() error { return checkAssigned(vc, ReasonAssigned, "moved-a") })
	setPhase(t, "moved-a", nestv1.NodePhaseTenant)

	updateVC(t, vc, func(vc *nestv1.VirtualCluster) { vc.Spec.PromotePolicies[0].NodeCount = 0 })
	holder := vc.Namespace + "/" + vc.Name
	eventually(t, "the claim on moved-a withdrawn, the rest kept", func() error {
		gn, err := getGlobalNode("moved-a")
		if err != nil {
			return err
		}
		if gn.Annotations[nestv1.AnnotationHeldBy] != "" || gn.Spec.State != nestv1.NodeStateReserved || gn.Status.VirtualCluster != holder {
			return fmt.Errorf("annotation %q state %s holder %q", gn.Annotations[nestv1.AnnotationHeldBy], gn.Spec.State, gn.Status.VirtualCluster)
		}
		return checkAssigned(vc, ReasonNoneRequested)
	})
	got, err := getVC(vc)
	if err != nil {
		t.Fatal(err)
	}
	if !controllerutil.ContainsFinalizer(got, Finalizer) {
		t.Fatalf("finalizers = %v: the VirtualCluster let go before its node is home", got.Finalizers)
	}

	// Node promotion brings it home: free, phase Host, no holder.
	gn, err := getGlobalNode("moved-a")
	if err != nil {
		t.Fatal(err)
	}
	before := gn.DeepCopy()
	gn.Spec.State = nestv1.NodeStateFree
	if err := k8sClient.Patch(ctx, gn, client.MergeFrom(before)); err != nil {
		t.Fatal(err)
	}
	before = gn.DeepCopy()
	gn.Status.Phase, gn.Status.VirtualCluster = nestv1.NodePhaseHost, ""
	if err := k8sClient.Status().Patch(ctx, gn, client.MergeFrom(before)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the finalizer gone once the node is home", func() error {
		got, err := getVC(vc)
		if err != nil {
			return err
		}
		if controllerutil.ContainsFinalizer(got, Finalizer) {
			return fmt.Errorf("finalizers = %v", got.Finalizers)
		}
		return nil
	})
}

// setPhase writes a GlobalNode's phase, as node promotion does.
func setPhase(t *testing.T, name string, phase nestv1.NodePhase) {
	t.Helper()
	gn, err := getGlobalNode(name)
	if err != nil {
		t.Fatal(err)
	}
	before := gn.DeepCopy()
	gn.Status.Phase = phase
	if err := k8sClient.Status().Patch(context.Background(), gn, client.MergeFrom(before)); err != nil {
		t.Fatal(err)
	}
}
