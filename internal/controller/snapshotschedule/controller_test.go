package snapshotschedule

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/google/go-containerregistry/pkg/name"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/snapshot"
	"github.com/nestdev/nest/internal/vcops"
)

// makeVC creates a VirtualCluster in a namespace of its own with the
// snapshot schedule s, and returns it as created.
func makeVC(t *testing.T, ctx context.Context, name string, s *nestv1.SnapshotSchedule) *nestv1.VirtualCluster {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "vc-" + name + "-"}}
	if err := host.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	vc := &nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns.Name}, Spec: nestv1.VirtualClusterSpec{Snapshots: s}}
	// The controller first sees it at the clock's time: the creation's,
	// to the second, as at counts from.
	testClock.SetTime(time.Now().Truncate(time.Second))
	if err := host.Create(ctx, vc); err != nil {
		t.Fatal(err)
	}
	vc.CreationTimestamp = metav1.Time{Time: testClock.Now()}
	if s != nil {
		// Seen before the test moves the clock: scheduled times count
		// from then (status.snapshots.since, applied with the condition).
		eventually(t, "the schedule seen", func() error {
			_, _, err := condOf(ctx, vc)
			return err
		})
	}
	t.Cleanup(func() { _ = host.Delete(context.Background(), vc) })
	return vc
}

// at sets the controller's clock to the VirtualCluster's creation plus d,
// and touches the VirtualCluster so the controller looks at it now.
// makeVC's VirtualCluster is first seen at its creation, on the clock.
func at(t *testing.T, ctx context.Context, vc *nestv1.VirtualCluster, d time.Duration) {
	t.Helper()
	testClock.SetTime(vc.CreationTimestamp.Add(d))
	patch := client.RawPatch("application/merge-patch+json", fmt.Appendf(nil, `{"metadata":{"annotations":{"test.nest.dev/now":"%d"}}}`, d))
	if err := host.Patch(ctx, vc.DeepCopy(), patch); err != nil {
		t.Fatal(err)
	}
}

func condOf(ctx context.Context, vc *nestv1.VirtualCluster) (*metav1.Condition, *nestv1.VirtualCluster, error) {
	got := &nestv1.VirtualCluster{}
	if err := host.Get(ctx, client.ObjectKeyFromObject(vc), got); err != nil {
		return nil, nil, err
	}
	c := meta.FindStatusCondition(got.Status.Conditions, nestv1.ConditionSnapshotsSucceeding)
	if c == nil {
		return nil, got, errors.New("no SnapshotsSucceeding condition")
	}
	return c, got, nil
}

func waitCondition(t *testing.T, ctx context.Context, vc *nestv1.VirtualCluster, status metav1.ConditionStatus, reason, message string) *nestv1.VirtualCluster {
	t.Helper()
	var got *nestv1.VirtualCluster
	eventually(t, "SnapshotsSucceeding "+string(status)+" "+reason, func() error {
		c, vc, err := condOf(ctx, vc)
		if err != nil {
			return err
		}
		got = vc
		if c.Status != status || c.Reason != reason || !strings.Contains(c.Message, message) {
			return fmt.Errorf("condition %s %s: %s", c.Status, c.Reason, c.Message)
		}
		return nil
	})
	return got
}

func repoTags(t *testing.T, ctx context.Context, repo string, vc *nestv1.VirtualCluster) []string {
	t.Helper()
	r, err := name.NewRepository(reg + "/" + repo)
	if err != nil {
		t.Fatal(err)
	}
	listed, err := snapshot.List(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range listed {
		if l.Manifest.VirtualCluster == vc.Name && l.Manifest.Namespace == vc.Namespace {
			out = append(out, l.Tag)
		}
	}
	return out
}

// Every minute with keep 2: each scheduled time gives one snapshot tagged
// with it, and only the newest two scheduled ones stay; a snapshot the
// schedule did not take is never deleted.
func TestAScheduleKeepsTheNewestSnapshots(t *testing.T) {
	ctx := context.Background()
	vc := makeVC(t, ctx, "keep", &nestv1.SnapshotSchedule{Schedule: "* * * * *", To: "oci://" + reg + "/backups/keep", Keep: 2, InsecurePlaintextKeys: true, IncludeVolumes: true})
	waitCondition(t, ctx, vc, metav1.ConditionTrue, ReasonWaiting, "")
	manual, _ := snapshot.ParseLocation("oci://"+reg+"/backups/keep:manual", false)
	if _, err := manual.Save(ctx, t.TempDir(), func(w io.Writer) (snapshot.Manifest, error) {
		return takes.take(ctx, client.ObjectKeyFromObject(vc), w, nil, false)
	}); err != nil {
		t.Fatal(err)
	}
	var want []string
	for i := 1; i <= 4; i++ {
		at(t, ctx, vc, time.Duration(i)*time.Minute)
		due := vc.CreationTimestamp.Add(time.Duration(i) * time.Minute).Truncate(time.Minute)
		tag := strings.TrimPrefix(TagURL("oci://x/y", client.ObjectKeyFromObject(vc), due), "oci://x/y:")
		want = append(want, tag)
		got := waitCondition(t, ctx, vc, metav1.ConditionTrue, ReasonSnapshotTaken, tag)
		if st := got.Status.Snapshots; st == nil || st.LastSnapshot == nil || !st.LastScheduleTime.Time.Equal(due) ||
			!strings.HasSuffix(st.LastSnapshot.URL, ":"+tag) || !strings.HasPrefix(st.LastSnapshot.Digest, "sha256:") || st.LastSnapshot.Size == 0 {
			t.Fatalf("after the snapshot of %s: status.snapshots %+v", due, got.Status.Snapshots)
		}
	}
	takes.mu.Lock()
	if !takes.withVolumes["keep"] {
		t.Error("the scheduled snapshots were not asked to include volumes (spec.snapshots.includeVolumes)")
	}
	takes.mu.Unlock()
	tags := repoTags(t, ctx, "backups/keep", vc)
	if got, wantTags := strings.Join(tags, " "), "manual "+strings.Join(want[2:], " "); got != wantTags {
		t.Errorf("the repository holds %q, want %q: the newest 2 scheduled and the manual one", got, wantTags)
	}
	if _, got, _ := condOf(ctx, vc); got.Status.Snapshots.Kept != 2 {
		t.Errorf("status.snapshots.kept %d, want 2", got.Status.Snapshots.Kept)
	}
}

// A schedule that does not parse is a False condition naming the field,
// and nothing is pushed.
func TestAnInvalidScheduleIsRefusedByName(t *testing.T) {
	ctx := context.Background()
	vc := makeVC(t, ctx, "badcron", &nestv1.SnapshotSchedule{Schedule: "every minute", To: "oci://" + reg + "/backups/badcron", InsecurePlaintextKeys: true})
	at(t, ctx, vc, 2*time.Minute)
	waitCondition(t, ctx, vc, metav1.ConditionFalse, ReasonInvalidSchedule, "spec.snapshots.schedule")
	if tags := repoTagsOrNone(ctx, "backups/badcron"); len(tags) != 0 {
		t.Errorf("an invalid schedule pushed %v", tags)
	}
	// Fixed, it no longer says so, although nothing is due yet.
	if err := host.Patch(ctx, vc.DeepCopy(), client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"snapshots":{"schedule":"@yearly"}}}`))); err != nil {
		t.Fatal(err)
	}
	waitCondition(t, ctx, vc, metav1.ConditionTrue, ReasonWaiting, "")
}

// Without its recipient Secret the schedule fails by name; with it, the
// snapshot is sealed to its recipients.
func TestRecipientsComeFromTheNamedSecret(t *testing.T) {
	ctx := context.Background()
	vc := makeVC(t, ctx, "sealed", &nestv1.SnapshotSchedule{Schedule: "@hourly", To: "oci://" + reg + "/backups/sealed",
		RecipientSecretRef: &corev1.LocalObjectReference{Name: "backup-recipients"}})
	at(t, ctx, vc, time.Hour)
	waitCondition(t, ctx, vc, metav1.ConditionFalse, ReasonNoRecipients, "backup-recipients")
	id, _ := age.GenerateX25519Identity()
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: vc.Namespace, Name: "backup-recipients"},
		StringData: map[string]string{nestv1.RecipientsKey: "# backups\n" + id.Recipient().String() + "\n"}}
	if err := host.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	before := takes.sealedCount()
	at(t, ctx, vc, time.Hour+time.Second)
	waitCondition(t, ctx, vc, metav1.ConditionTrue, ReasonSnapshotTaken, "")
	if takes.sealedCount() != before+1 {
		t.Error("the snapshot was not taken with the Secret's recipient")
	}
}

// A failed snapshot is a False condition and is tried again: the
// scheduled time is not passed over.
func TestAFailedSnapshotIsRetried(t *testing.T) {
	ctx := context.Background()
	vc := makeVC(t, ctx, "retry", &nestv1.SnapshotSchedule{Schedule: "@hourly", To: "oci://" + reg + "/backups/retry", InsecurePlaintextKeys: true})
	takes.failWith(errors.New("no etcd member of retry gave a snapshot"))
	t.Cleanup(func() { takes.failWith(nil) })
	at(t, ctx, vc, time.Hour)
	got := waitCondition(t, ctx, vc, metav1.ConditionFalse, ReasonSnapshotFailed, "no etcd member")
	if got.Status.Snapshots != nil && got.Status.Snapshots.LastScheduleTime != nil {
		t.Errorf("a failed snapshot recorded lastScheduleTime %s", got.Status.Snapshots.LastScheduleTime)
	}
	takes.failWith(nil)
	at(t, ctx, vc, time.Hour+time.Second)
	waitCondition(t, ctx, vc, metav1.ConditionTrue, ReasonSnapshotTaken, "")
}

// Without spec.snapshots the condition and status.snapshots go.
func TestRemovingTheScheduleClearsItsStatus(t *testing.T) {
	ctx := context.Background()
	vc := makeVC(t, ctx, "off", &nestv1.SnapshotSchedule{Schedule: "@hourly", To: "oci://" + reg + "/backups/off", InsecurePlaintextKeys: true})
	at(t, ctx, vc, time.Hour)
	waitCondition(t, ctx, vc, metav1.ConditionTrue, ReasonSnapshotTaken, "")
	if err := host.Patch(ctx, vc.DeepCopy(), client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"snapshots":null}}`))); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the condition and status.snapshots removed", func() error {
		c, got, err := condOf(ctx, vc)
		if c != nil || got == nil || got.Status.Snapshots != nil {
			return fmt.Errorf("condition %v, status.snapshots %+v (%v)", c, got.Status.Snapshots, err)
		}
		return nil
	})
}

// The API refuses a schedule it could not honour, naming the fix.
func TestTheAPIRefusesSchedulesItCannotHonour(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		s    nestv1.SnapshotSchedule
		want string
	}{
		{nestv1.SnapshotSchedule{Schedule: "@daily", To: "file:///var/backups"}, "file:// is refused"},
		{nestv1.SnapshotSchedule{Schedule: "@daily", To: "oci://registry.example/backups:latest", InsecurePlaintextKeys: true}, "without a tag"},
		{nestv1.SnapshotSchedule{Schedule: "@daily", To: "oci://registry.example/backups"}, "recipientSecretRef"},
		{nestv1.SnapshotSchedule{Schedule: "@daily", To: "oci://registry.example/backups", InsecurePlaintextKeys: true, Keep: 101}, "keep"},
		{nestv1.SnapshotSchedule{Schedule: "@daily", To: "oci://registry.example/backups@sha256:0123", InsecurePlaintextKeys: true}, "without a tag or digest"},
		{nestv1.SnapshotSchedule{Schedule: "@daily", To: "oci://registry.example", InsecurePlaintextKeys: true}, "without a tag or digest"},
		{nestv1.SnapshotSchedule{Schedule: "@daily", To: "oci://registry.example/Backups", InsecurePlaintextKeys: true}, "in lower case"},
	} {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "vc-refused-"}}
		if err := host.Create(ctx, ns); err != nil {
			t.Fatal(err)
		}
		vc := &nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: "refused", Namespace: ns.Name}, Spec: nestv1.VirtualClusterSpec{Snapshots: &tc.s}}
		if err := host.Create(ctx, vc); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("spec.snapshots %+v: %v, want refused naming %q", tc.s, err, tc.want)
		}
	}
	// Volumes are copied by a root pod, which the restricted level forbids.
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "vc-refused-"}}
	if err := host.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	restricted := &nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: "restricted", Namespace: ns.Name}, Spec: nestv1.VirtualClusterSpec{
		Snapshots:   &nestv1.SnapshotSchedule{Schedule: "@daily", To: "oci://registry.example/backups", InsecurePlaintextKeys: true, IncludeVolumes: true},
		VirtualNode: nestv1.VirtualNodeSpec{PodSecurityLevel: nestv1.PodSecurityRestricted},
	}}
	if err := host.Create(ctx, restricted); err == nil || !strings.Contains(err.Error(), "includeVolumes") {
		t.Errorf("includeVolumes on a restricted tenant: %v, want refused naming includeVolumes", err)
	}
	ok := nestv1.SnapshotSchedule{Schedule: "@daily", To: "oci://registry.example:5000/backups/team-a", InsecurePlaintextKeys: true, IncludeVolumes: true}
	vc := makeVC(t, ctx, "accepted", &ok)
	got := &nestv1.VirtualCluster{}
	if err := host.Get(ctx, client.ObjectKeyFromObject(vc), got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.Snapshots.Keep != nestv1.DefaultSnapshotKeep {
		t.Errorf("keep defaults to %d, nestv1.DefaultSnapshotKeep is %d", got.Spec.Snapshots.Keep, nestv1.DefaultSnapshotKeep)
	}
}

func repoTagsOrNone(ctx context.Context, repo string) []string {
	r, err := name.NewRepository(reg + "/" + repo)
	if err != nil {
		return nil
	}
	listed, err := snapshot.List(ctx, r)
	if err != nil {
		return nil
	}
	var out []string
	for _, l := range listed {
		out = append(out, l.Tag)
	}
	return out
}

// A request (nest.dev/snapshot-requested) is served once, outside the
// schedule: one snapshot, lastRequest set, lastScheduleTime untouched.
func TestARequestIsServedOnce(t *testing.T) {
	ctx := context.Background()
	vc := makeVC(t, ctx, "request", &nestv1.SnapshotSchedule{Schedule: "@daily", To: "oci://" + reg + "/backups/request", InsecurePlaintextKeys: true})
	at(t, ctx, vc, time.Minute)
	waitCondition(t, ctx, vc, metav1.ConditionTrue, ReasonWaiting, "")
	if _, err := vcops.RequestSnapshot(ctx, host, client.ObjectKeyFromObject(vc), time.Unix(1800000000, 0)); err != nil {
		t.Fatal(err)
	}
	got := waitCondition(t, ctx, vc, metav1.ConditionTrue, ReasonSnapshotTaken, "")
	if st := got.Status.Snapshots; st.LastRequest != "2027-01-15T08:00:00Z" || st.LastScheduleTime != nil {
		t.Errorf("status.snapshots after a request: %+v", st)
	}
	// The same request seen again takes nothing: a second request, at
	// another time, makes the second snapshot.
	at(t, ctx, vc, 2*time.Minute)
	testClock.SetTime(vc.CreationTimestamp.Add(3 * time.Minute))
	if _, err := vcops.RequestSnapshot(ctx, host, client.ObjectKeyFromObject(vc), time.Unix(1800000060, 0)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the second request served", func() error {
		_, got, err := condOf(ctx, vc)
		if err != nil {
			return err
		}
		if got.Status.Snapshots.LastRequest != "2027-01-15T08:01:00Z" {
			return fmt.Errorf("lastRequest %q", got.Status.Snapshots.LastRequest)
		}
		return nil
	})
	if tags := repoTags(t, ctx, "backups/request", vc); len(tags) != 2 {
		t.Errorf("two requests made snapshots %v, want two", tags)
	}
	// A value status.snapshots.lastRequest cannot hold is refused, not
	// served over and over.
	long := client.RawPatch("application/merge-patch+json", fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, nestv1.AnnotationSnapshotRequested, strings.Repeat("x", MaxRequestLength+1)))
	if err := host.Patch(ctx, vc.DeepCopy(), long); err != nil {
		t.Fatal(err)
	}
	waitCondition(t, ctx, vc, metav1.ConditionFalse, ReasonInvalidRequest, nestv1.AnnotationSnapshotRequested)
	if tags := repoTags(t, ctx, "backups/request", vc); len(tags) != 2 {
		t.Errorf("a refused request made snapshots: %v", tags)
	}
	plain := makeVC(t, ctx, "noschedule", nil)
	if _, err := vcops.RequestSnapshot(ctx, host, client.ObjectKeyFromObject(plain), time.Now()); err == nil || !strings.Contains(err.Error(), "set spec.snapshots") {
		t.Errorf("a request without a schedule: %v, want refused naming spec.snapshots", err)
	}
}
