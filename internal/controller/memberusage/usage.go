package memberusage

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	resourcehelper "k8s.io/component-helpers/resource"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/syncer/contract"
)

// GPUResource is the resource counted as GPU-hours.
const GPUResource corev1.ResourceName = "nvidia.com/gpu"

// Record is the usage of one member pod: who it ran for, what it
// requested, and from when to when.
type Record struct {
	// Member is the MemberCluster the pod ran in.
	Member string `json:"member"`
	// Namespace, Name and TenantUID are the tenant pod's, from the member
	// pod's annotations.
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	TenantUID string `json:"tenantUID,omitempty"`
	// PodUID is the member pod's UID: the record's identity, so a member
	// pod made again for the same tenant pod is a new record.
	PodUID string `json:"podUID"`
	// Requests are the pod's requests as the scheduler counts them (init
	// containers, sidecars, overhead): cpu, memory, nvidia.com/gpu and
	// any other extended resource.
	Requests corev1.ResourceList `json:"requests,omitempty"`
	// Start is the pod's status.startTime.
	Start time.Time `json:"start"`
	// End is when the pod ended: the latest finishedAt of its containers
	// once it Succeeded or Failed, or LastSeen when it disappeared while
	// running. Unset while it runs.
	End *time.Time `json:"end,omitempty"`
	// LastSeen is when the pod was last listed running; a running pod is
	// counted up to it.
	LastSeen time.Time `json:"lastSeen"`
}

// Totals are usage summed over pods.
type Totals struct {
	Pods       int64   `json:"pods"`
	CPUSeconds float64 `json:"cpuSeconds"`
	GPUSeconds float64 `json:"gpuSeconds"`
	// Since is the earliest start; nil with no pods.
	Since *time.Time `json:"since,omitempty"`
	// Until, in Book.Dropped only, is the latest end of the dropped
	// records. A finished pod that ended by then and is not recorded was
	// dropped: finished pods stay in the member until its garbage
	// collector deletes them, and must not be recorded again.
	Until *time.Time `json:"until,omitempty"`
}

// Book is what the usage ConfigMap holds under RecordsKey.
type Book struct {
	// Records are the pods recorded, sorted by member, start and UID.
	Records []Record `json:"records"`
	// Dropped are, per member, the totals of finished records dropped to
	// keep the ConfigMap bounded: they stay counted in the summary.
	Dropped map[string]Totals `json:"dropped,omitempty"`
}

// parseBook reads a ConfigMap's RecordsKey; empty data is an empty book.
func parseBook(data string) (Book, error) {
	var b Book
	if data == "" {
		return b, nil
	}
	if err := json.Unmarshal([]byte(data), &b); err != nil {
		return Book{}, fmt.Errorf("%s: %w", RecordsKey, err)
	}
	return b, nil
}

// marshal renders b with records sorted, so an unchanged book writes the
// same bytes.
func (b Book) marshal() (string, error) {
	b.Records = slices.Clone(b.Records)
	sortRecords(b.Records)
	data, err := json.Marshal(b)
	return string(data), err
}

func sortRecords(rs []Record) {
	slices.SortFunc(rs, func(a, b Record) int {
		return cmp.Or(cmp.Compare(a.Member, b.Member), a.Start.Compare(b.Start), cmp.Compare(a.PodUID, b.PodUID))
	})
}

// podRecord is the record of a member pod as listed at now, and false for
// a pod that is not a tenant pod (no tenant annotations) or has not started.
func podRecord(member string, pod *corev1.Pod, now time.Time) (Record, bool) {
	ns, name, ok := contract.TenantKey(pod.Annotations)
	if !ok || pod.Status.StartTime == nil {
		return Record{}, false
	}
	r := Record{
		Member: member, Namespace: ns, Name: name, TenantUID: pod.Annotations[contract.AnnotationTenantUID],
		PodUID: string(pod.UID), Requests: resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{}),
		Start: pod.Status.StartTime.UTC(), LastSeen: now.UTC(),
	}
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		end := finishedAt(pod)
		if end.IsZero() || end.After(now) {
			end = now.UTC()
		}
		r.End, r.LastSeen = &end, end
	}
	return r, true
}

// finishedAt is the latest finishedAt of the pod's terminated containers,
// init and ephemeral ones included; zero when none says.
func finishedAt(pod *corev1.Pod) time.Time {
	var end time.Time
	for _, list := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses, pod.Status.EphemeralContainerStatuses} {
		for _, cs := range list {
			if t := cs.State.Terminated; t != nil && t.FinishedAt.After(end) {
				end = t.FinishedAt.UTC()
			}
		}
	}
	return end
}

// usage is what the record counts: each request times the time from
// Start to End, or to LastSeen while the pod runs; never negative.
func (r Record) usage() (cpuSeconds, gpuSeconds float64) {
	until := r.LastSeen
	if r.End != nil {
		until = *r.End
	}
	secs := until.Sub(r.Start).Seconds()
	if secs <= 0 {
		return 0, 0
	}
	return secs * milli(r.Requests, corev1.ResourceCPU) / 1000, secs * milli(r.Requests, GPUResource) / 1000
}

func milli(l corev1.ResourceList, name corev1.ResourceName) float64 {
	q, ok := l[name]
	if !ok {
		return 0
	}
	return float64(q.MilliValue())
}

// merge records what was listed at now into b and returns the new book.
// listed has the records of the pods of each member whose pods were
// listed; members missing from it (not reachable, or no longer granted)
// keep their records as they were, counted up to when last seen.
//   - A record already finished is kept as it is: a finished pod is
//     never counted twice, nor recounted if its status changes.
//   - A running record takes the listing: its LastSeen moves to now, or
//     its End is set when the pod finished.
//   - A running record whose pod is gone from a listed member is closed
//     at LastSeen, the last time it was seen running.
//   - A finished pod that ended by the member's Dropped.Until and is not
//     recorded was dropped by bound: it is not recorded again.
func merge(b Book, listed map[string][]Record) Book {
	out := Book{Dropped: maps.Clone(b.Dropped)}
	known := map[string]bool{}
	for _, old := range b.Records {
		known[old.PodUID] = true
		pods, ok := listed[old.Member]
		if !ok || old.End != nil {
			out.Records = append(out.Records, old)
			continue
		}
		i := slices.IndexFunc(pods, func(r Record) bool { return r.PodUID == old.PodUID })
		if i < 0 {
			end := old.LastSeen
			old.End = &end
			out.Records = append(out.Records, old)
			continue
		}
		cur := pods[i]
		cur.Start = old.Start // as first recorded
		out.Records = append(out.Records, cur)
	}
	for _, member := range slices.Sorted(maps.Keys(listed)) {
		until := b.Dropped[member].Until
		for _, r := range listed[member] {
			dropped := r.End != nil && until != nil && !r.End.After(*until)
			if !known[r.PodUID] && !dropped {
				out.Records = append(out.Records, r)
			}
		}
	}
	sortRecords(out.Records)
	return out
}

// bound keeps at most max finished records, dropping the oldest finished
// (earliest End) first into Dropped so their usage stays counted.
// Running records are never dropped: they are still counting, and a
// grant's quota bounds how many run.
func bound(b Book, max int) Book {
	var finished []int
	for i, r := range b.Records {
		if r.End != nil {
			finished = append(finished, i)
		}
	}
	excess := len(finished) - max
	if excess <= 0 {
		return b
	}
	slices.SortStableFunc(finished, func(i, j int) int { return b.Records[i].End.Compare(*b.Records[j].End) })
	drop := map[int]bool{}
	for _, i := range finished[:excess] {
		drop[i] = true
	}
	out := Book{Dropped: maps.Clone(b.Dropped)}
	if out.Dropped == nil {
		out.Dropped = map[string]Totals{}
	}
	for i, r := range b.Records {
		if !drop[i] {
			out.Records = append(out.Records, r)
			continue
		}
		d := out.Dropped[r.Member].add(r)
		if d.Until == nil || r.End.After(*d.Until) {
			end := *r.End
			d.Until = &end
		}
		out.Dropped[r.Member] = d
	}
	return out
}

// add counts r into t.
func (t Totals) add(r Record) Totals {
	cpu, gpu := r.usage()
	t.Pods++
	t.CPUSeconds += cpu
	t.GPUSeconds += gpu
	if t.Since == nil || r.Start.Before(*t.Since) {
		s := r.Start
		t.Since = &s
	}
	return t
}

// plus sums two totals.
func (t Totals) plus(o Totals) Totals {
	t.Pods += o.Pods
	t.CPUSeconds += o.CPUSeconds
	t.GPUSeconds += o.GPUSeconds
	if o.Since != nil && (t.Since == nil || o.Since.Before(*t.Since)) {
		s := *o.Since
		t.Since = &s
	}
	return t
}

// Summary is one member's totals and how many of its pods run.
type Summary struct {
	Totals
	Running int64
}

// summarize sums b per member: the dropped totals and every record.
func summarize(b Book) map[string]Summary {
	out := map[string]Summary{}
	for m, t := range b.Dropped {
		out[m] = Summary{Totals: Totals{}.plus(t)}
	}
	for _, r := range b.Records {
		s := out[r.Member]
		s.Totals = s.Totals.add(r)
		if r.End == nil {
			s.Running++
		}
		out[r.Member] = s
	}
	return out
}

// hours renders seconds as hours with three decimals.
func hours(seconds float64) string {
	return strconv.FormatFloat(seconds/3600, 'f', 3, 64)
}

// usageStatus is status.memberUsage: one entry per member that has a
// summary or was to be listed, sorted by name. messages holds why a
// member's pods could not be listed; listedAt when each was listed.
func usageStatus(sums map[string]Summary, messages map[string]string, listedAt map[string]time.Time, old []nestv1.MemberUsageStatus) []nestv1.MemberUsageStatus {
	names := map[string]bool{}
	for m := range sums {
		names[m] = true
	}
	for m := range messages {
		names[m] = true
	}
	prev := map[string]nestv1.MemberUsageStatus{}
	for _, st := range old {
		prev[st.Name] = st
	}
	var out []nestv1.MemberUsageStatus
	for _, m := range slices.Sorted(maps.Keys(names)) {
		s := sums[m]
		st := nestv1.MemberUsageStatus{
			Name: m, GPUHours: hours(s.GPUSeconds), CPUHours: hours(s.CPUSeconds),
			Pods: s.Pods, Running: s.Running, Message: messages[m], LastUpdated: prev[m].LastUpdated,
		}
		if s.Since != nil {
			t := metav1.NewTime(*s.Since)
			st.Since = &t
		}
		if at, ok := listedAt[m]; ok {
			t := metav1.NewTime(at)
			st.LastUpdated = &t
		}
		out = append(out, st)
	}
	// The API bounds the list; the members of the most usage stay.
	if len(out) > maxStatusEntries {
		slices.SortStableFunc(out, func(a, b nestv1.MemberUsageStatus) int {
			return cmp.Compare(sums[b.Name].CPUSeconds, sums[a.Name].CPUSeconds)
		})
		out = out[:maxStatusEntries]
		slices.SortFunc(out, func(a, b nestv1.MemberUsageStatus) int { return cmp.Compare(a.Name, b.Name) })
	}
	return out
}

// maxStatusEntries is status.memberUsage's MaxItems.
const maxStatusEntries = 16
