package globalnode

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
)

// createNode registers a host Node as its kubelet would: the Node, then its
// InternalIP in the status (none when ip is "").
func createNode(t *testing.T, name string, labels map[string]string, ip string) {
	t.Helper()
	ctx := context.Background()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	if err := k8sClient.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = k8sClient.Delete(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
	})
	if ip != "" {
		setNodeIP(t, name, ip)
	}
}

// setNodeIP sets the Node's addresses to a hostname and ip as its InternalIP.
func setNodeIP(t *testing.T, name, ip string) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node := &corev1.Node{}
		if err := k8sClient.Get(context.Background(), client.ObjectKey{Name: name}, node); err != nil {
			return err
		}
		node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: name}, {Type: corev1.NodeInternalIP, Address: ip}}
		return k8sClient.Status().Update(context.Background(), node)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// setNodeLabels replaces the Node's labels.
func setNodeLabels(t *testing.T, name string, labels map[string]string) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node := &corev1.Node{}
		if err := k8sClient.Get(context.Background(), client.ObjectKey{Name: name}, node); err != nil {
			return err
		}
		node.Labels = labels
		return k8sClient.Update(context.Background(), node)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func deleteNode(t *testing.T, name string) {
	t.Helper()
	if err := k8sClient.Delete(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
}

func getGlobalNode(name string) (*nestv1.GlobalNode, error) {
	gn := &nestv1.GlobalNode{}
	return gn, k8sClient.Get(context.Background(), client.ObjectKey{Name: name}, gn)
}

// reconcileNow runs one reconcile of name at once, reading the API server
// rather than the manager's cache: what it leaves is the controller's
// answer to the current state, whatever the manager's queue holds.
func reconcileNow(t *testing.T, name string) {
	t.Helper()
	// The manager may write the same object at once: a conflict is retried,
	// as the manager's queue would.
	err := retry.OnError(retry.DefaultRetry, apierrors.IsConflict, func() error {
		_, err := (&Reconciler{Client: k8sClient}).Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Name: name}})
		return err
	})
	if err != nil {
		t.Fatalf("reconcile %s: %v", name, err)
	}
}

// waitFree waits until the free GlobalNode of a Node shows ip and labels,
// in phase Host with its Node present, and returns it.
func waitFree(t *testing.T, name, ip string, labels map[string]string) *nestv1.GlobalNode {
	t.Helper()
	var gn *nestv1.GlobalNode
	eventually(t, "GlobalNode "+name+" is free in the host with the Node's IP and labels", func() error {
		var err error
		if gn, err = getGlobalNode(name); err != nil {
			return err
		}
		switch {
		case gn.Spec.State != nestv1.NodeStateFree || gn.Status.Phase != nestv1.NodePhaseHost:
			return fmt.Errorf("state %q phase %q, want free and Host", gn.Spec.State, gn.Status.Phase)
		case gn.Spec.NodeIP != ip:
			return fmt.Errorf("nodeIP %q, want %q", gn.Spec.NodeIP, ip)
		case !maps.Equal(gn.Spec.Labels, labels):
			return fmt.Errorf("labels %v, want %v", gn.Spec.Labels, labels)
		case !meta.IsStatusConditionTrue(gn.Status.Conditions, nestv1.ConditionHostNodePresent):
			return fmt.Errorf("HostNodePresent is not True: %v", gn.Status.Conditions)
		case gn.Status.ObservedGeneration != gn.Generation:
			return fmt.Errorf("observedGeneration %d, want %d", gn.Status.ObservedGeneration, gn.Generation)
		}
		return nil
	})
	return gn
}

func waitGone(t *testing.T, name string) {
	t.Helper()
	eventually(t, "GlobalNode "+name+" is deleted", func() error {
		if _, err := getGlobalNode(name); !apierrors.IsNotFound(err) {
			return fmt.Errorf("get: %v, want NotFound", err)
		}
		return nil
	})
}

func expectNone(t *testing.T, name string) {
	t.Helper()
	if gn, err := getGlobalNode(name); !apierrors.IsNotFound(err) {
		t.Errorf("GlobalNode %s: got %+v (err %v), want none", name, gn.Spec, err)
	}
}

func TestWorkerNodeGetsAFreeGlobalNode(t *testing.T) {
	labels := map[string]string{"kubernetes.io/hostname": "worker-new", "node-role.kubernetes.io/worker": "", "topology.kubernetes.io/zone": "a"}
	createNode(t, "worker-new", labels, "198.51.100.21")
	gn := waitFree(t, "worker-new", "198.51.100.21", labels)
	if gn.Status.VirtualCluster != "" || gn.Status.PhaseTransitionTime == nil {
		t.Errorf("status = %+v, want no holder and the time phase Host began", gn.Status)
	}
	if len(gn.OwnerReferences) != 0 {
		t.Errorf("ownerReferences = %v: a GlobalNode must outlive its Node", gn.OwnerReferences)
	}
}

func TestLabelAndIPChangesFollow(t *testing.T) {
	createNode(t, "worker-edit", map[string]string{"zone": "a", "disk": "hdd"}, "198.51.100.22")
	waitFree(t, "worker-edit", "198.51.100.22", map[string]string{"zone": "a", "disk": "hdd"})

	relabelled := map[string]string{"zone": "b", "gpu": "a100"}
	setNodeLabels(t, "worker-edit", relabelled)
	waitFree(t, "worker-edit", "198.51.100.22", relabelled)

	setNodeIP(t, "worker-edit", "2001:db8::22")
	waitFree(t, "worker-edit", "2001:db8::22", relabelled)
}

func TestControlPlaneNodesGetNone(t *testing.T) {
	createNode(t, "cp-1", map[string]string{LabelControlPlane: ""}, "198.51.100.31")
	createNode(t, "master-1", map[string]string{LabelMaster: "true"}, "198.51.100.32")
	// A worker registered after them: once its GlobalNode exists, the
	// manager has seen the control-plane nodes too (one watch delivers Node
	// events in order), and a reconcile of each, run here, must leave none.
	createNode(t, "worker-after-cp", nil, "198.51.100.33")
	waitFree(t, "worker-after-cp", "198.51.100.33", nil)
	for _, name := range []string{"cp-1", "master-1"} {
		reconcileNow(t, name)
		expectNone(t, name)
	}

	// A worker that takes the control-plane role loses its free GlobalNode.
	createNode(t, "worker-promoted-to-cp", nil, "198.51.100.34")
	waitFree(t, "worker-promoted-to-cp", "198.51.100.34", nil)
	setNodeLabels(t, "worker-promoted-to-cp", map[string]string{LabelControlPlane: ""})
	waitGone(t, "worker-promoted-to-cp")
}

func TestNodeWithoutAnIPWaitsForOne(t *testing.T) {
	createNode(t, "worker-no-ip", nil, "")
	reconcileNow(t, "worker-no-ip")
	expectNone(t, "worker-no-ip")
	setNodeIP(t, "worker-no-ip", "198.51.100.41")
	waitFree(t, "worker-no-ip", "198.51.100.41", nil)
}

func TestDeletedFreeNodesGlobalNodeGoes(t *testing.T) {
	createNode(t, "worker-gone", nil, "198.51.100.51")
	waitFree(t, "worker-gone", "198.51.100.51", nil)
	deleteNode(t, "worker-gone")
	waitGone(t, "worker-gone")
}

func TestDeletedGlobalNodeOfANodeIsMadeAgain(t *testing.T) {
	createNode(t, "worker-recreated", nil, "198.51.100.52")
	first := waitFree(t, "worker-recreated", "198.51.100.52", nil)
	if err := k8sClient.Delete(context.Background(), first); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a new GlobalNode replaces the deleted one", func() error {
		gn, err := getGlobalNode("worker-recreated")
		if err != nil {
			return err
		}
		if gn.UID == first.UID {
			return errors.New("still the deleted one")
		}
		return nil
	})
}

// hold does what node promotion will do: it reserves the GlobalNode for a
// VirtualCluster and moves it to phase Tenant. The test deletes it at its
// end, as this controller never does.
func hold(t *testing.T, name string) *nestv1.GlobalNode {
	t.Helper()
	ctx := context.Background()
	t.Cleanup(func() {
		_ = k8sClient.Delete(context.Background(), &nestv1.GlobalNode{ObjectMeta: metav1.ObjectMeta{Name: name}})
	})
	var gn *nestv1.GlobalNode
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var err error
		if gn, err = getGlobalNode(name); err != nil {
			return err
		}
		gn.Spec.State = nestv1.NodeStateOccupied
		if err := k8sClient.Update(ctx, gn); err != nil {
			return err
		}
		now := metav1.Now()
		gn.Status.VirtualCluster, gn.Status.Phase, gn.Status.PhaseTransitionTime = "vc-alpha/alpha", nestv1.NodePhaseTenant, &now
		meta.SetStatusCondition(&gn.Status.Conditions, metav1.Condition{Type: "Joined", Status: metav1.ConditionTrue, Reason: "Joined", Message: "the node is Ready in the tenant cluster"})
		return k8sClient.Status().Update(ctx, gn)
	})
	if err != nil {
		t.Fatal(err)
	}
	return gn
}

// withoutPresence is gn's spec and status without its HostNodePresent condition.
func withoutPresence(gn *nestv1.GlobalNode) (nestv1.GlobalNodeSpec, nestv1.GlobalNodeStatus) {
	status := *gn.Status.DeepCopy()
	meta.RemoveStatusCondition(&status.Conditions, nestv1.ConditionHostNodePresent)
	return gn.Spec, status
}

func TestHeldGlobalNodeOutlivesItsNode(t *testing.T) {
	labels := map[string]string{"zone": "a"}
	createNode(t, "worker-held", labels, "198.51.100.61")
	waitFree(t, "worker-held", "198.51.100.61", labels)
	held := hold(t, "worker-held")
	heldSpec, heldStatus := withoutPresence(held)

	// unchanged fails the test if anything but HostNodePresent moved.
	unchanged := func(when string) {
		t.Helper()
		gn, err := getGlobalNode("worker-held")
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		spec, status := withoutPresence(gn)
		if gn.Generation != held.Generation || !equality.Semantic.DeepEqual(spec, heldSpec) || !equality.Semantic.DeepEqual(status, heldStatus) {
			t.Errorf("%s: the held GlobalNode was changed:\nspec   %+v\nwant   %+v\nstatus %+v\nwant   %+v", when, spec, heldSpec, status, heldStatus)
		}
	}

	// Its Node's changes do not reach it while it is held.
	setNodeLabels(t, "worker-held", map[string]string{"zone": "b"})
	setNodeIP(t, "worker-held", "198.51.100.62")
	reconcileNow(t, "worker-held")
	unchanged("after its Node changed")

	deleteNode(t, "worker-held")
	eventually(t, "HostNodePresent False on the held GlobalNode", func() error {
		gn, err := getGlobalNode("worker-held")
		if err != nil {
			return err
		}
		c := meta.FindStatusCondition(gn.Status.Conditions, nestv1.ConditionHostNodePresent)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != ReasonNodeAbsent || !strings.Contains(c.Message, "vc-alpha/alpha") {
			return fmt.Errorf("HostNodePresent = %+v, want False/%s naming its holder", c, ReasonNodeAbsent)
		}
		return nil
	})
	reconcileNow(t, "worker-held")
	unchanged("after its Node was deleted")

	// The node comes back (as release will bring it): its presence is noted,
	// and the GlobalNode is still node promotion's.
	createNode(t, "worker-held", map[string]string{"zone": "c"}, "198.51.100.63")
	eventually(t, "HostNodePresent True again", func() error {
		gn, err := getGlobalNode("worker-held")
		if err != nil {
			return err
		}
		if !meta.IsStatusConditionTrue(gn.Status.Conditions, nestv1.ConditionHostNodePresent) {
			return fmt.Errorf("conditions %v", gn.Status.Conditions)
		}
		return nil
	})
	unchanged("after its Node came back")
}

func TestAPIValidation(t *testing.T) {
	ctx := context.Background()
	dryRun := func(spec nestv1.GlobalNodeSpec) (*nestv1.GlobalNode, error) {
		gn := &nestv1.GlobalNode{ObjectMeta: metav1.ObjectMeta{Name: "validation"}, Spec: spec}
		return gn, k8sClient.Create(ctx, gn, client.DryRunAll)
	}
	gn, err := dryRun(nestv1.GlobalNodeSpec{NodeIP: "198.51.100.71"})
	if err != nil {
		t.Fatalf("a valid GlobalNode: %v", err)
	}
	if gn.Spec.State != nestv1.NodeStateFree {
		t.Errorf("state defaults to %q, want free", gn.Spec.State)
	}
	for _, tt := range []struct {
		spec nestv1.GlobalNodeSpec
		want string
	}{
		{nestv1.GlobalNodeSpec{NodeIP: "worker-1"}, "nodeIP must be an IPv4 or IPv6 address"},
		{nestv1.GlobalNodeSpec{NodeIP: "198.51.100.0/24"}, "nodeIP must be an IPv4 or IPv6 address"},
		{nestv1.GlobalNodeSpec{}, "spec.nodeIP"},
		{nestv1.GlobalNodeSpec{NodeIP: "198.51.100.71", State: "taken"}, `spec.state: Unsupported value: "taken"`},
	} {
		if _, err := dryRun(tt.spec); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("spec %+v: error %v, want Invalid saying %q", tt.spec, err, tt.want)
		}
	}
}
