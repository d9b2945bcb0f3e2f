package memberusage

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"

	"github.com/nestdev/nest/internal/kube"
	"github.com/nestdev/nest/internal/syncer/contract"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

func tp(t time.Time) *time.Time { return &t }

func gpuPod(uid string, phase corev1.PodPhase, start time.Time, finished ...time.Time) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{UID: k8stypes.UID("m-" + uid), Annotations: map[string]string{
			contract.AnnotationTenantNamespace: "default", contract.AnnotationTenantName: uid, contract.AnnotationTenantUID: uid}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
			// As the API server defaults them: the GPU limit becomes its request.
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), GPUResource: resource.MustParse("1")},
			Limits:   corev1.ResourceList{GPUResource: resource.MustParse("1")},
		}}}},
		Status: corev1.PodStatus{Phase: phase, StartTime: &metav1.Time{Time: start}},
	}
	for _, f := range finished {
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{FinishedAt: metav1.NewTime(f)}}})
	}
	return p
}

func TestPodRecord(t *testing.T) {
	tests := []struct {
		name    string
		pod     *corev1.Pod
		ok      bool
		end     *time.Time
		cpu     float64
		gpu     float64
		running bool
	}{
		{"finished: counted to the latest finishedAt", gpuPod("a", corev1.PodSucceeded, t0, at(time.Hour), at(2*time.Hour)), true, tp(at(2 * time.Hour)), 3600, 7200, false},
		{"running: counted to now", gpuPod("b", corev1.PodRunning, t0), true, nil, 1800 * 3, 3600 * 3, true},
		{"failed without finishedAt: ends now", gpuPod("c", corev1.PodFailed, t0), true, tp(at(3 * time.Hour)), 1800 * 3, 3600 * 3, false},
		{"not started", func() *corev1.Pod { p := gpuPod("d", corev1.PodPending, t0); p.Status.StartTime = nil; return p }(), false, nil, 0, 0, false},
		{"not a tenant pod", func() *corev1.Pod { p := gpuPod("e", corev1.PodRunning, t0); p.Annotations = nil; return p }(), false, nil, 0, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, ok := podRecord("gpu-pool", tt.pod, at(3*time.Hour))
			if ok != tt.ok {
				t.Fatalf("ok = %v, want %v", ok, tt.ok)
			}
			if !ok {
				return
			}
			if (r.End == nil) != (tt.end == nil) || (r.End != nil && !r.End.Equal(*tt.end)) {
				t.Errorf("end = %v, want %v", r.End, tt.end)
			}
			cpu, gpu := r.usage()
			if cpu != tt.cpu || gpu != tt.gpu {
				t.Errorf("usage = cpu %v gpu %v seconds, want %v %v", cpu, gpu, tt.cpu, tt.gpu)
			}
			if r.Member != "gpu-pool" || r.Namespace != "default" || r.TenantUID == "" || r.Requests.Name(GPUResource, resource.DecimalSI).Value() != 1 {
				t.Errorf("record = %+v", r)
			}
		})
	}
}

func TestUsageBetween(t *testing.T) {
	r := Record{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), GPUResource: resource.MustParse("2")}, Start: t0, LastSeen: at(30 * time.Minute)}
	if cpu, gpu := r.usage(); cpu != 3600 || gpu != 3600 {
		t.Errorf("running half an hour on 2 cpu and 2 GPUs: %v %v, want 3600 3600", cpu, gpu)
	}
	r.End = tp(at(time.Hour))
	if cpu, gpu := r.usage(); cpu != 7200 || gpu != 7200 {
		t.Errorf("ended after an hour: %v %v, want 7200 7200", cpu, gpu)
	}
	r.End = tp(at(-time.Hour))
	if cpu, gpu := r.usage(); cpu != 0 || gpu != 0 {
		t.Errorf("end before start: %v %v, want 0", cpu, gpu)
	}
}

func TestMerge(t *testing.T) {
	gpu := corev1.ResourceList{GPUResource: resource.MustParse("1")}
	finished := Record{Member: "m", PodUID: "done", Requests: gpu, Start: t0, End: tp(at(time.Hour)), LastSeen: at(time.Hour)}
	running := Record{Member: "m", PodUID: "run", Requests: gpu, Start: t0, LastSeen: at(time.Hour)}
	vanished := Record{Member: "m", PodUID: "gone", Requests: gpu, Start: t0, LastSeen: at(time.Hour)}
	elsewhere := Record{Member: "other", PodUID: "far", Requests: gpu, Start: t0, LastSeen: at(time.Hour)}
	book := Book{Records: []Record{finished, running, vanished, elsewhere}}

	// The finished pod listed again with a later finishedAt (its status
	// rewritten) is not recounted; the running one grows; the vanished one
	// closes when last seen; the unlisted member is left alone; a new pod
	// is added.
	relisted := finished
	relisted.End, relisted.LastSeen = tp(at(5*time.Hour)), at(5*time.Hour)
	grown := running
	grown.LastSeen = at(2 * time.Hour)
	grown.Start = at(time.Minute) // a changed startTime does not move the start
	fresh := Record{Member: "m", PodUID: "new", Requests: gpu, Start: at(time.Hour), LastSeen: at(2 * time.Hour)}
	out := merge(book, map[string][]Record{"m": {relisted, grown, fresh}})

	want := map[string]struct {
		gpu float64
		end *time.Time
	}{
		"done": {3600, tp(at(time.Hour))},
		"run":  {7200, nil},
		"gone": {3600, tp(at(time.Hour))},
		"far":  {3600, nil},
		"new":  {3600, nil},
	}
	if len(out.Records) != len(want) {
		t.Fatalf("records = %+v", out.Records)
	}
	for _, r := range out.Records {
		w := want[r.PodUID]
		if _, gpu := r.usage(); gpu != w.gpu {
			t.Errorf("%s: gpu seconds %v, want %v", r.PodUID, gpu, w.gpu)
		}
		if (r.End == nil) != (w.end == nil) || (r.End != nil && !r.End.Equal(*w.end)) {
			t.Errorf("%s: end %v, want %v", r.PodUID, r.End, w.end)
		}
	}
	// Merging the same listing again changes nothing.
	again := merge(out, map[string][]Record{"m": {relisted, grown, fresh}})
	if a, b := summarize(out)["m"], summarize(again)["m"]; a.GPUSeconds != b.GPUSeconds || a.Pods != b.Pods {
		t.Errorf("second merge changed the totals: %+v then %+v", a, b)
	}
}

func TestBound(t *testing.T) {
	gpu := corev1.ResourceList{GPUResource: resource.MustParse("1")}
	var b Book
	for i := range 5 {
		b.Records = append(b.Records, Record{Member: "m", PodUID: string(rune('a' + i)), Requests: gpu,
			Start: t0, End: tp(at(time.Duration(5-i) * time.Hour)), LastSeen: at(time.Duration(5-i) * time.Hour)})
	}
	b.Records = append(b.Records, Record{Member: "m", PodUID: "running", Requests: gpu, Start: t0, LastSeen: at(time.Hour)})
	before := summarize(b)["m"]
	out := bound(b, 2)
	if len(out.Records) != 3 {
		t.Fatalf("kept %d records, want 2 finished and the running one: %+v", len(out.Records), out.Records)
	}
	for _, r := range out.Records {
		if r.PodUID != "a" && r.PodUID != "b" && r.PodUID != "running" {
			t.Errorf("kept %s, which ended earliest", r.PodUID)
		}
	}
	after := summarize(out)["m"]
	if after.GPUSeconds != before.GPUSeconds || after.Pods != before.Pods || !after.Since.Equal(*before.Since) || after.Running != 1 {
		t.Errorf("totals changed when bounding: %+v, want %+v", after, before)
	}
	if hours(after.GPUSeconds) != "16.000" {
		t.Errorf("gpu hours = %s, want 16.000", hours(after.GPUSeconds))
	}
	if got := bound(out, 2); len(got.Records) != 3 {
		t.Errorf("bounding a bounded book dropped more")
	}
	// The dropped pods, listed again (finished pods stay in the member),
	// are not recorded again; a pod that ended later is.
	listed := slices.Clone(b.Records)
	later := Record{Member: "m", PodUID: "later", Requests: gpu, Start: t0, End: tp(at(6 * time.Hour)), LastSeen: at(6 * time.Hour)}
	again := summarize(merge(out, map[string][]Record{"m": append(listed, later)}))["m"]
	if again.Pods != before.Pods+1 || again.GPUSeconds != before.GPUSeconds+6*3600 {
		t.Errorf("after listing the dropped pods again: %+v, want %d pods and %v GPU-seconds", again, before.Pods+1, before.GPUSeconds+6*3600)
	}
}

func TestUsageStatus(t *testing.T) {
	sums := map[string]Summary{"a": {Totals: Totals{Pods: 2, GPUSeconds: 7200, CPUSeconds: 1800, Since: tp(t0)}, Running: 1}}
	st := usageStatus(sums, map[string]string{"b": "list pods: Unauthorized"}, map[string]time.Time{"a": at(time.Hour)}, nil)
	if len(st) != 2 || st[0].Name != "a" || st[0].GPUHours != "2.000" || st[0].CPUHours != "0.500" || st[0].Pods != 2 || st[0].Running != 1 ||
		!st[0].Since.Time.Equal(t0) || !st[0].LastUpdated.Time.Equal(at(time.Hour)) {
		t.Errorf("status[0] = %+v", st[0])
	}
	if st[1].Name != "b" || st[1].Message == "" || st[1].LastUpdated != nil || st[1].GPUHours != "0.000" {
		t.Errorf("status[1] = %+v", st[1])
	}
	p, err := kube.StatusFieldPatch("memberUsage", nil)
	if err != nil || string(p) != `{"status":{"memberUsage":null}}` {
		t.Errorf("patch = %s, %v", p, err)
	}
}
