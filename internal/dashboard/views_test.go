package dashboard

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/vcops"
)

func TestUsageOf(t *testing.T) {
	q := &corev1.ResourceQuota{
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{
			"requests.cpu": resource.MustParse("4"), "requests.memory": resource.MustParse("8Gi"), "requests.nvidia.com/gpu": resource.MustParse("1"),
			corev1.ResourcePods: resource.MustParse("110"), "limits.cpu": resource.MustParse("16"),
		}},
		Status: corev1.ResourceQuotaStatus{Used: corev1.ResourceList{"requests.cpu": resource.MustParse("500m"), "requests.memory": resource.MustParse("16Gi")}},
	}
	got := usageOf(q)
	want := []usageBar{
		{Resource: "cpu", Used: "500m", Hard: "4", Percent: 12},
		{Resource: "memory", Used: "16Gi", Hard: "8Gi", Percent: 100},
		{Resource: "gpu", Used: "0", Hard: "1", Percent: 0},
		{Resource: "pods", Used: "0", Hard: "110", Percent: 0},
	}
	if len(got) != len(want) {
		t.Fatalf("usage = %+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("bar %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	if usageOf(nil) != nil || podsUsed(nil) != "-" {
		t.Error("no quota must show no usage")
	}
}

func TestPhaseAndProgress(t *testing.T) {
	vc := &nestv1.VirtualCluster{}
	if phaseOf(vc) != "New" {
		t.Errorf("no status: %s", phaseOf(vc))
	}
	vc.Status.Phase = nestv1.PhaseInitialized
	steps := progressOf(vc)
	if !steps[0].Done || steps[0].Current || !steps[1].Current || steps[1].Done || steps[2].Done {
		t.Errorf("Initialized: %+v", steps)
	}
	vc.Status.Phase = nestv1.PhaseCompleted
	for _, s := range progressOf(vc) {
		if !s.Done {
			t.Errorf("Completed: step %s not done", s.Phase)
		}
	}
	now := metav1.Now()
	vc.DeletionTimestamp = &now
	if phaseOf(vc) != "Deleting" {
		t.Errorf("deleting: %s", phaseOf(vc))
	}
}

func TestEventsOfKeepsTheClustersOwnNewestFirst(t *testing.T) {
	vc := &nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: "a", UID: "u1"}}
	at := func(min int) metav1.Time { return metav1.NewTime(testNow.Add(time.Duration(-min) * time.Minute)) }
	events := []corev1.Event{
		{InvolvedObject: corev1.ObjectReference{Kind: "VirtualCluster", Name: "a", UID: "u1"}, Reason: "Old", LastTimestamp: at(10)},
		{InvolvedObject: corev1.ObjectReference{Kind: "Pod", Name: "a"}, Reason: "PodEvent", LastTimestamp: at(1)},
		{InvolvedObject: corev1.ObjectReference{Kind: "VirtualCluster", Name: "a", UID: "earlier-incarnation"}, Reason: "Stale", LastTimestamp: at(1)},
		{InvolvedObject: corev1.ObjectReference{Kind: "VirtualCluster", Name: "a", UID: "u1"}, Reason: "New", LastTimestamp: at(2), Count: 3},
	}
	rows := eventsOf(events, vc, testNow, 10)
	if len(rows) != 2 || rows[0].Reason != "New" || rows[1].Reason != "Old" || rows[0].Count != 3 || rows[1].Count != 1 {
		t.Errorf("events = %+v", rows)
	}
	if rows := eventsOf(events, vc, testNow, 1); len(rows) != 1 {
		t.Errorf("limit 1 gave %d", len(rows))
	}
}

func TestComponentsOf(t *testing.T) {
	pod := &corev1.Pod{
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "setup"}, {Name: "etcd", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)}, {Name: "kube-apiserver", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)}},
			Containers:     []corev1.Container{{Name: "nest-syncer"}},
		},
		Status: corev1.PodStatus{InitContainerStatuses: []corev1.ContainerStatus{
			{Name: "kube-apiserver", Ready: false, RestartCount: 2, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}},
			{Name: "etcd", Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}},
		}},
	}
	got := componentsOf(pod)
	want := []componentRow{{"etcd", true, "Running", 0}, {"kube-apiserver", false, "Waiting: CrashLoopBackOff", 2}, {"nest-syncer", false, "Pending", 0}}
	if len(got) != len(want) {
		t.Fatalf("components = %+v, want the sidecars and containers, not the one-shot init container", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("component %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	if componentsOf(nil) != nil {
		t.Error("no pod must give no components")
	}
}

func TestFieldForPath(t *testing.T) {
	for path, want := range map[string]string{
		"spec.externalIPs[0]":                            vcops.FieldExternalIPs,
		"spec.externalIPs":                               vcops.FieldExternalIPs,
		"metadata.name":                                  vcops.FieldName,
		"spec.promoteResources.resources[cpu]":           vcops.FieldCPU,
		"spec.promoteResources.resources.nvidia.com/gpu": vcops.FieldGPU,
		"spec.controlPlane.service.type":                 vcops.FieldServiceType,
		"spec.virtualNode.podSecurityLevel":              vcops.FieldPodSecurity,
		"spec.datastore":                                 "",
		"spec.externalIPsX":                              "",
	} {
		if got := fieldForPath(path); got != want {
			t.Errorf("fieldForPath(%q) = %q, want %q", path, got, want)
		}
	}
}

// Every input the create form has is one formErrors can address, and the
// other way round.
func TestEveryMappedFieldIsOnTheForm(t *testing.T) {
	w := do(t, testServer(t, newFake().Build()), "GET", "/new", nil)
	for _, f := range formFields {
		if !strings.Contains(w.Body.String(), `id="`+f+`-error"`) {
			t.Errorf("the create form has no error slot for %s", f)
		}
	}
	for _, f := range specFields {
		found := false
		for _, g := range formFields {
			found = found || f == g
		}
		if !found {
			t.Errorf("API field maps to %q, which is not a form field", f)
		}
	}
}

// The vendored htmx files are the ones hack/dashboard-assets.sh pinned.
func TestVendoredAssetsMatchTheirPinnedChecksums(t *testing.T) {
	sums, err := staticFS.Open("static/vendor/SHA256SUMS")
	if err != nil {
		t.Fatal(err)
	}
	defer sums.Close()
	checked := 0
	sc := bufio.NewScanner(sums)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || line == "" {
			continue
		}
		want, name, ok := strings.Cut(line, "  ")
		if !ok {
			t.Fatalf("bad SHA256SUMS line %q", line)
		}
		data, err := staticFS.ReadFile("static/vendor/" + name)
		if err != nil {
			t.Fatalf("%s is pinned but not embedded: %v", name, err)
		}
		sum := sha256.Sum256(data)
		if got := hex.EncodeToString(sum[:]); got != want {
			t.Errorf("%s: sha256 %s, pinned %s: run hack/dashboard-assets.sh", name, got, want)
		}
		checked++
	}
	if checked < 2 {
		t.Errorf("SHA256SUMS pins %d files, want htmx and its SSE extension", checked)
	}
}

// BenchmarkPageWeight reports what the clusters page costs a browser on
// first load: the HTML with 10 clusters and every asset it loads.
func BenchmarkPageWeight(b *testing.B) {
	var objs []client.Object
	for i := range 10 {
		vc := vcFixture("vc-"+string(rune('a'+i)), "c"+string(rune('a'+i)), nestv1.PhaseCompleted, metav1.ConditionTrue)
		objs = append(objs, vc, quotaFixture(vc, "1", "3"))
	}
	h := testServer(b, newFake(objs...).Build())
	var html, assets int
	for b.Loop() {
		html = do(b, h, "GET", "/", nil).Body.Len()
		assets = 0
		for _, a := range []string{"/static/style.css", "/static/app.js", "/static/vendor/htmx.min.js", "/static/vendor/htmx-sse.min.js"} {
			assets += do(b, h, "GET", a, nil).Body.Len()
		}
	}
	b.ReportMetric(float64(html), "html-bytes")
	b.ReportMetric(float64(assets), "asset-bytes")
	b.ReportMetric(float64(html+assets), "page-bytes")
}

// The capacity line is the share with its defaults, by name.
func TestCapacityOf(t *testing.T) {
	vc := &nestv1.VirtualCluster{}
	if got, want := capacityOf(vc), "cpu 2, memory 4Gi, pods 110"; got != want {
		t.Errorf("default share: %q, want %q", got, want)
	}
	vc.Spec.PromoteResources.Resources = corev1.ResourceList{vcops.GPUResource: resource.MustParse("1"), corev1.ResourceCPU: resource.MustParse("500m")}
	if got, want := capacityOf(vc), "cpu 500m, memory 4Gi, "+string(vcops.GPUResource)+" 1, pods 110"; got != want {
		t.Errorf("share with a GPU: %q, want %q", got, want)
	}
}
