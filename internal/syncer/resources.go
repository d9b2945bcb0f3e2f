package syncer

import (
	"fmt"
	"maps"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	quota "k8s.io/apiserver/pkg/quota/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"

	"github.com/nestdev/nest/internal/syncer/contract"
)

// The virtual node's capacity is the tenant's share of the host, and the
// host decides it: a tenant that binds pods itself (spec.nodeName) skips its
// scheduler, so the syncer checks every pod against the share again, as a
// kubelet admits pods against its node's allocatable.

// alwaysKnown are the resources every node has; a share that leaves one out
// does not bound it.
var alwaysKnown = []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage, corev1.ResourcePods}

// checkKnownResources refuses a pod that requests or limits a resource the
// share does not name, such as nvidia.com/gpu or hugepages-2Mi: the host
// gave the tenant none of it.
func checkKnownResources(spec *corev1.PodSpec, capacity corev1.ResourceList) error {
	known := func(name corev1.ResourceName) bool {
		_, ok := capacity[name]
		return ok || slices.Contains(alwaysKnown, name)
	}
	check := func(field string, r corev1.ResourceRequirements) error {
		for _, l := range []struct {
			kind string
			list corev1.ResourceList
		}{{"requests", r.Requests}, {"limits", r.Limits}} {
			for _, name := range slices.Sorted(maps.Keys(l.list)) {
				if !known(name) {
					return fmt.Errorf("%s.%s[%s]: %s is not in the tenant's share of the host (the virtual node has %s): remove it, or ask the platform team to add it to the VirtualCluster's share (spec.promoteResources.resources)",
						field, l.kind, name, name, contract.FormatResourceList(capacity))
				}
			}
		}
		return nil
	}
	if spec.Resources != nil {
		if err := check("spec.resources", *spec.Resources); err != nil {
			return err
		}
	}
	for _, list := range []struct {
		field      string
		containers []corev1.Container
	}{{"spec.initContainers", spec.InitContainers}, {"spec.containers", spec.Containers}} {
		for i, c := range list.containers {
			if err := check(fmt.Sprintf("%s[%d] (%s).resources", list.field, i, c.Name), c.Resources); err != nil {
				return err
			}
		}
	}
	return nil
}

// podRequests is what a pod takes of a node, as the scheduler and the kubelet
// count it: upstream's PodRequests with default options (sidecars and init
// containers, pod-level requests where set, and the pod overhead).
func podRequests(pod *corev1.Pod) corev1.ResourceList {
	return resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
}

// checkFits refuses a pod whose requests do not fit beside others' in the
// capacity, resource by resource, as the scheduler's NodeResourcesFit does:
// a resource the pod does not request is not checked, and every pod counts
// one against "pods".
func checkFits(pod *corev1.Pod, others []*corev1.Pod, capacity corev1.ResourceList) error {
	if limit, ok := capacity[corev1.ResourcePods]; ok && int64(len(others)+1) > limit.Value() {
		return outOf(corev1.ResourcePods, fmt.Sprintf("the virtual node already runs %d pods, its most: wait for pods to finish, or ask the platform team for a larger share (the VirtualCluster's spec.promoteResources.resources.pods)", len(others)))
	}
	want := podRequests(pod)
	used := corev1.ResourceList{}
	for _, o := range others {
		used = quota.Add(used, podRequests(o))
	}
	for _, name := range slices.Sorted(maps.Keys(want)) {
		request, limit := want[name], capacity[name]
		if _, bounded := capacity[name]; !bounded || name == corev1.ResourcePods || request.IsZero() {
			continue
		}
		taken := used[name]
		free := nonNegative(limit, taken)
		if request.Cmp(free) > 0 {
			return outOf(name, fmt.Sprintf("insufficient %s: the pod requests %s, and %s of the tenant's %s is free (%s requested by %d other pods on the virtual node): lower the request, or wait for other pods to finish",
				name, request.String(), free.String(), limit.String(), taken.String(), len(others)))
		}
	}
	return nil
}

// outOf is the kubelet's rejection of a pod that does not fit: reason
// "OutOf" + the resource, as in OutOfcpu.
func outOf(name corev1.ResourceName, message string) *Rejection {
	return &Rejection{Reason: "OutOf" + string(name), Message: message}
}

// nonNegative is limit - taken, or zero when taken is larger (a share
// lowered under running pods).
func nonNegative(limit, taken resource.Quantity) resource.Quantity {
	free := limit.DeepCopy()
	free.Sub(taken)
	if free.Sign() < 0 {
		return resource.Quantity{Format: limit.Format}
	}
	return free
}

// advertised returns the allocatable of the tenant's Node object name,
// nil when it cannot be read.
func (a *admission) advertised(name string) corev1.ResourceList {
	if a.nodes == nil {
		return nil
	}
	n, err := a.nodes.Get(name)
	if err != nil {
		return nil
	}
	return n.Status.Allocatable
}

// withAdvertised adds to a virtual node's share the extended resources the
// tenant advertised on the node (patching its status, as on any node) that
// the share does not name: they are the tenant's own bookkeeping, counted
// here as a kubelet counts them and never asked of the host (see
// Translator.dropTenantOnlyResources). What the share names keeps the
// share's quantity, whatever the tenant wrote.
func withAdvertised(share, advertised corev1.ResourceList) corev1.ResourceList {
	out := share
	for name, q := range advertised {
		if _, ok := share[name]; ok || !isExtendedResource(name) {
			continue
		}
		out = maps.Clone(out)
		out[name] = q.DeepCopy()
	}
	return out
}

// admission admits tenant pods to the virtual node's capacity. It counts the
// pods it admitted and those already running on the host, not every pod
// bound to the node: a pod it refused stays bound (Pending) and must not
// hold capacity, as a kubelet counts only the pods it admitted.
type admission struct {
	// capacity is each virtual node's, by node name.
	capacity map[string]corev1.ResourceList
	// pods lists the tenant pods bound to the virtual nodes.
	pods corelisters.PodLister
	// onHost reports whether a tenant pod has its host pod.
	onHost func(*corev1.Pod) bool
	// nodes reads the tenant's Node objects, for the extended resources the
	// tenant advertised on a virtual node (nil: none).
	nodes corelisters.NodeLister

	mu       sync.Mutex
	admitted map[types.UID]bool
}

// admit checks pod against the share (checkKnownResources, checkFits) and
// the host ports other pods hold (checkHostPorts) and, if it fits, holds its
// requests and ports until it ends. A pod that does not fit is a
// *Rejection, as a kubelet rejects it. Admissions are serialized so
// concurrent pods cannot both take the last of a resource.
func (a *admission) admit(pod *corev1.Pod) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	capacity, ok := a.capacity[pod.Spec.NodeName]
	if !ok {
		return fmt.Errorf("spec.nodeName: %q is not a virtual node of this cluster", pod.Spec.NodeName)
	}
	capacity = withAdvertised(capacity, a.advertised(pod.Spec.NodeName))
	if err := checkKnownResources(&pod.Spec, capacity); err != nil {
		return err
	}
	bound, err := a.pods.List(labels.Everything())
	if err != nil {
		return fmt.Errorf("list the virtual node's pods: %w", err)
	}
	if a.admitted == nil {
		a.admitted = map[types.UID]bool{}
	}
	live := map[types.UID]bool{}
	var others []*corev1.Pod
	for _, p := range bound {
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		live[p.UID] = true
		if p.UID != pod.UID && p.Spec.NodeName == pod.Spec.NodeName && (a.admitted[p.UID] || a.onHost(p)) {
			others = append(others, p)
		}
	}
	for uid := range a.admitted {
		if !live[uid] {
			delete(a.admitted, uid)
		}
	}
	if err := checkFits(pod, others, capacity); err != nil {
		return err
	}
	if err := checkHostPorts(pod, others); err != nil {
		return err
	}
	a.admitted[pod.UID] = true
	return nil
}

// forget drops a pod the admission holds room for, when it was admitted but
// could not be started.
func (a *admission) forget(uid types.UID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.admitted, uid)
}

// setCapacity replaces a node's capacity; pods admitted before keep their
// room.
func (a *admission) setCapacity(node string, capacity corev1.ResourceList) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.capacity[node] = capacity
}
