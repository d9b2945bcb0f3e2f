package syncer

import (
	"context"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// ReasonFailedMount is the tenant event of a pod whose helper init container
// failed to prepare a node file or directory it mounts: the reason the
// kubelet gives a volume it cannot set up.
const ReasonFailedMount = "FailedMount"

// ReasonNetworkNotReady is the tenant event of a pod whose network fence
// (fenceNetwork) failed: its isolation was not in force in time, so none of
// its containers started. The kubelet gives the same reason a pod whose
// network is not set up.
const ReasonNetworkNotReady = "NetworkNotReady"

// helperEvent is a tenant event about a failed helper.
type helperEvent struct{ reason, message string }

// helperEventOf is the event of helper's failure with message msg.
func helperEventOf(helper, msg string) helperEvent {
	if helper == networkFenceName {
		return helperEvent{ReasonNetworkNotReady, "the pod's network isolation is not in force yet, so its containers wait: " + msg}
	}
	return helperEvent{ReasonFailedMount, "MountVolume.SetUp failed on the virtual node: " + msg}
}

// helperMessageBudget caps a failed helper's message on the tenant event, in
// bytes: it repeats paths the tenant chose.
const helperMessageBudget = 1024

// newHelperFailures returns the messages of the helper init containers of a
// host pod that failed between its statuses was and is: a run that exited
// with an error, or a helper that cannot start (its image not pulled, its
// container not created). A failed run counts once, however many updates
// show it, and so does a reason it cannot start until the reason changes.
// Each message is the helper's own, or the kubelet's reason, without the
// helper's name. A pod being deleted has none: the kubelet marks what it
// stops as failed.
func newHelperFailures(was, is *corev1.Pod) []helperEvent {
	if is.DeletionTimestamp != nil {
		return nil
	}
	seen := map[string]bool{}
	for _, s := range was.Status.InitContainerStatuses {
		if key, _ := helperFailure(s); key != "" {
			seen[key] = true
		}
	}
	var out []helperEvent
	for _, s := range is.Status.InitContainerStatuses {
		if key, msg := helperFailure(s); key != "" && !seen[key] {
			out = append(out, helperEventOf(s.Name, msg))
		}
	}
	return out
}

// helperFailure returns a key that names a helper's failure and its
// message: a failed run (the current state, or the one before a restart),
// else a reason the kubelet gives for not starting it. key is "" when the
// status shows no failure, or is not a helper's.
func helperFailure(s corev1.ContainerStatus) (key, message string) {
	if !isHelper(s.Name) {
		return "", ""
	}
	for _, t := range []*corev1.ContainerStateTerminated{s.State.Terminated, s.LastTerminationState.Terminated} {
		// A run the kubelet could not find has no container ID and no
		// message of the helper's: it is not the helper's failure.
		if t != nil && t.ExitCode != 0 && t.ContainerID != "" {
			return s.Name + "/" + t.ContainerID + "/" + t.FinishedAt.UTC().String(), helperFailureMessage(t)
		}
	}
	if w := s.State.Waiting; w != nil && !startingNormally[w.Reason] {
		// The kubelet alternates the two while it retries a pull.
		reason := strings.Replace(w.Reason, "ImagePullBackOff", "ErrImagePull", 1)
		return s.Name + "/waiting/" + reason, "it cannot start its helper: " + reason
	}
	return "", ""
}

// startingNormally are the waiting reasons of a container on its way to
// run, or waiting out a back-off after a failed run (reported already).
var startingNormally = map[string]bool{"": true, "PodInitializing": true, "ContainerCreating": true, "CrashLoopBackOff": true}

// helperLinePrefix starts the line a failed helper writes last:
// helperLinePrefix, its subcommand, ": " and the error.
const helperLinePrefix = "nest-syncer "

// HelperMain runs a helper when nest-syncer's arguments name one
// (`nest-syncer etc-hosts ...`, `nest-syncer node-disk ...`) and reports
// whether they did. A helper's error is also its last line on stderr,
// which the kubelet keeps as the termination message and
// helperFailureMessage reads back for the tenant's FailedMount event.
func HelperMain(args []string, stderr io.Writer) (ran bool, err error) {
	if len(args) == 0 {
		return false, nil
	}
	run, ok := map[string]func([]string) error{
		etcHostsCommand: func(a []string) error { return RunEtcHostsHelper(a, os.Getenv) },
		nodeDiskCommand: RunNodeDiskHelper,
		nodeNetworkCommand: func(a []string) error {
			return RunNodeNetworkHelper(context.Background(), a)
		},
	}[args[0]]
	if !ok {
		return false, nil
	}
	if err := run(args[1:]); err != nil {
		fmt.Fprintf(stderr, "%s%s: %v\n", helperLinePrefix, args[0], err)
		return true, err
	}
	return true, nil
}

// helperFailureMessage is the last line a helper wrote (its termination
// message falls back to its log), without the prefix HelperMain writes,
// capped at helperMessageBudget.
func helperFailureMessage(t *corev1.ContainerStateTerminated) string {
	msg := strings.TrimSpace(t.Message)
	if i := strings.LastIndexByte(msg, '\n'); i >= 0 {
		msg = msg[i+1:]
	}
	if rest, ok := strings.CutPrefix(msg, helperLinePrefix); ok {
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
	return msg
}

// incompleteStatus matches the kubelet's lists of init containers in an
// Initialized condition: "containers with incomplete status: [a b]".
var incompleteStatus = regexp.MustCompile(`containers with [a-z]+ status: \[([^\]]*)\]`)

// initializedWithoutHelpers takes the helpers out of the kubelet's
// Initialized condition of a host pod. When only helpers were incomplete,
// the tenant pod, which has no init containers of its own left to run, is
// initialized, as the kubelet reports a pod without init containers.
func initializedWithoutHelpers(c corev1.PodCondition) corev1.PodCondition {
	matches := incompleteStatus.FindAllStringSubmatch(c.Message, -1)
	if c.Type != corev1.PodInitialized || c.Status != corev1.ConditionFalse || len(matches) == 0 {
		return c
	}
	var clauses []string
	for _, m := range matches {
		if names := slices.DeleteFunc(strings.Fields(m[1]), isHelper); len(names) > 0 {
			clauses = append(clauses, strings.Replace(m[0], "["+m[1]+"]", "["+strings.Join(names, " ")+"]", 1))
		}
	}
	if len(clauses) == 0 {
		c.Status, c.Reason, c.Message = corev1.ConditionTrue, "", ""
		return c
	}
	c.Message = strings.Join(clauses, ", ")
	return c
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
