package syncer

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
)

func failedRun(id, message string, code int32) *corev1.ContainerStateTerminated {
	return &corev1.ContainerStateTerminated{ContainerID: id, ExitCode: code, Message: message, FinishedAt: metav1.NewTime(time.Unix(1700000000, 0))}
}

func withInitStatuses(statuses ...corev1.ContainerStatus) *corev1.Pod {
	return &corev1.Pod{Status: corev1.PodStatus{InitContainerStatuses: statuses}}
}

func TestNewHelperFailuresCountsEachFailedRunOnce(t *testing.T) {
	const helperLog = "nest-syncer node-disk: the node's /etc/hosts not written: etc is a file\nnest-syncer node-disk: hostPath /srv/app.conf (type \"File\"): is not a file on the virtual node\n"
	first := corev1.ContainerStatus{Name: nodeDiskName, State: corev1.ContainerState{Terminated: failedRun("containerd://a", helperLog, 1)}}
	backingOff := corev1.ContainerStatus{Name: nodeDiskName, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}, LastTerminationState: first.State}
	second := corev1.ContainerStatus{Name: nodeDiskName, State: corev1.ContainerState{Terminated: failedRun("containerd://b", helperLog, 1)}, LastTerminationState: first.State}
	want := `MountVolume.SetUp failed on the virtual node: hostPath /srv/app.conf (type "File"): is not a file on the virtual node`
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
	} {
		got := newHelperFailures(c.was, c.is)
		if len(got) != c.want {
			t.Errorf("%s: %d failures %q, want %d", c.name, len(got), got, c.want)
			continue
		}
		for _, msg := range got {
			if msg != want {
				t.Errorf("%s: message %q, want %q", c.name, msg, want)
			}
		}
	}
}

func TestHelperFailureMessageIsBounded(t *testing.T) {
	if got := helperFailureMessage(failedRun("x", "", 137)); !strings.HasSuffix(got, ": exit code 137") {
		t.Errorf("no message: %q", got)
	}
	long := helperFailureMessage(failedRun("x", "hostPath /x"+strings.Repeat("é", 2000), 1))
	if body := strings.TrimPrefix(long, "MountVolume.SetUp failed on the virtual node: "); len(body) > helperMessageBudget+len("...") || !strings.HasSuffix(body, "...") {
		t.Errorf("a long message is %d bytes, want at most %d and cut with ...", len(body), helperMessageBudget+3)
	}
	if !strings.Contains(long, "hostPath /xé") || strings.ContainsRune(long, '\uFFFD') {
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
	host := &corev1.Pod{ObjectMeta: hostMeta(tr.VirtualCluster, "web")}
	failed := host.DeepCopy()
	failed.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: nodeDiskName, State: corev1.ContainerState{Terminated: failedRun("containerd://a", "nest-syncer node-disk: hostPath /data (type \"Directory\"): is not a directory on the virtual node", 1)}}}
	recorder := record.NewFakeRecorder(10)
	p := &podProvider{tr: tr, recorder: recorder, tenantPods: podLister(t, tenant)}

	p.reportHelperFailures(host, failed)
	p.reportHelperFailures(failed, failed)
	stale := failed.DeepCopy()
	stale.Annotations[AnnotationTenantUID] = "uid-earlier"
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
