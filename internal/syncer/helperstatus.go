package syncer

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// ReasonFailedMount is the tenant event of a pod whose helper init container
// failed to prepare a node file or directory it mounts: the reason the
// kubelet gives a volume it cannot set up.
const ReasonFailedMount = "FailedMount"

// helperMessageBudget caps a failed helper's message on the tenant event, in
// bytes: it repeats paths the tenant chose.
const helperMessageBudget = 1024

// newHelperFailures returns the messages of the helper init containers of a
// host pod that failed between its statuses was and is. A failure counts
// once, by the container run that ended, however many updates show it;
// each message is the helper's own, without the helper's name.
func newHelperFailures(was, is *corev1.Pod) []string {
	seen := map[string]bool{}
	for _, s := range was.Status.InitContainerStatuses {
		if t := helperFailure(s); t != nil {
			seen[failureKey(s.Name, t)] = true
		}
	}
	var out []string
	for _, s := range is.Status.InitContainerStatuses {
		if t := helperFailure(s); t != nil && !seen[failureKey(s.Name, t)] {
			out = append(out, helperFailureMessage(t))
		}
	}
	return out
}

// helperFailure is the last failed run of a helper's status: the current
// state, or the one before a restart.
func helperFailure(s corev1.ContainerStatus) *corev1.ContainerStateTerminated {
	if !isHelper(s.Name) {
		return nil
	}
	for _, t := range []*corev1.ContainerStateTerminated{s.State.Terminated, s.LastTerminationState.Terminated} {
		if t != nil && t.ExitCode != 0 {
			return t
		}
	}
	return nil
}

func failureKey(name string, t *corev1.ContainerStateTerminated) string {
	return name + "/" + t.ContainerID + "/" + t.FinishedAt.UTC().String()
}

// helperFailureMessage is the last line a helper wrote (its termination
// message falls back to its log), without the "nest-syncer <helper>: "
// prefix its command prints, capped at helperMessageBudget.
func helperFailureMessage(t *corev1.ContainerStateTerminated) string {
	msg := strings.TrimSpace(t.Message)
	if i := strings.LastIndexByte(msg, '\n'); i >= 0 {
		msg = msg[i+1:]
	}
	if rest, ok := strings.CutPrefix(msg, "nest-syncer "); ok {
		if _, after, found := strings.Cut(rest, ": "); found {
			msg = after
		}
	}
	if msg == "" {
		msg = fmt.Sprintf("exit code %d", t.ExitCode)
	}
	if len(msg) > helperMessageBudget {
		msg = strings.ToValidUTF8(msg[:helperMessageBudget], "") + "..."
	}
	return "MountVolume.SetUp failed on the virtual node: " + msg
}

// aboutHelper reports whether a host kubelet event is about one of the
// helper init containers (created, started, backing off), which the tenant
// pod does not have: such events stay on the host.
func aboutHelper(ev *corev1.Event) bool {
	for _, name := range helperNames {
		if ev.InvolvedObject.FieldPath == "spec.initContainers{"+name+"}" {
			return true
		}
	}
	return false
}
