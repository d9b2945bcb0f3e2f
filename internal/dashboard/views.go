package dashboard

import (
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/controlplane"
	"github.com/nestdev/nest/internal/kube"
	"github.com/nestdev/nest/internal/syncer/contract"
	"github.com/nestdev/nest/internal/vcops"
)

// The view models below are plain data built by pure functions from API
// objects, so the templates hold no logic and the functions are table-tested.

// clusterRow is one VirtualCluster in the clusters table.
type clusterRow struct {
	Namespace, Name string
	Phase           string
	// Ready is the Ready condition's status: True, False or Unknown.
	Ready    string
	Version  string
	Endpoint string
	Age      string
	Deleting bool
	// Usage is the share and its use; empty when the quota is unreadable.
	Usage []usageBar
	// Pods is how many tenant pods run on the host, or "-" when unknown.
	Pods string
}

// usageBar is one resource of a share: how much the tenant's host pods
// request against the share.
type usageBar struct {
	// Resource is what users call it: cpu, memory, gpu, pods.
	Resource string
	Used     string
	Hard     string
	// Percent of Hard used, 0 to 100, for the bar's width.
	Percent int
}

// quotaResource maps the share's names to the tenant quota's names.
var quotaResources = []struct {
	label string
	quota corev1.ResourceName
}{
	{"cpu", "requests.cpu"},
	{"memory", "requests.memory"},
	{"gpu", "requests." + vcops.GPUResource},
	{"pods", corev1.ResourcePods},
}

// usageOf reads the tenant quota: each shared resource's hard and used.
// A quota not yet counted (no status) shows 0 used.
func usageOf(q *corev1.ResourceQuota) []usageBar {
	if q == nil {
		return nil
	}
	var bars []usageBar
	for _, r := range quotaResources {
		hard, ok := q.Spec.Hard[r.quota]
		if !ok {
			continue
		}
		used := q.Status.Used[r.quota]
		bars = append(bars, usageBar{Resource: r.label, Used: used.String(), Hard: hard.String(), Percent: percent(used, hard)})
	}
	return bars
}

func percent(used, hard resource.Quantity) int {
	if hard.IsZero() {
		return 0
	}
	p := int(used.AsApproximateFloat64() / hard.AsApproximateFloat64() * 100)
	return max(0, min(p, 100))
}

// podsUsed is the tenant quota's pod count, or "-".
func podsUsed(q *corev1.ResourceQuota) string {
	if q == nil {
		return "-"
	}
	used := q.Status.Used[corev1.ResourcePods]
	return used.String()
}

// rowOf is the clusters-table row of vc; quota is its tenant quota, or nil.
func rowOf(vc *nestv1.VirtualCluster, quota *corev1.ResourceQuota, now time.Time) clusterRow {
	return clusterRow{
		Namespace: vc.Namespace, Name: vc.Name,
		Phase:    phaseOf(vc),
		Ready:    readyOf(vc),
		Version:  vcops.VersionColumn(vc),
		Endpoint: vc.Status.Endpoint,
		Age:      age(vc.CreationTimestamp, now),
		Deleting: vc.DeletionTimestamp != nil,
		Usage:    usageOf(quota),
		Pods:     podsUsed(quota),
	}
}

// rowsOf sorts the clusters by namespace and name and pairs each with its
// tenant quota from quotas (any order, any namespace).
func rowsOf(vcs []nestv1.VirtualCluster, quotas []corev1.ResourceQuota, now time.Time) []clusterRow {
	byKey := map[string]*corev1.ResourceQuota{}
	for i := range quotas {
		byKey[quotas[i].Namespace+"/"+quotas[i].Name] = &quotas[i]
	}
	rows := make([]clusterRow, 0, len(vcs))
	for i := range vcs {
		vc := &vcs[i]
		rows = append(rows, rowOf(vc, byKey[vc.Namespace+"/"+controlplane.NamesOf(vc).TenantQuota()], now))
	}
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].Namespace != rows[j].Namespace {
			return rows[i].Namespace < rows[j].Namespace
		}
		return rows[i].Name < rows[j].Name
	})
	return rows
}

// phaseOf is the phase, "Deleting" once deletion started, or "New" before
// the operator first wrote status.
func phaseOf(vc *nestv1.VirtualCluster) string {
	switch {
	case vc.DeletionTimestamp != nil:
		return string(nestv1.PhaseDeleting)
	case vc.Status.Phase == "":
		return "New"
	}
	return string(vc.Status.Phase)
}

func readyOf(vc *nestv1.VirtualCluster) string {
	if c := meta.FindStatusCondition(vc.Status.Conditions, nestv1.ConditionReady); c != nil {
		return string(c.Status)
	}
	return string(metav1.ConditionUnknown)
}

// age is kubectl's age format: 5s, 3m20s, 4h, 2d.
func age(t metav1.Time, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return duration.HumanDuration(now.Sub(t.Time))
}

// conditionRow is one condition of a VirtualCluster.
type conditionRow struct {
	Type, Status, Reason, Message, Since string
}

func conditionsOf(vc *nestv1.VirtualCluster, now time.Time) []conditionRow {
	rows := make([]conditionRow, 0, len(vc.Status.Conditions))
	for _, c := range vc.Status.Conditions {
		rows = append(rows, conditionRow{Type: c.Type, Status: string(c.Status), Reason: c.Reason, Message: c.Message, Since: age(c.LastTransitionTime, now)})
	}
	return rows
}

// eventRow is one Kubernetes Event about the VirtualCluster: its history.
type eventRow struct {
	Type, Reason, Message, Age string
	Count                      int32
}

// eventsOf keeps the events about vc, newest first, at most limit.
func eventsOf(events []corev1.Event, vc *nestv1.VirtualCluster, now time.Time, limit int) []eventRow {
	var mine []corev1.Event
	for _, e := range events {
		o := e.InvolvedObject
		if o.Kind == nestv1.VirtualClusterKind && o.Name == vc.Name && (o.UID == "" || o.UID == vc.UID) {
			mine = append(mine, e)
		}
	}
	sort.SliceStable(mine, func(i, j int) bool { return lastSeen(mine[i]).After(lastSeen(mine[j])) })
	rows := make([]eventRow, 0, min(len(mine), limit))
	for _, e := range mine[:min(len(mine), limit)] {
		rows = append(rows, eventRow{Type: e.Type, Reason: e.Reason, Message: e.Message, Age: age(metav1.NewTime(lastSeen(e)), now), Count: max(e.Count, 1)})
	}
	return rows
}

func lastSeen(e corev1.Event) time.Time {
	switch {
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}

// componentRow is one container of the control-plane pod.
type componentRow struct {
	Name     string
	Ready    bool
	State    string
	Restarts int32
}

// componentsOf reads the control-plane pod's container statuses, in the
// pod's order: sidecars (restartable init containers, such as etcd and the
// API server) first, then the containers. A nil pod (not created yet) gives
// none.
func componentsOf(pod *corev1.Pod) []componentRow {
	if pod == nil {
		return nil
	}
	byName := map[string]corev1.ContainerStatus{}
	for _, s := range append(pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses...) {
		byName[s.Name] = s
	}
	var containers []corev1.Container
	for _, c := range pod.Spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			containers = append(containers, c)
		}
	}
	containers = append(containers, pod.Spec.Containers...)
	rows := make([]componentRow, 0, len(containers))
	for _, c := range containers {
		s, ok := byName[c.Name]
		rows = append(rows, componentRow{Name: c.Name, Ready: s.Ready, State: stateOf(s, ok), Restarts: s.RestartCount})
	}
	return rows
}

func stateOf(s corev1.ContainerStatus, known bool) string {
	switch {
	case !known:
		return "Pending"
	case s.State.Running != nil:
		return "Running"
	case s.State.Waiting != nil:
		return "Waiting: " + s.State.Waiting.Reason
	case s.State.Terminated != nil:
		return "Terminated: " + s.State.Terminated.Reason
	}
	return "Unknown"
}

// hostPodRow is one tenant pod as it runs on the host.
type hostPodRow struct {
	HostName, TenantPod, Phase, Node, IP string
}

func hostPodsOf(pods []corev1.Pod) []hostPodRow {
	rows := make([]hostPodRow, 0, len(pods))
	for _, p := range pods {
		tenant := p.Annotations[contract.AnnotationTenantNamespace] + "/" + p.Annotations[contract.AnnotationTenantName]
		rows = append(rows, hostPodRow{HostName: p.Name, TenantPod: tenant, Phase: string(p.Status.Phase), Node: p.Spec.NodeName, IP: p.Status.PodIP})
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].TenantPod < rows[j].TenantPod })
	return rows
}

// shareForm is the share as the change-share form shows it: the spec's own
// values, blank where the default applies.
type shareForm struct {
	CPU, Memory, GPU, Pods string
}

func shareFormOf(vc *nestv1.VirtualCluster) shareForm {
	r := vc.Spec.PromoteResources.Resources
	get := func(n corev1.ResourceName) string {
		if q, ok := r[n]; ok {
			return q.String()
		}
		return ""
	}
	return shareForm{CPU: get(corev1.ResourceCPU), Memory: get(corev1.ResourceMemory), GPU: get(vcops.GPUResource), Pods: get(corev1.ResourcePods)}
}

// capacityOf is the virtual node's capacity: the share with its defaults,
// as "cpu 4, memory 8Gi, pods 110".
func capacityOf(vc *nestv1.VirtualCluster) string {
	return kube.FormatResourceList(controlplane.Share(vc), kube.ResourceListText)
}

// phases are the stages a new cluster passes, for the progress strip.
var phases = []string{string(nestv1.PhasePreparing), string(nestv1.PhaseInitialized), string(nestv1.PhaseCompleted)}

// progressStep is one stage of the progress strip.
type progressStep struct {
	Phase string
	// Done: passed; Current: the cluster is in it.
	Done, Current bool
}

func progressOf(vc *nestv1.VirtualCluster) []progressStep {
	current := phaseOf(vc)
	at := -1
	for i, p := range phases {
		if p == current {
			at = i
		}
	}
	steps := make([]progressStep, len(phases))
	for i, p := range phases {
		steps[i] = progressStep{Phase: p, Done: at >= 0 && i < at || current == string(nestv1.PhaseCompleted), Current: i == at}
	}
	return steps
}
