package framework

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func TestNextWaiterIsTheLongestExpectedThenByName(t *testing.T) {
	ws := []waiter{
		{path: "/q/1-1.wait", seconds: 100, name: "TestShort"},
		{path: "/q/2-1.wait", seconds: 600, name: "TestTwins"},
		{path: "/q/3-1.wait", seconds: 600, name: "TestLong"},
		{path: "/q/4-1.wait", seconds: 0, name: "TestUnknown"},
	}
	if next, ok := nextWaiter(ws, false); !ok || next.name != "TestLong" {
		t.Errorf("next = %+v, want TestLong (600 s, before TestTwins by name)", next)
	}
	if _, ok := nextWaiter(nil, false); ok {
		t.Error("an empty queue has a next waiter")
	}
}

// The default-cluster tests run one after another: their chain's sum is
// what competes, headed by its longest test, and it is passed over while
// the slot is held.
func TestNextWaiterCountsTheDefaultClusterTestsAsOneChain(t *testing.T) {
	ws := []waiter{
		{path: "/q/1-1.wait", seconds: 600, name: "TestFaults"},
		{path: "/q/2-1.wait", seconds: 420, name: "TestConformance", defaultCluster: true},
		{path: "/q/3-1.wait", seconds: 200, name: "TestDedicatedNodes", defaultCluster: true},
	}
	if next, _ := nextWaiter(ws, false); next.name != "TestConformance" {
		t.Errorf("next = %s, want TestConformance at the head of the 620 s chain", next.name)
	}
	if next, _ := nextWaiter(ws, true); next.name != "TestFaults" {
		t.Errorf("with the slot held, next = %s, want TestFaults", next.name)
	}
	if next, _ := nextWaiter(ws[:2], false); next.name != "TestFaults" {
		t.Errorf("next = %s, want TestFaults (600 s) before a 420 s chain", next.name)
	}
}

func TestFirstInQueueServesTheLongestLiveWaiter(t *testing.T) {
	useLeaseDir(t)
	short := queued(t, 100, "TestShort", false)
	long := queued(t, 600, "TestLong", false)
	// A waiter whose test is gone holds no lock on its file: it is
	// removed, not waited for, whatever its pid is now.
	dead := filepath.Join(queueDir(), fmt.Sprintf("%d-999.wait", os.Getpid()))
	if err := os.WriteFile(dead, []byte("9999 TestDead\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(queueDir(), "garbage.wait"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if firstInQueue(short.path) {
		t.Error("the short test was served before the long one")
	}
	if !firstInQueue(long.path) {
		t.Error("the long test was not served")
	}
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Errorf("the dead test's waiter is still queued: %v", err)
	}
	long.leave()
	if !firstInQueue(short.path) {
		t.Error("the short test was not served once the long one left")
	}
}

// queuedWaiter is a waiter a test queued with enqueue.
type queuedWaiter struct {
	path  string
	leave func()
}

// queued enqueues a waiter for the test's duration.
func queued(t *testing.T, seconds int, name string, defaultCluster bool) queuedWaiter {
	t.Helper()
	path, leave, err := enqueue(waiter{seconds: seconds, name: name, clusters: 1, defaultCluster: defaultCluster})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(leave)
	return queuedWaiter{path, leave}
}

// useLeaseDir points the leases at a directory of the test's own.
func useLeaseDir(t *testing.T) {
	old := LeaseDir
	LeaseDir = t.TempDir()
	t.Cleanup(func() { LeaseDir = old })
}

// A test that waits for the default cluster too is passed over while
// another holds that cluster's slot, and served first once it is free.
func TestFirstInQueuePassesOverTheDefaultClusterWhileItIsHeld(t *testing.T) {
	useLeaseDir(t)
	long := queued(t, 600, "TestConformance", true)
	short := queued(t, 100, "TestShort", false)
	held := tryLock(defaultSlot)
	if held == nil {
		t.Fatal("cannot take the default slot's lock")
	}
	if !firstInQueue(short.path) || firstInQueue(long.path) {
		t.Error("while the default cluster is held, the test waiting for it was not passed over")
	}
	held.Close()
	if !firstInQueue(long.path) || firstInQueue(short.path) {
		t.Error("once the default cluster is free, the longer test waiting for it was not first")
	}
}

// durations.tsv names every top-level end-to-end test (one that requires
// root, to run local clusters), and nothing else: a test left out would
// always go last.
func TestDurationsNameEveryLeasingTest(t *testing.T) {
	root := filepath.Join("..", "..")
	topLevel := regexp.MustCompile(`(?m)^func (Test\w+)\(t \*testing\.T\)`)
	leasing := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "framework" {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		// A test function's body runs to the next top-level func.
		funcs := topLevel.FindAllSubmatchIndex(src, -1)
		for i, m := range funcs {
			end := len(src)
			if i+1 < len(funcs) {
				end = funcs[i+1][0]
			}
			if strings.Contains(string(src[m[0]:end]), "framework.RequireRoot(t)") {
				leasing[string(src[m[2]:m[3]])] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(leasing) < 10 {
		t.Fatalf("found only %d end-to-end tests under %s: %v", len(leasing), root, leasing)
	}
	listed := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(durationsTSV), "\n") {
		name, _, _ := strings.Cut(line, "\t")
		listed[name] = true
		if !leasing[name] {
			t.Errorf("durations.tsv names %s, which is no top-level end-to-end test", name)
		}
	}
	for name := range leasing {
		if !listed[name] || expectedSeconds(name) <= 0 {
			t.Errorf("durations.tsv has no duration for %s (go run ./hack/testtimes -durations _output/e2e.json)", name)
		}
	}
}

// A test that needs two clusters at once goes before longer ones that need
// one, so it is served while both shares are free.
func TestNextWaiterServesMultiClusterWaitersFirst(t *testing.T) {
	ws := []waiter{
		{path: "/q/1-1.wait", seconds: 900, name: "TestFaults", clusters: 1},
		{path: "/q/2-1.wait", seconds: 60, name: "TestTwo", clusters: 2},
		{path: "/q/3-1.wait", seconds: 400, name: "TestMember", clusters: 2},
		{path: "/q/4-1.wait", seconds: 600, name: "TestConformance", clusters: 1, defaultCluster: true},
	}
	if next, _ := nextWaiter(ws, false); next.name != "TestMember" {
		t.Errorf("next = %s, want TestMember, the longest of the two-cluster tests", next.name)
	}
}

// A waiter's file keeps its marks.
func TestReadWaiterReadsItsMarks(t *testing.T) {
	useLeaseDir(t)
	for _, w := range []waiter{
		{seconds: 400, name: "TestMember", clusters: 2},
		{seconds: 600, name: "TestConformance", clusters: 1, defaultCluster: true},
		{seconds: 5, name: "TestShort", clusters: 1},
	} {
		path, leave, err := enqueue(w)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := readWaiter(path)
		leave()
		w.path = path
		if !ok || got != w {
			t.Errorf("read %+v back as %+v (ok %v)", w, got, ok)
		}
	}
}
