package framework

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/nestdev/nest/internal/devcluster"
)

// Slot leases let end-to-end tests of every package run side by side, each
// on a named local host cluster of its own: a lease is an exclusive flock on
// one file per slot, so two test processes never take the same slot, and
// the kernel releases it when the process dies.
const (
	// LeaseDir holds one lock file per slot.
	LeaseDir = "/run/nest-e2e-slots"
	// ClustersEnv caps how many slots (1 to devcluster.MaxSlot) the tests of
	// all packages use at once; unset means every slot.
	ClustersEnv = "NEST_E2E_CLUSTERS"
	// leaseWait bounds how long a test waits for a free slot.
	leaseWait = 45 * time.Minute
)

// LeaseCluster leases a free slot for the test and returns the addressing of
// the named cluster "e2e<slot>" in it. The lease is held until the test and
// every cleanup registered after this call have ended, so the cluster's
// `nest dev down` runs before another test can take the slot. A slot whose
// node subnet some link already holds (a cluster started by hand, or left
// over) is passed over. It fails the test when no slot frees up within
// leaseWait.
func LeaseCluster(t testing.TB, ctx context.Context) devcluster.Addressing {
	t.Helper()
	slots, err := leaseSlots()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(LeaseDir, 0o755); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(leaseWait)
	for logged := false; ; logged = true {
		for slot := 1; slot <= slots; slot++ {
			a, err := devcluster.AddressingFor(fmt.Sprintf("e2e%d", slot), slot)
			if err != nil {
				t.Fatal(err)
			}
			if f := tryLock(slot); f != nil {
				if devcluster.SlotFree(a) != nil {
					f.Close()
					continue
				}
				t.Cleanup(func() { f.Close() })
				t.Logf("leased local cluster %s (slot %d)", a.Cluster, slot)
				return a
			}
		}
		if !logged {
			t.Logf("all %d slots are leased; waiting for one", slots)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no free local cluster slot of %d after %s; lower the parallelism or raise $%s", slots, leaseWait, ClustersEnv)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for a local cluster slot: %v", ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

// LeaseDefaultCluster leases the default cluster's slot (0) for the test,
// waiting while another test holds it, and returns its addressing. Tests
// that run the default cluster on purpose (its names and ranges, or a flow
// that only works when a tenant's Service range is the host's) take it, one
// at a time; the lease is held like LeaseCluster's.
func LeaseDefaultCluster(t testing.TB, ctx context.Context) devcluster.Addressing {
	t.Helper()
	if err := os.MkdirAll(LeaseDir, 0o755); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(leaseWait)
	for logged := false; ; logged = true {
		if f := tryLock(0); f != nil {
			t.Cleanup(func() { f.Close() })
			t.Logf("leased the default local cluster (slot 0)")
			return devcluster.DefaultAddressing()
		}
		if !logged {
			t.Logf("another test holds the default local cluster; waiting for it")
		}
		if time.Now().After(deadline) {
			t.Fatalf("the default local cluster stayed leased for %s", leaseWait)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for the default local cluster: %v", ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

// leaseSlots is how many slots leases may use: $NEST_E2E_CLUSTERS, else
// every slot.
func leaseSlots() (int, error) {
	env := os.Getenv(ClustersEnv)
	if env == "" {
		return devcluster.MaxSlot, nil
	}
	n, err := strconv.Atoi(env)
	if err != nil || n < 1 || n > devcluster.MaxSlot {
		return 0, fmt.Errorf("$%s=%q: want a number of local clusters from 1 to %d", ClustersEnv, env, devcluster.MaxSlot)
	}
	return n, nil
}

// tryLock takes slot's lock without waiting; nil when another process or
// test holds it.
func tryLock(slot int) *os.File {
	f, err := os.OpenFile(filepath.Join(LeaseDir, fmt.Sprintf("slot-%d.lock", slot)), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil
	}
	// flock locks belong to the open file description, so a second open in
	// this process (another parallel test) is refused like another process.
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil
	}
	return f
}

// ClusterFlags are the `nest dev` flags that name the cluster a: none for
// the default cluster. `nest dev down` needs them too: in a state directory
// with no record (an up that failed early) they keep it to a's links and
// routes.
func ClusterFlags(a devcluster.Addressing) []string {
	if a.Cluster == "" {
		return nil
	}
	return []string{"--cluster", a.Cluster, "--slot", strconv.Itoa(a.Slot)}
}

// ClusterEnv is the environment that points every `nest dev` command of a
// script (hack/demo.sh) at the cluster a in stateDir.
func ClusterEnv(a devcluster.Addressing, stateDir string) []string {
	return []string{
		devcluster.ClusterEnv + "=" + a.Cluster,
		devcluster.SlotEnv + "=" + strconv.Itoa(a.Slot),
		devcluster.StateDirEnv + "=" + stateDir,
	}
}

// Addressing is the addressing of the local cluster in stateDir.
func Addressing(t testing.TB, stateDir string) devcluster.Addressing {
	t.Helper()
	a, err := devcluster.StateAddressing(stateDir)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// Topology is the first count nodes of the local cluster in stateDir.
func Topology(t testing.TB, stateDir string, count int) []devcluster.Node {
	t.Helper()
	nodes, err := Addressing(t, stateDir).Topology(stateDir, count)
	if err != nil {
		t.Fatal(err)
	}
	return nodes
}
