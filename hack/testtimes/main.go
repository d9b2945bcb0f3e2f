// Command testtimes prints the wall time of every package and top-level test
// in a `go test -json` event stream (test2json's format, as gotestsum's
// --jsonfile keeps it), slowest first within each package, with its result
// and how much of it the test waited for its local cluster lease (from the
// test's start to the framework's "leased ..." line). make test
// (hack/steps.sh) prints it at the end of every run, so each note can
// report where the end-to-end time went.
//
// With -durations it prints instead, for each passed top-level test, its
// wall time without the lease wait, in whole seconds, as
// test/e2e/framework/durations.tsv keeps it for the leases' longest-first
// order.
//
// Usage: testtimes [-durations] FILE
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"
)

// event is the part of a test2json event testtimes reads.
type event struct {
	Time    time.Time
	Action  string
	Package string
	Test    string
	Output  string
	Elapsed float64 // seconds
}

// leasedMark begins the line the end-to-end framework logs when a test has
// its local cluster lease (framework.LeaseCluster and friends).
const leasedMark = "leased "

// result is one package's or test's outcome: Action "pass", "fail" or
// "skip", and its wall time in seconds; Action "" when it never ended (the
// run was killed, or timed out).
type result struct {
	Name    string
	Action  string
	Elapsed float64
	// Waited is how long, in seconds, the test waited for its lease.
	Waited float64
	// Leased: the test logged a lease (it ran on a local cluster).
	Leased bool
}

// pkgResult is a package's result and its top-level tests'.
type pkgResult struct {
	result
	Tests []result
}

func main() {
	args := os.Args[1:]
	durations := len(args) == 2 && args[0] == "-durations"
	if durations {
		args = args[1:]
	}
	if len(args) != 1 {
		fmt.Fprintln(os.Stderr, "usage: testtimes [-durations] FILE (a go test -json event stream)")
		os.Exit(2)
	}
	f, err := os.Open(args[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer f.Close()
	pkgs, err := summarize(f)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if durations {
		printDurations(os.Stdout, pkgs)
		return
	}
	printTable(os.Stdout, pkgs)
}

// summarize reads the event stream and returns each package that ran a
// test, in the order the packages ended, with its top-level tests slowest
// first. Lines that are not JSON (a build error printed by go test) are
// skipped.
func summarize(r io.Reader) ([]pkgResult, error) {
	byName := map[string]*pkgResult{}
	var order []string
	pkgOf := func(name string) *pkgResult {
		p, ok := byName[name]
		if !ok {
			p = &pkgResult{result: result{Name: name}}
			byName[name] = p
			order = append(order, name)
		}
		return p
	}
	// started and waited are per "package test": the test's run event, and
	// the lease wait once its leased line came.
	started, waited := map[string]time.Time{}, map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e event
		if json.Unmarshal(sc.Bytes(), &e) != nil || e.Package == "" {
			continue
		}
		switch {
		case e.Test == "" && isEnd(e.Action):
			p := pkgOf(e.Package)
			p.Action, p.Elapsed = e.Action, e.Elapsed
		case e.Test != "" && !strings.Contains(e.Test, "/") && isEnd(e.Action):
			p := pkgOf(e.Package)
			w, leased := waited[e.Package+" "+e.Test]
			p.Tests = append(p.Tests, result{Name: e.Test, Action: e.Action, Elapsed: e.Elapsed, Waited: w, Leased: leased})
		case e.Test != "" && e.Action == "run":
			pkgOf(e.Package)
			started[e.Package+" "+e.Test] = e.Time
		case e.Test != "" && e.Action == "output" && strings.Contains(e.Output, leasedMark):
			key := e.Package + " " + e.Test
			if _, done := waited[key]; !done && !started[key].IsZero() {
				waited[key] = e.Time.Sub(started[key]).Seconds()
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	out := make([]pkgResult, 0, len(order))
	for _, name := range order {
		p := byName[name]
		sort.SliceStable(p.Tests, func(i, j int) bool { return p.Tests[i].Elapsed > p.Tests[j].Elapsed })
		out = append(out, *p)
	}
	return out, nil
}

func isEnd(action string) bool { return action == "pass" || action == "fail" || action == "skip" }

func printTable(w io.Writer, pkgs []pkgResult) {
	fmt.Fprintf(w, "%-60s %8s %8s  %s\n", "end-to-end package / test", "seconds", "waited", "result")
	for _, p := range pkgs {
		fmt.Fprintf(w, "%-60s %8.0f %8s  %s\n", p.Name, p.Elapsed, "", outcome(p.Action))
		for _, t := range p.Tests {
			fmt.Fprintf(w, "  %-58s %8.0f %8.0f  %s\n", t.Name, t.Elapsed, t.Waited, outcome(t.Action))
		}
	}
}

// printDurations prints "Test<TAB>seconds" for each passed top-level test
// that leased a local cluster (the others do not queue), its wall time less
// its lease wait, sorted by name.
func printDurations(w io.Writer, pkgs []pkgResult) {
	var lines []string
	for _, p := range pkgs {
		for _, t := range p.Tests {
			if t.Action == "pass" && t.Leased {
				lines = append(lines, fmt.Sprintf("%s\t%.0f", t.Name, t.Elapsed-t.Waited))
			}
		}
	}
	sort.Strings(lines)
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
}

func outcome(action string) string {
	switch action {
	case "":
		return "DID NOT FINISH"
	case "fail":
		return "FAIL"
	}
	return action
}
