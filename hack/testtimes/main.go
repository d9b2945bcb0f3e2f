// Command testtimes prints the wall time of every package and top-level test
// in a `go test -json` event stream (test2json's format, as gotestsum's
// --jsonfile keeps it), slowest first within each package, with its result.
// make test (hack/steps.sh) prints it at the end of every run, so each note
// can report where the end-to-end time went.
//
// Usage: testtimes FILE
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// event is the part of a test2json event testtimes reads.
type event struct {
	Action  string
	Package string
	Test    string
	Elapsed float64 // seconds
}

// result is one package's or test's outcome: Action "pass", "fail" or
// "skip", and its wall time in seconds; Action "" when it never ended (the
// run was killed, or timed out).
type result struct {
	Name    string
	Action  string
	Elapsed float64
}

// pkgResult is a package's result and its top-level tests'.
type pkgResult struct {
	result
	Tests []result
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: testtimes FILE (a go test -json event stream)")
		os.Exit(2)
	}
	f, err := os.Open(os.Args[1])
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
			p.Tests = append(p.Tests, result{Name: e.Test, Action: e.Action, Elapsed: e.Elapsed})
		case e.Test != "" && e.Action == "run":
			pkgOf(e.Package)
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
	fmt.Fprintf(w, "%-60s %8s  %s\n", "end-to-end package / test", "seconds", "result")
	for _, p := range pkgs {
		fmt.Fprintf(w, "%-60s %8.0f  %s\n", p.Name, p.Elapsed, outcome(p.Action))
		for _, t := range p.Tests {
			fmt.Fprintf(w, "  %-58s %8.0f  %s\n", t.Name, t.Elapsed, outcome(t.Action))
		}
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
