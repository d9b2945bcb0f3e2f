package syncer

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"

	"github.com/nestdev/nest/internal/syncer/contract"
	"github.com/nestdev/nest/internal/testutil"
)

func failedRun(id, message string, code int32) *corev1.ContainerStateTerminated {
	return &corev1.ContainerStateTerminated{ContainerID: id, ExitCode: code, Message: message, FinishedAt: metav1.NewTime(time.Unix(1700000000, 0))}
}

func withInitStatuses(statuses ...corev1.ContainerStatus) *corev1.Pod {
	return &corev1.Pod{Status: corev1.PodStatus{InitContainerStatuses: statuses}}
}

func TestNewHelperFailuresCountsEachFailedRunOnce(t *testing.T) {
	const helperLog = "nest-syncer node-disk: the node's /etc/hosts not written: etc is a file\nnest-syncer node-disk: hostPath type check failed: /srv/app.conf is not a file\n"
	first := corev1.ContainerStatus{Name: nodeDiskName, State: corev1.ContainerState{Terminated: failedRun("containerd://a", helperLog, 1)}}
	backingOff := corev1.ContainerStatus{Name: nodeDiskName, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}, LastTerminationState: first.State}
	second := corev1.ContainerStatus{Name: nodeDiskName, State: corev1.ContainerState{Terminated: failedRun("containerd://b", helperLog, 1)}, LastTerminationState: first.State}
	want := `MountVolume.SetUp failed on the virtual node: hostPath type check failed: /srv/app.conf is not a file`
	for _, c := range []struct {
		name    string
		was, is *corev1.Pod
		want    int
	}{
		{"the first failure", withInitStatuses(), withInitStatuses(first), 1},
		{"the same failure in a later update", withInitStatuses(first), withInitStatuses(first), 0},
		{"backing off after it", withInitStatuses(first), withInitStatuses(backingOff), 0},
		{"the next run failing", withInitStatuses(backingOff), withInitStatuses(second), 1},
		{"a tenant init container failing", withInitStatuses(), withInitStatuses(corev1.ContainerStatus{Name: "migrate", State: first.State}), 0},
		{"a helper that succeeded", withInitStatuses(), withInitStatuses(corev1.ContainerStatus{Name: etcHostsName, State: corev1.ContainerState{Terminated: failedRun("containerd://c", "", 0)}}), 0},
		{"a run the kubelet could not find", withInitStatuses(), withInitStatuses(corev1.ContainerStatus{Name: nodeDiskName, State: corev1.ContainerState{Terminated: unknownRun}}), 0},
		{"a pod being deleted", withInitStatuses(backingOff), deleting(withInitStatuses(second)), 0},
	} {
		got := newHelperFailures(c.was, c.is)
		if len(got) != c.want {
			t.Errorf("%s: %d failures %q, want %d", c.name, len(got), got, c.want)
			continue
		}
		for _, e := range got {
			if e.reason != ReasonFailedMount || e.message != want {
				t.Errorf("%s: %s %q, want %s %q", c.name, e.reason, e.message, ReasonFailedMount, want)
			}
		}
	}
}

// What the kubelet writes over the status of a container it could not find
// when the pod ends.
var unknownRun = &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "ContainerStatusUnknown", Message: "The container could not be located when the pod was terminated"}

func deleting(p *corev1.Pod) *corev1.Pod {
	p.DeletionTimestamp = &metav1.Time{Time: time.Unix(1700000100, 0)}
	return p
}

// A helper that cannot start is reported once per reason, the pull's two
// alternating reasons as one.
func TestNewHelperFailuresReportsAHelperThatCannotStart(t *testing.T) {
	waiting := func(reason string) *corev1.Pod {
		return withInitStatuses(corev1.ContainerStatus{Name: etcHostsName, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: "pull registry.host.example/nest:v1: not found"}}})
	}
	for _, c := range []struct {
		was, is string
		want    []string
	}{
		{"PodInitializing", "ErrImagePull", []string{"MountVolume.SetUp failed on the virtual node: it cannot start its helper: ErrImagePull"}},
		{"ErrImagePull", "ImagePullBackOff", nil},
		{"ImagePullBackOff", "ErrImagePull", nil},
		{"ErrImagePull", "CreateContainerError", []string{"MountVolume.SetUp failed on the virtual node: it cannot start its helper: CreateContainerError"}},
		{"", "ContainerCreating", nil},
		{"PodInitializing", "CrashLoopBackOff", nil},
	} {
		var got []string
		for _, e := range newHelperFailures(waiting(c.was), waiting(c.is)) {
			got = append(got, e.message)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%s to %s: %q, want %q", c.was, c.is, got, c.want)
		}
	}
}

// The kubelet's Initialized condition of a host pod names the helpers; the
// tenant's does not, and a pod whose only incomplete init containers are
// helpers is initialized, as a pod without init containers is.
func TestInitializedWithoutHelpers(t *testing.T) {
	notInit := func(msg string) corev1.PodCondition {
		return corev1.PodCondition{Type: corev1.PodInitialized, Status: corev1.ConditionFalse, Reason: "ContainersNotInitialized", Message: msg}
	}
	for _, c := range []struct {
		in   corev1.PodCondition
		want corev1.PodCondition
	}{
		{notInit("containers with incomplete status: [" + nodeDiskName + "]"), corev1.PodCondition{Type: corev1.PodInitialized, Status: corev1.ConditionTrue}},
		{notInit("containers with incomplete status: [" + etcHostsName + " " + nodeDiskName + " migrate]"), notInit("containers with incomplete status: [migrate]")},
		{notInit("containers with unknown status: [" + nodeDiskName + " seed], containers with incomplete status: [" + nodeDiskName + "]"), notInit("containers with unknown status: [seed]")},
		{notInit("something else"), notInit("something else")},
		{corev1.PodCondition{Type: corev1.ContainersReady, Status: corev1.ConditionFalse, Message: "containers with unready status: [c]"}, corev1.PodCondition{Type: corev1.ContainersReady, Status: corev1.ConditionFalse, Message: "containers with unready status: [c]"}},
	} {
		if got := initializedWithoutHelpers(c.in); got != c.want {
			t.Errorf("%q: got %+v, want %+v", c.in.Message, got, c.want)
		}
	}
}

func TestHelperFailureMessageIsBounded(t *testing.T) {
	if got := helperFailureMessage(failedRun("x", "", 137)); got != "exit code 137" {
		t.Errorf("no message: %q", got)
	}
	long := helperFailureMessage(failedRun("x", "hostPath /x"+strings.Repeat("é", 2000), 1))
	if len(long) > helperMessageBudget+len("...") || !strings.HasSuffix(long, "...") {
		t.Errorf("a long message is %d bytes, want at most %d and cut with ...", len(long), helperMessageBudget+3)
	}
	if !strings.HasPrefix(long, "hostPath /xé") || strings.ContainsRune(long, '\uFFFD') {
		t.Errorf("the cut broke a character or lost the start: %.60q", long)
	}
}

func TestHelperEventsStayOnTheHost(t *testing.T) {
	for path, want := range map[string]bool{
		"spec.initContainers{" + nodeDiskName + "}": true,
		"spec.initContainers{" + etcHostsName + "}": true,
		"spec.initContainers{migrate}":              false,
		"spec.containers{" + nodeDiskName + "-ish}": false,
		"": false,
	} {
		ev := &corev1.Event{InvolvedObject: corev1.ObjectReference{Kind: "Pod", FieldPath: path}}
		if got := aboutHelper(ev); got != want {
			t.Errorf("event about %q: helper %v, want %v", path, got, want)
		}
	}
}

// The tenant pod of a host pod whose disk helper failed gets one FailedMount
// event with the helper's message; a host pod of another tenant pod (an
// earlier one of the same name) gets none.
func TestReportHelperFailuresRecordsOnTheTenantPod(t *testing.T) {
	tenant := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: "uid-web"}}
	host := &corev1.Pod{ObjectMeta: testutil.CopyMeta(tr.HostNamespace, tr.VirtualCluster, "web")}
	failed := host.DeepCopy()
	failed.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: nodeDiskName, State: corev1.ContainerState{Terminated: failedRun("containerd://a", "nest-syncer node-disk: hostPath /data (type \"Directory\"): is not a directory on the virtual node", 1)}}}
	recorder := record.NewFakeRecorder(10)
	p := &podProvider{tr: tr, recorder: recorder, tenantPods: podLister(t, tenant)}

	p.reportHelperFailures(host, failed)
	p.reportHelperFailures(failed, failed)
	stale := failed.DeepCopy()
	stale.Annotations[contract.AnnotationTenantUID] = "uid-earlier"
	p.reportHelperFailures(host, stale)

	close(recorder.Events)
	var got []string
	for ev := range recorder.Events {
		got = append(got, ev)
	}
	want := `Warning FailedMount MountVolume.SetUp failed on the virtual node: hostPath /data (type "Directory"): is not a directory on the virtual node`
	if len(got) != 1 || got[0] != want {
		t.Errorf("events %q, want [%q]", got, want)
	}
}

// The line a failed helper prints is the one its FailedMount event reads
// back: the two ends of the termination message agree.
func TestHelperMainPrintsTheLineTheFailedMountEventReads(t *testing.T) {
	var stderr strings.Builder
	ran, err := HelperMain([]string{nodeDiskCommand, "--root=" + t.TempDir(), "--node-name=n", "--path=/missing/app.conf=File"}, &stderr)
	if !ran || err == nil {
		t.Fatalf("ran %v, err %v: want a failed run", ran, err)
	}
	got := helperFailureMessage(failedRun("containerd://a", stderr.String(), 1))
	if got != err.Error() || !strings.Contains(got, "/missing/app.conf") {
		t.Errorf("event message %q from stderr %q, want the error %q", got, stderr.String(), err)
	}
	for _, args := range [][]string{nil, {"--kubeconfig=x"}, {"etc-hostss"}} {
		if ran, err := HelperMain(args, &stderr); ran || err != nil {
			t.Errorf("HelperMain(%q) = %v, %v: want nest-syncer itself to run", args, ran, err)
		}
	}
}

// The kubelet retries a volume it cannot set up; a helper stands for that
// step, so it runs again after a failure even in a pod that never
// restarts its containers.
func TestTranslatePodRunsFailedHelpersAgainWhateverThePodsRestartPolicy(t *testing.T) {
	p := hostPathPod()
	p.Spec.Hostname, p.Spec.Subdomain = "web-1", "db"
	p.Spec.RestartPolicy = corev1.RestartPolicyNever
	pt, err := withDisk.TranslatePod(p, defaultMetadata, nil)
	if err != nil {
		t.Fatal(err)
	}
	spec := pt.Pod.Spec
	if spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("host pod restartPolicy %s, want the tenant's Never", spec.RestartPolicy)
	}
	helpers := 0
	for _, c := range spec.InitContainers {
		switch {
		case isHelper(c.Name):
			helpers++
			if c.RestartPolicy == nil || *c.RestartPolicy != corev1.ContainerRestartPolicyOnFailure {
				t.Errorf("helper %s restartPolicy %v, want OnFailure", c.Name, c.RestartPolicy)
			}
		case c.RestartPolicy != nil:
			t.Errorf("tenant init container %s got restartPolicy %s", c.Name, *c.RestartPolicy)
		}
	}
	if helpers != 2 {
		t.Errorf("%d helpers in %v, want the disk's and /etc/hosts'", helpers, containerNames(spec.InitContainers))
	}
}

// A fence that gave up is a NetworkNotReady event, not a volume's.
func TestNetworkFenceFailureIsNetworkNotReady(t *testing.T) {
	const helperLog = "nest-probe: the pod's network still reached the host after 2400 attempts: its isolation NetworkPolicy is not in force\n"
	failed := withInitStatuses(corev1.ContainerStatus{Name: networkFenceName, State: corev1.ContainerState{Terminated: failedRun("containerd://f", helperLog, 1)}})
	got := newHelperFailures(withInitStatuses(), failed)
	if len(got) != 1 || got[0].reason != ReasonNetworkNotReady || !strings.Contains(got[0].message, "isolation NetworkPolicy is not in force") {
		t.Errorf("fence failure: %+v, want one %s event with the fence's reason", got, ReasonNetworkNotReady)
	}
}
