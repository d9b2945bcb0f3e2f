package dashboard

import (
	"cmp"
	"context"
	"strings"
	"time"

	"github.com/dustin/go-humanize"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/controller/snapshotschedule"
	"github.com/nestdev/nest/internal/snapshot"
)

// snapshotsCard is a cluster's snapshots: its schedule (spec.snapshots),
// how the schedule stands, and the snapshots of the cluster in the
// schedule's repository, newest first.
type snapshotsCard struct {
	// Scheduled is false without spec.snapshots: the card says how to
	// take one, and offers no "Snapshot now".
	Scheduled bool
	Schedule  string
	To        string
	Keep      int32
	// Status is the SnapshotsSucceeding condition's, "" before it.
	Status, Reason, Message string
	// Pending is true while a request is not served yet.
	Pending bool
	List    []snapshotRow
	// ListError says why the repository could not be read.
	ListError string
	// Error is the "Snapshot now" form's error.
	Error string
}

// snapshotRow is one snapshot of the cluster in the repository.
type snapshotRow struct {
	Tag, Taken, Size, Digest string
	Revision                 int64
	Scheduled                bool
}

// snapshotListTimeout bounds the read of a schedule's repository for a
// page: a slow registry leaves the list out, not the page.
const snapshotListTimeout = 5 * time.Second

// snapshotsOf reads vc's snapshots card; the repository is read by the
// dashboard itself (the registry's own access rules apply, with the
// dashboard's Docker config), not as the user.
func (s *Server) snapshotsOf(ctx context.Context, vc *nestv1.VirtualCluster) snapshotsCard {
	sched := vc.Spec.Snapshots
	if sched == nil {
		return snapshotsCard{}
	}
	card := snapshotsCard{Scheduled: true, Schedule: sched.Schedule, To: sched.To, Keep: cmp.Or(sched.Keep, nestv1.DefaultSnapshotKeep)}
	if c := meta.FindStatusCondition(vc.Status.Conditions, nestv1.ConditionSnapshotsSucceeding); c != nil {
		card.Status, card.Reason, card.Message = string(c.Status), c.Reason, c.Message
	}
	req := vc.Annotations[nestv1.AnnotationSnapshotRequested]
	card.Pending = req != "" && (vc.Status.Snapshots == nil || vc.Status.Snapshots.LastRequest != req)
	repo, err := snapshot.ParseRepository(sched.To, sched.PlainHTTP)
	if err != nil {
		card.ListError = err.Error()
		return card
	}
	ctx, cancel := context.WithTimeout(ctx, snapshotListTimeout)
	defer cancel()
	listed, err := snapshot.List(ctx, repo)
	if err != nil {
		card.ListError = err.Error()
		return card
	}
	ours := snapshot.OfVirtualCluster(listed, client.ObjectKeyFromObject(vc))
	for i := len(ours) - 1; i >= 0; i-- {
		x := ours[i]
		card.List = append(card.List, snapshotRow{
			Tag: x.Tag, Taken: x.Manifest.Created.UTC().Format(time.RFC3339), Size: humanize.IBytes(uint64(x.Size)),
			Digest: x.Digest, Revision: x.Manifest.EtcdRevision, Scheduled: strings.HasPrefix(x.Tag, snapshotschedule.TagPrefix),
		})
	}
	return card
}
