package etcdmember

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/nestdev/nest/internal/testutil"
)

func etcdClient(t *testing.T, url string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{url}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// A member told to restore waits for its snapshot rather than start an
// empty cluster, takes only a snapshot whole and of the SHA-256 it was
// sent with, and then starts our etcd build as a cluster of one holding
// the snapshot's keys, its revision moved past every revision before.
func TestMemberRestoresFromTheSnapshotItIsSent(t *testing.T) {
	ctx := context.Background()
	src := newMember(t, "src-0")
	if err := Join(ctx, src.config(true)); err != nil {
		t.Fatal(err)
	}
	src.start(t)
	srcCli := etcdClient(t, src.clientURL)
	testutil.Eventually(t, 30*time.Second, "a write to the source member", func() error {
		_, err := srcCli.Put(ctx, "/registry/configmaps/app/settings", "owner=alpha")
		return err
	})
	rc, err := srcCli.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var snap bytes.Buffer
	if _, err := snap.ReadFrom(rc); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(snap.Bytes())

	m := newMember(t, "tenant-0")
	c := m.config(false)
	c.Restore = func() bool { return true }
	// No data directory yet: etcd makes it at its first start.
	if _, err := joinOnce(ctx, c); !errors.Is(err, errNoSnapshotYet) {
		t.Fatalf("no snapshot yet: %v, want it to wait", err)
	}
	err = Receive(bytes.NewReader(snap.Bytes()[:snap.Len()/2]), int64(snap.Len()), c.DataDir, hex.EncodeToString(sum[:]))
	if err == nil || !strings.Contains(err.Error(), "cut short or changed") {
		t.Fatalf("half a snapshot: %v, want refused", err)
	}
	if left, _ := filepath.Glob(filepath.Join(c.DataDir, "restore.db*")); len(left) != 0 {
		t.Fatalf("a refused snapshot left %v", left)
	}
	// More than the snapshot on the input: only its size is read.
	if err := Receive(io.MultiReader(bytes.NewReader(snap.Bytes()), strings.NewReader("trailing")), int64(snap.Len()), c.DataDir, hex.EncodeToString(sum[:])); err != nil {
		t.Fatal(err)
	}
	if err := Join(ctx, c); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(c.DataDir, restoreFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the snapshot is still there after the restore: %v", err)
	}
	m.start(t)
	cli := etcdClient(t, m.clientURL)
	var resp *clientv3.GetResponse
	testutil.Eventually(t, 30*time.Second, "the restored member answers", func() error {
		var err error
		resp, err = cli.Get(ctx, "/registry/configmaps/app/settings")
		return err
	})
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "owner=alpha" {
		t.Errorf("restored member holds %v, want the snapshot's key", resp.Kvs)
	}
	if resp.Header.Revision < RevisionBump {
		t.Errorf("revision %d after the restore, want it moved past %d", resp.Header.Revision, int64(RevisionBump))
	}
	members, err := cli.MemberList(ctx)
	if err != nil || len(members.Members) != 1 || members.Members[0].Name != "tenant-0" {
		t.Errorf("members %v (%v), want tenant-0 alone", members, err)
	}
	// Sent again (a restore interrupted after this step): taken as done.
	// Another snapshot into a member with data is refused.
	if err := Receive(bytes.NewReader(snap.Bytes()), int64(snap.Len()), c.DataDir, hex.EncodeToString(sum[:])); err != nil {
		t.Errorf("the same snapshot again: %v, want it taken as restored", err)
	}
	if err := Receive(strings.NewReader("other"), 5, c.DataDir, "abc"); err == nil || !strings.Contains(err.Error(), "already holds a member's data") {
		t.Errorf("another snapshot into a member with data: %v, want refused", err)
	}
}

// countingReader counts what is read from r.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// A refused snapshot is read to its size and no further: the sender's
// input may never end, and a read past it would wait for good.
func TestReceiveReadsNoFurtherThanTheSnapshot(t *testing.T) {
	dir := t.TempDir()
	in := &countingReader{r: io.MultiReader(strings.NewReader("0123456789"), strings.NewReader(strings.Repeat("x", 100)))}
	if err := Receive(in, 10, dir, "not-its-sum"); err == nil {
		t.Fatal("a snapshot of another SHA-256 was taken")
	}
	if in.n != 10 {
		t.Errorf("read %d bytes, want the snapshot's 10", in.n)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "restore.db*")); len(left) != 0 {
		t.Errorf("a refused snapshot left %v", left)
	}
}
