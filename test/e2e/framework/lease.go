package framework

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nestdev/nest/internal/devcluster"
)

// LeaseDir holds the lock files and the queue (a variable for the
// framework's own tests).
var LeaseDir = "/run/nest-e2e-slots"

// Leases let end-to-end tests of every package run side by side on local
// host clusters of their own, as many at once as the machine carries. A
// lease is two exclusive flocks: one of ClustersEnv budget tokens (the
// machine's share: the suites are CPU-bound, and past two clusters at once
// on two cores they only slow each other down; they go to the waiting
// tests longest first, queue.go), and one slot (the
// cluster's name and address ranges). flock locks belong to their open
// file, so parallel tests of one process exclude each other like separate
// processes do, and the kernel releases them when a test process dies.
// The budget's default is measured: three clusters at once (one of them
// churning four tenants) ran the fault suites three times slower than
// alone, past their deadlines; two at once keep each near its own pace.
const (
	// ClustersEnv is how many local clusters the tests of all packages run
	// at once, 1 to devcluster.MaxSlot; defaultClusters when unset.
	ClustersEnv = "NEST_E2E_CLUSTERS"
	// defaultClusters suits the two-core machines CI runs on.
	defaultClusters = 2
	// leaseWait bounds how long a test waits for its lease.
	leaseWait = 60 * time.Minute
	// PackagesEnv is how many test processes (packages) start side by
	// side and join the queue together (make e2e-run sets it); unset, a
	// test waits only queueSettle.
	PackagesEnv = "NEST_E2E_PACKAGES"
	// packagesWait bounds how long the first tests wait for the other
	// packages to join: long enough for a package's test binary to link.
	packagesWait = 3 * time.Minute
	// queueSettle is how long a test waits in the queue before it may be
	// served: one process's tests join within moments of each other.
	queueSettle = 2 * time.Second
)

// LeaseCluster waits for a free share of the cluster budget and a free slot
// and returns the addressing of the named cluster "e2e<slot>" there. Call
// it before the test's deadline starts: the wait can be long. The slot is
// held until the test and every cleanup registered after this call have
// ended, so the cluster's `nest dev down` runs before another test can
// take it; the budget share goes when the cleanups begin. A slot whose node subnet some link already holds (a cluster
// started by hand, or left over) is passed over. It fails the test when no
// lease frees up within leaseWait.
func LeaseCluster(t testing.TB) devcluster.Addressing {
	t.Helper()
	return LeaseClusters(t, 1)[0]
}

// LeaseClusters is LeaseCluster for n clusters at once (a host and a
// member): it takes n budget shares together or none, so two such tests
// never each hold one share and wait for the other's.
func LeaseClusters(t testing.TB, n int) []devcluster.Addressing {
	t.Helper()
	tokens := waitForTokens(t, fmt.Sprintf("%d of the local cluster budget", n), n, false)
	releaseAtTeardown(t, tokens)
	out := make([]devcluster.Addressing, 0, n)
	for len(out) < n {
		a, f := freeSlot(t)
		if f == nil {
			t.Fatalf("no free local cluster slot of %d for a leased budget share: a cluster started by hand or left over holds them", devcluster.MaxSlot)
		}
		releaseLast(t, []*os.File{f})
		out = append(out, a)
		t.Logf("leased local cluster %s (slot %d)", a.Cluster, a.Slot)
	}
	return out
}

// LeaseDefaultCluster waits for the default cluster's slot (0), which one
// test holds at a time, and a share of the cluster budget, and returns its
// addressing. Tests that need the default cluster on purpose (its names and
// ranges, or a flow that only works where a tenant's Service range is the
// host's) take it. The lease is held and released like LeaseCluster's.
//
// It takes the slot and the share together, in the queue's order, and
// waits in the queue only while the slot is free: a test holding the slot
// while it waited for a share would keep the other default-cluster tests
// out of the queue, however long they are.
func LeaseDefaultCluster(t testing.TB) devcluster.Addressing {
	t.Helper()
	locks := waitForTokens(t, "the default local cluster and a share of the local cluster budget", 1, true)
	// The budget token comes first, the slot last (waitForTokens).
	releaseAtTeardown(t, locks[:1])
	releaseLast(t, locks[1:])
	t.Logf("leased the default local cluster (slot 0)")
	return devcluster.DefaultAddressing()
}

// defaultSlot is the lock of the default cluster's slot.
const defaultSlot = "slot-0"

// waitForTokens waits for n budget tokens, in the queue's order
// (queue.go), and with defaultCluster for the default cluster's slot too,
// taken with them.
func waitForTokens(t testing.TB, what string, n int, defaultCluster bool) []*os.File {
	t.Helper()
	if err := os.MkdirAll(LeaseDir, 0o755); err != nil {
		t.Fatal(err)
	}
	mine, leave := joinQueue(t, n, defaultCluster)
	defer leave()
	// Tests started together (every package's, every top-level test of a
	// package) all join before the first is served, or the first to look
	// would go first.
	waitForPackages(t)
	time.Sleep(queueSettle)
	return waitFor(t, what, func() []*os.File {
		if !firstInQueue(mine) {
			return nil
		}
		var slot []*os.File
		if defaultCluster {
			f := tryLock(defaultSlot)
			if f == nil {
				return nil
			}
			slot = []*os.File{f}
		}
		tokens := takeTokens(t, n)
		if tokens == nil {
			for _, f := range slot {
				f.Close()
			}
			return nil
		}
		return append(tokens, slot...)
	})
}

// waitFor polls take every second until it returns locks, and fails the
// test after leaseWait.
func waitFor(t testing.TB, what string, take func() []*os.File) []*os.File {
	t.Helper()
	if err := os.MkdirAll(LeaseDir, 0o755); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for {
		if locks := take(); locks != nil {
			if waited := time.Since(start); waited > time.Second {
				t.Logf("waited %s for %s", waited.Round(time.Second), what)
			}
			return locks
		}
		if time.Since(start) > leaseWait {
			t.Fatalf("waited %s for %s; lower go test's -parallel or raise $%s", leaseWait, what, ClustersEnv)
		}
		time.Sleep(time.Second)
	}
}

// takeTokens takes n of the budget's token locks, or none.
func takeTokens(t testing.TB, n int) []*os.File {
	t.Helper()
	budget, err := clusterBudget()
	if err != nil {
		t.Fatal(err)
	}
	if n > budget {
		t.Fatalf("the test needs %d local clusters at once and $%s allows %d", n, ClustersEnv, budget)
	}
	var held []*os.File
	for i := 1; i <= budget && len(held) < n; i++ {
		if f := tryLock(fmt.Sprintf("token-%d", i)); f != nil {
			held = append(held, f)
		}
	}
	if len(held) < n {
		for _, f := range held {
			f.Close()
		}
		return nil
	}
	return held
}

// freeSlot locks the first free named slot and returns its addressing.
func freeSlot(t testing.TB) (devcluster.Addressing, *os.File) {
	t.Helper()
	for slot := 1; slot <= devcluster.MaxSlot; slot++ {
		a, err := devcluster.AddressingFor(fmt.Sprintf("e2e%d", slot), slot)
		if err != nil {
			t.Fatal(err)
		}
		f := tryLock(fmt.Sprintf("slot-%d", slot))
		if f == nil {
			continue
		}
		if devcluster.SlotFree(a) != nil {
			f.Close()
			continue
		}
		return a, f
	}
	return devcluster.Addressing{}, nil
}

// releaseAtTeardown releases budget tokens as soon as the test's cleanups
// begin (its context is cancelled just before them): tearing a cluster
// down (`nest dev down`, 10 to 70 s) needs little of the machine, and the
// next test can start meanwhile on another slot. The slot's lock, which
// keeps the cluster's name and ranges, is held until every cleanup has
// ended (releaseLast). Whatever happens first, the tokens go when the test
// ends.
func releaseAtTeardown(t testing.TB, tokens []*os.File) {
	var once sync.Once
	release := func() {
		once.Do(func() {
			for _, f := range tokens {
				f.Close()
			}
		})
	}
	go func() {
		<-t.Context().Done()
		release()
	}()
	t.Cleanup(release)
}

// releaseLast releases locks when the test ends, after every cleanup
// registered later (t.Cleanup runs last-registered first).
func releaseLast(t testing.TB, locks []*os.File) {
	t.Cleanup(func() {
		for _, f := range locks {
			f.Close()
		}
	})
}

// clusterBudget is $NEST_E2E_CLUSTERS, else defaultClusters.
func clusterBudget() (int, error) {
	env := os.Getenv(ClustersEnv)
	if env == "" {
		return defaultClusters, nil
	}
	n, err := strconv.Atoi(env)
	if err != nil || n < 1 || n > devcluster.MaxSlot {
		return 0, fmt.Errorf("$%s=%q: want a number of local clusters from 1 to %d", ClustersEnv, env, devcluster.MaxSlot)
	}
	return n, nil
}

// tryLock takes the lock LeaseDir/name.lock without waiting; nil when
// another process or test holds it.
func tryLock(name string) *os.File {
	f, err := os.OpenFile(filepath.Join(LeaseDir, name+".lock"), os.O_CREATE|os.O_RDWR, 0o644)
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
