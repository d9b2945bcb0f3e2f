package framework

import (
	_ "embed"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// Budget tokens go to the waiting tests longest first: of the tests of all
// packages waiting for a share of the budget, only the one at the head of
// the longest work still to do (durations.tsv; the default-cluster tests
// count as one chain, nextWaiter) may take tokens, the others wait behind
// it. So
// the run's longest tests start first and the short ones fill the end
// (longest-processing-time-first). Tests that need more than one cluster
// at once go before all others: served at the start, while every share is
// free, they never hold the queue up while the shares drain one by one. A test that waits for the
// default cluster's slot too is passed over while another test holds that
// slot, so it holds up no one. Each waiter is a file in queueDir that its
// test holds an exclusive flock on while it waits: a file no one holds
// (its test process died) is removed by the next reader, and a reused pid
// cannot keep it alive.

// durationsTSV is each top-level end-to-end test's wall time alone, in
// seconds, without its lease wait ("Test<TAB>seconds" per line), as
// `go run ./hack/testtimes -durations _output/e2e.json` prints it after a
// full run. A test it does not name is expected to be short and goes last.
//
//go:embed durations.tsv
var durationsTSV string

// queueDir holds the waiters' files.
func queueDir() string { return filepath.Join(LeaseDir, "queue") }

var waiterSeq atomic.Int64

// waiter is one test waiting for budget tokens.
type waiter struct {
	path    string
	seconds int
	name    string
	// clusters is how many budget shares it waits for (1 unless marked).
	clusters int
	// defaultCluster: it waits for the default cluster's slot too.
	defaultCluster bool
}

// Marks follow the test's name on a waiter's line: defaultMark when it
// waits for the default cluster's slot too, clustersMark and a number when
// it waits for more than one share.
const (
	defaultMark  = "+default"
	clustersMark = "+clusters="
)

// expectedSeconds is the test's line of durationsTSV, 0 when it has none.
func expectedSeconds(name string) int {
	for _, line := range strings.Split(durationsTSV, "\n") {
		test, secs, ok := strings.Cut(strings.TrimSpace(line), "\t")
		if ok && test == name {
			if n, err := strconv.Atoi(secs); err == nil {
				return n
			}
		}
	}
	return 0
}

// joinQueue registers the test t as waiting for budget tokens and returns
// its file; leave removes it.
func joinQueue(t testing.TB, clusters int, defaultCluster bool) (mine string, leave func()) {
	t.Helper()
	mine, leave, err := enqueue(waiter{seconds: expectedSeconds(t.Name()), name: t.Name(), clusters: clusters, defaultCluster: defaultCluster})
	if err != nil {
		t.Fatal(err)
	}
	return mine, leave
}

// enqueue writes w's file, "<seconds> <name>[ +default][ +clusters=<n>]",
// and holds its lock until leave.
func enqueue(w waiter) (mine string, leave func(), err error) {
	if err := os.MkdirAll(queueDir(), 0o755); err != nil {
		return "", nil, err
	}
	mine = filepath.Join(queueDir(), fmt.Sprintf("%d-%d.wait", os.Getpid(), waiterSeq.Add(1)))
	body := fmt.Sprintf("%d %s", w.seconds, w.name)
	if w.defaultCluster {
		body += " " + defaultMark
	}
	if w.clusters > 1 {
		body += fmt.Sprintf(" %s%d", clustersMark, w.clusters)
	}
	// Written and locked under another name first, so no reader ever sees
	// the waiter unlocked and takes it for a dead one.
	tmp := mine + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_RDWR, 0o644)
	if err != nil {
		return "", nil, err
	}
	err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
	if err == nil {
		_, err = f.WriteString(body + "\n")
	}
	if err == nil {
		err = os.Rename(tmp, mine)
	}
	if err != nil {
		f.Close()
		_ = os.Remove(tmp)
		return "", nil, err
	}
	return mine, func() {
		_ = os.Remove(mine)
		f.Close()
	}, nil
}

// firstInQueue says whether the waiter mine is the one to serve now.
// Waiters of processes that are gone are removed on the way, and those
// that wait for the default cluster's slot are passed over while it is
// held.
func firstInQueue(mine string) bool {
	entries, err := os.ReadDir(queueDir())
	if err != nil {
		return false
	}
	slotHeld := !defaultSlotFree()
	var live []waiter
	for _, e := range entries {
		w, ok := readWaiter(filepath.Join(queueDir(), e.Name()))
		if !ok {
			continue
		}
		if w.path != mine && !held(w.path) {
			_ = os.Remove(w.path)
			continue
		}
		live = append(live, w)
	}
	next, ok := nextWaiter(live, slotHeld)
	return ok && next.path == mine
}

// nextWaiter is the waiter at the head of the longest work still to do:
// for a test that waits for the default cluster, the sum of every such
// test's expected time, since they run one after another on its slot (so
// that chain starts early and never ends the run alone); for any other,
// its own. Waiters for more than one cluster go first, most clusters
// first. Default-cluster waiters are passed over while slotHeld. Ties go
// by the test's own time, then its name, then its file, so every process
// picks the same one.
func nextWaiter(ws []waiter, slotHeld bool) (waiter, bool) {
	chain := 0
	for _, w := range ws {
		if w.defaultCluster {
			chain += w.seconds
		}
	}
	work := func(w waiter) int {
		if w.defaultCluster {
			return chain
		}
		return w.seconds
	}
	var sorted []waiter
	for _, w := range ws {
		if !(w.defaultCluster && slotHeld) {
			sorted = append(sorted, w)
		}
	}
	if len(sorted) == 0 {
		return waiter{}, false
	}
	sort.Slice(sorted, func(i, j int) bool {
		a, b := sorted[i], sorted[j]
		if a.clusters != b.clusters {
			return a.clusters > b.clusters
		}
		if work(a) != work(b) {
			return work(a) > work(b)
		}
		if a.seconds != b.seconds {
			return a.seconds > b.seconds
		}
		if a.name != b.name {
			return a.name < b.name
		}
		return a.path < b.path
	})
	return sorted[0], true
}

// defaultSlotFree says whether no test holds the default cluster's slot,
// by taking its lock for a moment (another waiter that tries it in that
// moment tries again a second later).
func defaultSlotFree() bool {
	f := tryLock(defaultSlot)
	if f == nil {
		return false
	}
	f.Close()
	return true
}

// readWaiter parses a waiter's file "<pid>-<seq>.wait" holding
// "<seconds> <test name>[ +default][ +clusters=<n>]"; other names (a file
// being written) are not waiters.
func readWaiter(path string) (waiter, bool) {
	if !strings.HasSuffix(path, ".wait") {
		return waiter{}, false
	}
	body, err := os.ReadFile(path)
	if err != nil {
		return waiter{}, false
	}
	fields := strings.Fields(string(body))
	if len(fields) < 2 {
		return waiter{}, false
	}
	n, err := strconv.Atoi(fields[0])
	if err != nil {
		return waiter{}, false
	}
	w := waiter{path: path, seconds: n, name: fields[1], clusters: 1}
	for _, mark := range fields[2:] {
		if mark == defaultMark {
			w.defaultCluster = true
		} else if c, ok := strings.CutPrefix(mark, clustersMark); ok {
			if n, err := strconv.Atoi(c); err == nil && n > 1 {
				w.clusters = n
			}
		}
	}
	return w, true
}

// held says whether a waiter's test still holds the lock on its file.
func held(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return errors.Is(err, syscall.EWOULDBLOCK)
	}
	return false
}

// packagesJoined is set once as many processes as $NEST_E2E_PACKAGES have
// joined the queue (or packagesWait passed): from then on this process's
// tests never wait for them again, though packages that are done leave.
var packagesJoined atomic.Bool

// waitForPackages waits until as many test processes as $NEST_E2E_PACKAGES
// have a waiter in the queue, at most packagesWait: a package whose test
// binary linked first would otherwise be served first, whatever its tests'
// length. No process is served before then, so none has left.
func waitForPackages(t testing.TB) {
	t.Helper()
	want, err := expectedPackages()
	if err != nil {
		t.Fatal(err)
	}
	if packagesJoined.Load() {
		return
	}
	if !waitForProcesses(want, packagesWait) {
		t.Logf("only %d of $%s=%d test processes joined the local cluster queue in %s; going on", queuedProcesses(), PackagesEnv, want, packagesWait)
	}
	packagesJoined.Store(true)
}

// expectedPackages is $NEST_E2E_PACKAGES, 0 when unset.
func expectedPackages() (int, error) {
	env := os.Getenv(PackagesEnv)
	if env == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(env)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("$%s=%q: want a number of test processes", PackagesEnv, env)
	}
	return n, nil
}

// waitForProcesses polls until want processes have live waiters queued
// and says whether they did within bound.
func waitForProcesses(want int, bound time.Duration) bool {
	deadline := time.Now().Add(bound)
	for queuedProcesses() < want {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(200 * time.Millisecond)
	}
	return true
}

// queuedProcesses counts the processes with a live waiter queued (by the
// pid its file is named for).
func queuedProcesses() int {
	entries, err := os.ReadDir(queueDir())
	if err != nil {
		return 0
	}
	pids := map[string]bool{}
	for _, e := range entries {
		pid, _, ok := strings.Cut(e.Name(), "-")
		if ok && strings.HasSuffix(e.Name(), ".wait") && held(filepath.Join(queueDir(), e.Name())) {
			pids[pid] = true
		}
	}
	return len(pids)
}
