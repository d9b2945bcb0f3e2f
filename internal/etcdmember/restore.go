package etcdmember

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"
)

// RestoreMarker prefixes the bootstrap file's member name when that member
// is to start from a snapshot (nest restore) instead of a new, empty
// cluster: "restore:NAME". A helper that predates it reads a name that is
// none of its members', and starts no cluster.
const RestoreMarker = "restore:"

// ReceiveCommand writes the snapshot read from stdin where the helper
// restores it from: `nest-syncer etcd-member receive-snapshot --data-dir
// DIR --size BYTES --sha256 HEX`.
const ReceiveCommand = "receive-snapshot"

// restoreFile is the snapshot a restoring member starts from, in its data
// directory beside etcd's member/, with its SHA-256 in restoreFile.sha256;
// restoredFile keeps that SHA-256 once the member restored it.
const (
	restoreFile  = "restore.db"
	restoredFile = "restored.sha256"
)

// RevisionBump is how far a restore moves etcd's revision past the
// snapshot's, with the revisions before it marked compacted, as upstream
// advises for a Kubernetes etcd: clients that watched the tenant before
// relist rather than wait for revisions that will never come.
const RevisionBump = 1_000_000_000

// errNoSnapshotYet: a restoring member waits for its snapshot.
var errNoSnapshotYet = errors.New("waiting for the snapshot to restore from (nest restore sends it)")

// restore makes c's data directory from the snapshot nest restore sent
// (Receive), as a cluster of this one member at its peer URL, and removes
// the snapshot. It works in a directory beside member/ and renames it into
// place, so a helper killed at any step starts the restore again.
func restore(c Config) error {
	from := filepath.Join(c.DataDir, restoreFile)
	if _, err := os.Stat(from); err != nil {
		return errNoSnapshotYet
	}
	work := filepath.Join(c.DataDir, "restoring")
	if err := os.RemoveAll(work); err != nil {
		return err
	}
	token, err := newClusterToken()
	if err != nil {
		return err
	}
	err = snapshot.NewV3(zap.NewNop()).Restore(snapshot.RestoreConfig{
		SnapshotPath:        from,
		Name:                c.Name,
		OutputDataDir:       work,
		PeerURLs:            []string{c.PeerURL},
		InitialCluster:      c.Name + "=" + c.PeerURL,
		InitialClusterToken: token,
		RevisionBump:        RevisionBump,
		MarkCompacted:       true,
	})
	if err != nil {
		return fmt.Errorf("restore etcd from the snapshot: %w", err)
	}
	// The snapshot's SHA-256 is kept before member/ appears, so a helper
	// killed between the two still knows what it restored.
	if err := os.Rename(from+".sha256", filepath.Join(c.DataDir, restoredFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := os.Rename(filepath.Join(work, "member"), filepath.Join(c.DataDir, "member")); err != nil {
		return err
	}
	if err := os.RemoveAll(work); err != nil {
		return err
	}
	return os.Remove(from)
}

// Receive writes the snapshot of size bytes read from r into dataDir for
// the member to restore from, through a temporary file renamed into place
// only when its SHA-256 is wantSHA256 (hex): the member never reads half a
// snapshot. It reads size bytes and no more, so it needs no end of input,
// which an exec's stdin does not always deliver.
//
// A member that already restored this very snapshot (restoredFile names
// its SHA-256) answers nil: a restore that got this far before it was
// interrupted goes on. A member with any other data refuses it.
func Receive(r io.Reader, size int64, dataDir, wantSHA256 string) error {
	n, err := receive(r, size, dataDir, wantSHA256)
	if n < size {
		// Read what is left of the snapshot all the same: an exec whose
		// command ends before its input does can leave the sender waiting.
		_, _ = io.CopyN(io.Discard, r, size-n)
	}
	return err
}

// receive is Receive; it returns how many bytes of r it read.
func receive(r io.Reader, size int64, dataDir, wantSHA256 string) (int64, error) {
	if hasData, err := HasData(dataDir); err != nil || hasData {
		if err == nil {
			if restored, _ := os.ReadFile(filepath.Join(dataDir, restoredFile)); strings.EqualFold(strings.TrimSpace(string(restored)), wantSHA256) {
				return 0, nil
			}
			err = fmt.Errorf("%s already holds a member's data: a member restores only into an empty volume", dataDir)
		}
		return 0, err
	}
	// etcd makes its data directory at its first start, which a
	// restoring member has not had.
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return 0, err
	}
	if err := removeParts(dataDir); err != nil {
		return 0, err
	}
	tmp, err := os.CreateTemp(dataDir, restoreFile+partSuffix+"*")
	if err != nil {
		return 0, err
	}
	defer os.Remove(tmp.Name())
	sum := sha256.New()
	n, err := io.CopyN(io.MultiWriter(tmp, sum), r, size)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return n, fmt.Errorf("receive the snapshot: %d of %d bytes: %w: it was cut short or changed on the way", n, size, err)
	}
	got := hex.EncodeToString(sum.Sum(nil))
	if !strings.EqualFold(got, wantSHA256) {
		return n, fmt.Errorf("the snapshot received has SHA-256 %s, want %s: it was cut short or changed on the way", got, wantSHA256)
	}
	if err := os.WriteFile(filepath.Join(dataDir, restoreFile+".sha256"), []byte(got+"\n"), 0o600); err != nil {
		return n, err
	}
	return n, os.Rename(tmp.Name(), filepath.Join(dataDir, restoreFile))
}

// partSuffix marks a snapshot being received; removeParts clears what a
// receive killed on the way left.
const partSuffix = ".part-"

func removeParts(dataDir string) error {
	parts, err := filepath.Glob(filepath.Join(dataDir, restoreFile+partSuffix+"*"))
	for _, p := range parts {
		err = errors.Join(err, os.Remove(p))
	}
	return err
}
