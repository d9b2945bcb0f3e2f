package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/controller/snapshotschedule"
	"github.com/nestdev/nest/internal/devcluster"
	"github.com/nestdev/nest/internal/snapshot"
	"github.com/nestdev/nest/internal/testutil"
	"github.com/nestdev/nest/test/e2e/framework"
)

// checkSnapshotSchedule: snapshots of tn pushed by hand to the local host
// cluster's registry verify from there with their identity; a schedule of
// every minute with keep 2, sealed to the recipients of a Secret, then
// takes a snapshot at each of two minutes and leaves exactly the newest 2
// scheduled ones (an older scheduled one pushed by hand is deleted, one
// not tagged auto- is kept), and nest snapshot list shows them. Removing
// the schedule clears its condition.
func checkSnapshotSchedule(t *testing.T, ctx context.Context, host client.Client, nest framework.Nest, tn *framework.Tenant) {
	t.Helper()
	reg, err := devcluster.RegistryAddressIn(ctx, host)
	if err != nil {
		t.Fatal(err)
	}
	// The registry's address is in 198.18.0.0/15, neither loopback nor
	// RFC 1918: plain HTTP is asked for.
	repo := "oci://" + reg + "/e2e/" + tn.Name
	dir := t.TempDir()
	id := newAgeIdentity(t, dir, "id")
	old, manual := snapshotschedule.TagPrefix+"20200101t000000z", "before-the-schedule"
	for _, tag := range []string{old, manual} {
		if out, err := nest("snapshot", "create", tn.Name, "--to", repo+":"+tag, "--plain-http", "--recipient", id.Recipient().String()); err != nil {
			t.Fatalf("snapshot create to %s:%s: %v\n%s", repo, tag, err, out)
		}
	}
	if out, err := nest("snapshot", "verify", "--from", repo+":"+manual, "--plain-http", "--identity", filepath.Join(dir, "id")); err != nil || !strings.Contains(out, "keys: decrypted") {
		t.Errorf("verify from the registry: %v\n%s", err, out)
	}

	key := types.NamespacedName{Namespace: tn.Namespace, Name: tn.Name}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: tn.Name + "-backup-recipients"},
		StringData: map[string]string{nestv1.RecipientsKey: id.Recipient().String() + "\n"}}
	if err := host.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	setSchedule(t, ctx, host, key, &nestv1.SnapshotSchedule{Schedule: "* * * * *", To: repo, Keep: 2, PlainHTTP: true,
		RecipientSecretRef: &corev1.LocalObjectReference{Name: secret.Name}})
	defer setSchedule(t, ctx, host, key, nil)

	var times []time.Time
	testutil.Eventually(t, 4*time.Minute, "two scheduled snapshots, a minute apart", func() error {
		vc := &nestv1.VirtualCluster{}
		if err := host.Get(ctx, key, vc); err != nil {
			return err
		}
		c := meta.FindStatusCondition(vc.Status.Conditions, nestv1.ConditionSnapshotsSucceeding)
		if c != nil && c.Status == metav1.ConditionFalse {
			t.Fatalf("the schedule failed: %s: %s", c.Reason, c.Message)
		}
		if st := vc.Status.Snapshots; st != nil && st.LastScheduleTime != nil && (len(times) == 0 || !st.LastScheduleTime.Equal(&metav1.Time{Time: times[len(times)-1]})) {
			times = append(times, st.LastScheduleTime.Time)
		}
		if len(times) < 2 {
			return fmt.Errorf("scheduled snapshots at %v", times)
		}
		return nil
	})
	want := []string{manual}
	for _, at := range times[len(times)-2:] {
		want = append(want, strings.TrimPrefix(snapshotschedule.TagURL(repo, key, at), repo+":"))
	}
	newest := want[len(want)-1]
	r, err := name.NewRepository(strings.TrimPrefix(repo, "oci://"), name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	listed, err := snapshot.List(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, l := range listed {
		got = append(got, l.Tag)
		if strings.HasPrefix(l.Tag, snapshotschedule.TagPrefix) && l.Tag != old && l.Manifest.EtcdRevision == 0 {
			t.Errorf("scheduled snapshot %s has no etcd revision", l.Tag)
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("the repository holds %v, want %v: the snapshot made before the schedule and its newest 2", got, want)
	}
	out, err := nest("snapshot", "list", tn.Name)
	if err != nil || !strings.Contains(out, newest) || !strings.Contains(out, snapshotschedule.ReasonSnapshotTaken) {
		t.Errorf("nest snapshot list: %v\n%s", err, out)
	}
	t.Logf("nest snapshot list %s:\n%s", tn.Name, out)
}

// setSchedule sets spec.snapshots of the VirtualCluster key (nil removes
// it) and, removing it, waits until its condition is gone.
func setSchedule(t *testing.T, ctx context.Context, host client.Client, key types.NamespacedName, s *nestv1.SnapshotSchedule) {
	t.Helper()
	vc := &nestv1.VirtualCluster{}
	if err := host.Get(ctx, key, vc); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(vc.DeepCopy())
	vc.Spec.Snapshots = s
	if err := host.Patch(ctx, vc, patch); err != nil {
		t.Fatal(err)
	}
	if s != nil {
		return
	}
	testutil.Eventually(t, time.Minute, "the SnapshotsSucceeding condition gone with the schedule", func() error {
		if err := host.Get(ctx, key, vc); err != nil {
			return err
		}
		if c := meta.FindStatusCondition(vc.Status.Conditions, nestv1.ConditionSnapshotsSucceeding); c != nil {
			return fmt.Errorf("condition %s %s", c.Status, c.Reason)
		}
		return nil
	})
}
