package syncer

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

func requests(cpu string) corev1.ResourceRequirements {
	return corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}}
}

func TestPodRequests(t *testing.T) {
	sidecar := func(name, cpu string) corev1.Container {
		return corev1.Container{Name: name, Resources: requests(cpu), RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)}
	}
	plain := func(name, cpu string) corev1.Container { return corev1.Container{Name: name, Resources: requests(cpu)} }
	tests := []struct {
		name string
		spec corev1.PodSpec
		want string
	}{
		{name: "containers add up", spec: corev1.PodSpec{Containers: []corev1.Container{plain("a", "1"), plain("b", "500m")}}, want: "1500m"},
		{name: "a larger init container sets the floor",
			spec: corev1.PodSpec{InitContainers: []corev1.Container{plain("i", "2")}, Containers: []corev1.Container{plain("a", "1")}}, want: "2"},
		{name: "sidecars run beside containers",
			spec: corev1.PodSpec{InitContainers: []corev1.Container{sidecar("s", "500m")}, Containers: []corev1.Container{plain("a", "1")}}, want: "1500m"},
		{name: "an init container after a sidecar runs beside it",
			spec: corev1.PodSpec{InitContainers: []corev1.Container{sidecar("s", "1"), plain("i", "2")}, Containers: []corev1.Container{plain("a", "100m")}}, want: "3"},
		{name: "an init container before a sidecar does not",
			spec: corev1.PodSpec{InitContainers: []corev1.Container{plain("i", "2"), sidecar("s", "1")}, Containers: []corev1.Container{plain("a", "100m")}}, want: "2"},
		{name: "pod-level requests replace the containers'",
			spec: corev1.PodSpec{Resources: &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3")}}, Containers: []corev1.Container{plain("a", "1")}}, want: "3"},
		{name: "overhead is added",
			spec: corev1.PodSpec{Overhead: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m")}, Containers: []corev1.Container{plain("a", "1")}}, want: "1250m"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := podRequests(&corev1.Pod{Spec: tt.spec})
			if cpu := got[corev1.ResourceCPU]; cpu.Cmp(resource.MustParse(tt.want)) != 0 {
				t.Errorf("cpu %s, want %s", cpu.String(), tt.want)
			}
		})
	}
}

func TestCheckKnownResources(t *testing.T) {
	share := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), "nvidia.com/gpu": resource.MustParse("1")}
	withResource := func(where string, name corev1.ResourceName) *corev1.PodSpec {
		q := corev1.ResourceList{name: resource.MustParse("1")}
		s := &corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}}}
		switch where {
		case "request":
			s.Containers[0].Resources.Requests = q
		case "limit":
			s.Containers[0].Resources.Limits = q
		case "init":
			s.InitContainers = []corev1.Container{{Name: "init", Resources: corev1.ResourceRequirements{Requests: q}}}
		case "pod":
			s.Resources = &corev1.ResourceRequirements{Limits: q}
		}
		return s
	}
	tests := []struct {
		name    string
		spec    *corev1.PodSpec
		wantErr string
	}{
		{name: "memory is always known", spec: withResource("request", corev1.ResourceMemory)},
		{name: "ephemeral storage is always known", spec: withResource("limit", corev1.ResourceEphemeralStorage)},
		{name: "a resource in the share", spec: withResource("limit", "nvidia.com/gpu")},
		{name: "a request outside the share", spec: withResource("request", "example.com/fpga"), wantErr: "spec.containers[0] (app).resources.requests[example.com/fpga]: example.com/fpga is not in the tenant's share"},
		{name: "a limit outside the share", spec: withResource("limit", "hugepages-1Gi"), wantErr: "resources.limits[hugepages-1Gi]"},
		{name: "an init container", spec: withResource("init", "example.com/fpga"), wantErr: "spec.initContainers[0] (init).resources.requests[example.com/fpga]"},
		{name: "pod-level resources", spec: withResource("pod", "hugepages-2Mi"), wantErr: "spec.resources.limits[hugepages-2Mi]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkKnownResources(tt.spec, share)
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("err = %v, want %q", err, tt.wantErr)
			}
		})
	}
}

func TestAdmission(t *testing.T) {
	share := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourcePods: resource.MustParse("3")}
	onHost := simplePod("on-host", "1")
	admittedEarlier := simplePod("admitted", "500m")
	refusedEarlier := simplePod("refused", "10")
	finished := simplePod("finished", "2")
	finished.Status.Phase = corev1.PodSucceeded
	zero := simplePod("zero", "0")
	tests := []struct {
		name     string
		bound    []runtime.Object
		admitted []*corev1.Pod
		pod      *corev1.Pod
		wantErr  string
	}{
		{name: "pods on the host count", bound: []runtime.Object{onHost}, pod: simplePod("new", "1001m"), wantErr: "insufficient cpu: the pod requests 1001m, and 1 of the tenant's 2 is free"},
		{name: "pods admitted but not on the host yet count", bound: []runtime.Object{onHost, admittedEarlier}, admitted: []*corev1.Pod{admittedEarlier}, pod: simplePod("new", "501m"), wantErr: "insufficient cpu"},
		{name: "the last of the share", bound: []runtime.Object{onHost, admittedEarlier}, admitted: []*corev1.Pod{admittedEarlier}, pod: simplePod("new", "500m")},
		{name: "refused pods stay bound but hold nothing", bound: []runtime.Object{onHost, refusedEarlier}, pod: simplePod("new", "1")},
		{name: "a zero request fits a full share", bound: []runtime.Object{onHost, admittedEarlier}, admitted: []*corev1.Pod{admittedEarlier, simplePod("gone", "1")}, pod: zero},
		{name: "finished pods hold nothing", bound: []runtime.Object{finished}, admitted: []*corev1.Pod{finished}, pod: simplePod("new", "2")},
		{name: "the pods bound", bound: []runtime.Object{onHost, admittedEarlier, simplePod("third", "0")}, admitted: []*corev1.Pod{admittedEarlier, simplePod("third", "0")}, pod: zero,
			wantErr: "the virtual node already runs 3 pods, its most"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bound := append(tt.bound, tt.pod)
			a := &admission{capacity: map[string]corev1.ResourceList{tr.NodeName: share}, pods: podLister(t, bound...), onHost: func(p *corev1.Pod) bool { return p.UID == onHost.UID }}
			a.admitted = map[types.UID]bool{}
			for _, p := range tt.admitted {
				a.admitted[p.UID] = true
			}
			err := a.admit(tt.pod)
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("admit = %v, want %q", err, tt.wantErr)
			}
		})
	}
}

// Admitting pods one after another holds each one's requests, so the share
// is never handed out twice, and a refused pod holds nothing.
func TestAdmissionHoldsWhatItAdmitted(t *testing.T) {
	first, second, third := simplePod("first", "1500m"), simplePod("second", "1"), simplePod("third", "500m")
	a := &admission{capacity: map[string]corev1.ResourceList{tr.NodeName: {corev1.ResourceCPU: resource.MustParse("2")}},
		pods: podLister(t, first, second, third), onHost: func(*corev1.Pod) bool { return false }}
	if err := a.admit(first); err != nil {
		t.Fatal(err)
	}
	if err := a.admit(second); err == nil {
		t.Error("second pod admitted beside the first: 2500m of 2 cpu")
	}
	if err := a.admit(third); err != nil {
		t.Errorf("third pod refused, though the refused second pod should hold nothing: %v", err)
	}
	if err := a.admit(first); err != nil {
		t.Errorf("a retried pod is counted against itself: %v", err)
	}
}

// Each virtual node has its own share of the capacity: pods on one do not
// count on another, and a pod bound to a node the syncer does not run is
// refused.
func TestAdmissionPerVirtualNode(t *testing.T) {
	onFirst, onSecond := simplePod("first", "1"), simplePod("second", "1")
	onSecond.Spec.NodeName = "nest-virtual-node-1"
	elsewhere := simplePod("elsewhere", "0")
	elsewhere.Spec.NodeName = "someone-elses-node"
	halves := SplitCapacity(corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}, 2)
	a := &admission{capacity: map[string]corev1.ResourceList{tr.NodeName: halves[0], "nest-virtual-node-1": halves[1]},
		pods: podLister(t, onFirst, onSecond, elsewhere), onHost: func(*corev1.Pod) bool { return false }}
	if err := a.admit(onFirst); err != nil {
		t.Fatal(err)
	}
	if err := a.admit(onSecond); err != nil {
		t.Errorf("a pod on the second node is counted against the first: %v", err)
	}
	if err := a.admit(elsewhere); err == nil || !strings.Contains(err.Error(), "spec.nodeName") {
		t.Errorf("a pod bound to another node: %v", err)
	}
}

func TestSplitCapacity(t *testing.T) {
	parts := SplitCapacity(corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("16Gi"),
		corev1.ResourcePods: resource.MustParse("251"), "nvidia.com/gpu": resource.MustParse("1"),
	}, 2)
	want := []map[corev1.ResourceName]string{
		{corev1.ResourceCPU: "4", corev1.ResourceMemory: "8Gi", corev1.ResourcePods: "126", "nvidia.com/gpu": "1"},
		{corev1.ResourceCPU: "4", corev1.ResourceMemory: "8Gi", corev1.ResourcePods: "125", "nvidia.com/gpu": "0"},
	}
	for i, w := range want {
		for name, q := range w {
			if got := parts[i][name]; got.Cmp(resource.MustParse(q)) != 0 {
				t.Errorf("node %d %s = %s, want %s", i, name, got.String(), q)
			}
		}
	}
	if names := NodeNames("nest-virtual-node", 3); len(names) != 3 || names[0] != "nest-virtual-node" || names[2] != "nest-virtual-node-2" {
		t.Errorf("NodeNames = %v", names)
	}
}

// An extended resource the tenant advertised on its virtual node, and the
// share does not name, is counted against the node's status and never asked
// of the host; one it did not advertise is refused as before.
func TestTenantAdvertisedExtendedResources(t *testing.T) {
	dongle := corev1.ResourceName("example.com/dongle")
	withDongles := func(name, n string) *corev1.Pod {
		p := simplePod(name, "100m")
		p.Spec.Containers[0].Resources.Requests[dongle] = resource.MustParse(n)
		p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{dongle: resource.MustParse(n)}
		return p
	}
	first, second, tooMany := withDongles("first", "1"), withDongles("second", "1"), withDongles("too-many", "2")
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: tr.NodeName},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{dongle: resource.MustParse("2"), corev1.ResourceCPU: resource.MustParse("64")}}}
	nodes := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	share := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}
	a := &admission{capacity: map[string]corev1.ResourceList{tr.NodeName: share}, pods: podLister(t, first, second, tooMany),
		onHost: func(*corev1.Pod) bool { return false }, nodes: corelisters.NewNodeLister(nodes)}
	if err := a.admit(first); err == nil || !strings.Contains(err.Error(), "not in the tenant's share") {
		t.Errorf("a resource the tenant did not advertise: %v", err)
	}
	if err := nodes.Add(node); err != nil {
		t.Fatal(err)
	}
	if err := a.admit(first); err != nil {
		t.Fatalf("an advertised resource is refused: %v", err)
	}
	if err := a.admit(second); err != nil {
		t.Errorf("the second of two advertised dongles is refused: %v", err)
	}
	if err := a.admit(tooMany); err == nil {
		t.Error("a pod asking for more dongles than the node advertises is admitted")
	}
	if got := withAdvertised(share, node.Status.Allocatable)[corev1.ResourceCPU]; got.Cmp(resource.MustParse("2")) != 0 {
		t.Errorf("the tenant's node status raised the share's cpu to %s", got.String())
	}

	gpuShare := tr
	gpuShare.Share = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}
	p := withDongles("translated", "1")
	p.Spec.Containers[0].Resources.Limits["nvidia.com/gpu"] = resource.MustParse("1")
	pt, err := gpuShare.TranslatePod(p, defaultMetadata, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := pt.Pod.Spec.Containers[0].Resources
	if _, ok := r.Requests[dongle]; ok {
		t.Error("the host pod asks for the tenant's own extended resource")
	}
	if _, ok := r.Limits[dongle]; ok {
		t.Error("the host pod limits the tenant's own extended resource")
	}
	if _, ok := r.Limits["nvidia.com/gpu"]; !ok {
		t.Error("the host pod lost the GPU the share names")
	}
}
