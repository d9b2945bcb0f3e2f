package framework

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// A test's budget share is free while its cleanups run (`nest dev down`),
// and its slot is not until they have ended.
func TestLeaseReleasesTheShareWhenTeardownBegins(t *testing.T) {
	for _, c := range []struct {
		name  string
		lease func(t testing.TB) string
	}{
		{"named", func(t testing.TB) string { return fmt.Sprintf("slot-%d", LeaseCluster(t).Slot) }},
		{"default", func(t testing.TB) string { LeaseDefaultCluster(t); return defaultSlot }},
	} {
		t.Run(c.name, func(t *testing.T) {
			useLeaseDir(t)
			t.Setenv(ClustersEnv, "1")
			t.Setenv(PackagesEnv, "")
			var slot string
			t.Run("leaser", func(t *testing.T) {
				slot = c.lease(t)
				if f := tryLock("token-1"); f != nil {
					f.Close()
					t.Fatal("the budget share is free while the test runs")
				}
				t.Cleanup(func() {
					if !eventuallyLocks(t, "token-1") {
						t.Error("the budget share is still held during the test's teardown")
					}
					if f := tryLock(slot); f != nil {
						f.Close()
						t.Errorf("%s is free during the test's teardown", slot)
					}
				})
			})
			if !eventuallyLocks(t, slot) {
				t.Errorf("%s is still held after the test ended", slot)
			}
		})
	}
}

// eventuallyLocks says whether the lock name can be taken (and lets it go)
// within five seconds, polling every 20 ms.
func eventuallyLocks(t testing.TB, name string) bool {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		f := tryLock(name)
		if f == nil {
			return false, nil
		}
		f.Close()
		return true, nil
	})
	return err == nil
}

// The first tests wait until every package's process has a waiter queued,
// counting only live ones, and no longer than their bound.
func TestWaitForProcessesCountsLiveQueuedProcesses(t *testing.T) {
	useLeaseDir(t)
	queued(t, 100, "TestMine", false)
	queued(t, 200, "TestMineToo", false)
	// Another process's waiter, gone: no lock on it.
	if err := os.WriteFile(filepath.Join(queueDir(), "999998-1.wait"), []byte("300 TestGone\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if n := queuedProcesses(); n != 1 {
		t.Errorf("queued processes = %d, want 1 (this one)", n)
	}
	start := time.Now()
	if waitForProcesses(2, 300*time.Millisecond) {
		t.Error("waitForProcesses(2) returned true with one process queued")
	}
	if waited := time.Since(start); waited < 300*time.Millisecond {
		t.Errorf("waitForProcesses gave up after %s, before its bound", waited)
	}
	other := lockedFile(t, filepath.Join(queueDir(), "999999-1.wait"), "400 TestOther\n")
	defer other.Close()
	if !waitForProcesses(2, time.Minute) {
		t.Error("waitForProcesses(2) returned false with two processes queued")
	}
}

// lockedFile writes body to path and holds an exclusive flock on it, as
// another test process holds its waiter's file.
func lockedFile(t *testing.T, path, body string) *os.File {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(body); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	return f
}
