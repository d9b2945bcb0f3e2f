package dashboard

import (
	"context"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/registry"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/snapshot"
)

// pushSnapshot pushes a small snapshot of vc taken at testNow to url.
func pushSnapshot(t *testing.T, vc *nestv1.VirtualCluster, url string) {
	t.Helper()
	etcd := filepath.Join(t.TempDir(), "etcd.db")
	if err := os.WriteFile(etcd, []byte("etcd"), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := snapshot.ParseLocation(url, false)
	if err != nil {
		t.Fatal(err)
	}
	m := snapshot.Manifest{Namespace: vc.Namespace, VirtualCluster: vc.Name, Created: testNow, EtcdRevision: 1234}
	if _, err := l.Save(context.Background(), t.TempDir(), func(w io.Writer) (snapshot.Manifest, error) {
		return snapshot.Write(w, m, snapshot.Contents{VirtualCluster: []byte("{}"), PKI: map[string][]byte{}, EtcdPath: etcd}, nil, true)
	}); err != nil {
		t.Fatal(err)
	}
}

// A scheduled cluster's page lists its snapshots from the repository and
// the schedule's outcome; "Snapshot now" asks for one as the user. A
// cluster without a schedule says how to take one and refuses the form.
func TestSnapshotsCardListsAndRequests(t *testing.T) {
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	repo := "oci://" + strings.TrimPrefix(srv.URL, "http://") + "/backups/a"
	vc := vcFixture("vc-a", "a", nestv1.PhaseCompleted, metav1.ConditionTrue)
	vc.Spec.Snapshots = &nestv1.SnapshotSchedule{Schedule: "0 3 * * *", To: repo, Keep: 7, InsecurePlaintextKeys: true}
	vc.Status.Conditions = append(vc.Status.Conditions, metav1.Condition{Type: nestv1.ConditionSnapshotsSucceeding, Status: metav1.ConditionTrue,
		Reason: "SnapshotTaken", Message: repo + ":auto-20261123t030000z taken", LastTransitionTime: metav1.NewTime(testNow)})
	pushSnapshot(t, vc, repo+":auto-20261123t030000z")
	pushSnapshot(t, &nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "vc-b", Name: "b"}}, repo+":of-another-cluster")
	plain := vcFixture("vc-c", "c", nestv1.PhaseCompleted, metav1.ConditionTrue)
	c := newFake(vc, plain).Build()
	h := testServer(t, c)

	page := do(t, h, "GET", "/clusters/vc-a/a", nil).Body.String()
	if !strings.Contains(page, "auto-20261123t030000z") || strings.Contains(page, "of-another-cluster") {
		t.Errorf("the snapshots card does not list exactly a's snapshot:\n%s", page)
	}
	if got := elementText(t, page, "snapshot-outcome"); !strings.Contains(got, "SnapshotTaken") {
		t.Errorf("the schedule's outcome reads %q", got)
	}
	if w := do(t, h, "POST", "/clusters/vc-a/a/snapshot", nil); w.Code != http.StatusSeeOther {
		t.Fatalf("snapshot now = %d\n%s", w.Code, w.Body)
	}
	got := &nestv1.VirtualCluster{}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(vc), got); err != nil {
		t.Fatal(err)
	}
	if got.Annotations[nestv1.AnnotationSnapshotRequested] == "" {
		t.Error("snapshot now did not ask nest-manager (no nest.dev/snapshot-requested)")
	}
	if page := do(t, h, "GET", "/clusters/vc-a/a", nil).Body.String(); !strings.Contains(page, `id="snapshot-pending"`) {
		t.Error("the page does not say the asked-for snapshot is pending")
	}

	if page := do(t, h, "GET", "/clusters/vc-c/c", nil).Body.String(); !strings.Contains(elementText(t, page, "snapshot-none"), "No schedule") {
		t.Error("a cluster without a schedule is not told how to take a snapshot")
	}
	w := do(t, h, "POST", "/clusters/vc-c/c/snapshot", nil)
	if w.Code != http.StatusUnprocessableEntity || !strings.Contains(elementText(t, w.Body.String(), "snapshot-error"), "set spec.snapshots") {
		t.Errorf("snapshot now without a schedule = %d\n%s", w.Code, w.Body)
	}
}
