package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestSummarizeKeepsPackagesAndTopLevelTestsSlowestFirst(t *testing.T) {
	stream := strings.Join([]string{
		`{"Action":"run","Package":"p/a","Test":"TestFast"}`,
		`{"Action":"run","Package":"p/a","Test":"TestSlow"}`,
		`{"Action":"pass","Package":"p/a","Test":"TestSlow/case","Elapsed":40}`,
		`{"Action":"pass","Package":"p/a","Test":"TestFast","Elapsed":2.5}`,
		`{"Action":"fail","Package":"p/a","Test":"TestSlow","Elapsed":41}`,
		`# p/b build failed`,
		`{"Action":"fail","Package":"p/a","Elapsed":44}`,
		`{"Action":"run","Package":"p/b","Test":"TestHung"}`,
	}, "\n")
	pkgs, err := summarize(strings.NewReader(stream))
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) != 2 {
		t.Fatalf("got %d packages, want 2: %+v", len(pkgs), pkgs)
	}
	a := pkgs[0]
	if a.Name != "p/a" || a.Action != "fail" || a.Elapsed != 44 {
		t.Errorf("package a = %+v", a.result)
	}
	if len(a.Tests) != 2 || a.Tests[0].Name != "TestSlow" || a.Tests[0].Action != "fail" || a.Tests[1].Name != "TestFast" {
		t.Errorf("tests of a = %+v, want TestSlow (fail) then TestFast, no subtests", a.Tests)
	}
	var out bytes.Buffer
	printTable(&out, pkgs)
	for _, want := range []string{"TestSlow", "FAIL", "p/b", "DID NOT FINISH"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "TestSlow/case") {
		t.Errorf("table lists a subtest:\n%s", out.String())
	}
}

func TestDurationsLeaveOutTheLeaseWait(t *testing.T) {
	stream := strings.Join([]string{
		`{"Time":"2026-11-28T10:00:00Z","Action":"run","Package":"p/a","Test":"TestWaits"}`,
		`{"Time":"2026-11-28T10:00:01Z","Action":"run","Package":"p/a","Test":"TestFails"}`,
		`{"Time":"2026-11-28T10:05:00Z","Action":"output","Package":"p/a","Test":"TestWaits","Output":"    lease.go:66: leased local cluster e2e1 (slot 1)\n"}`,
		`{"Time":"2026-11-28T10:06:00Z","Action":"output","Package":"p/a","Test":"TestWaits","Output":"    x_test.go:9: leased nothing, a later line\n"}`,
		`{"Time":"2026-11-28T10:07:00Z","Action":"pass","Package":"p/a","Test":"TestWaits","Elapsed":420}`,
		`{"Time":"2026-11-28T10:07:00Z","Action":"fail","Package":"p/a","Test":"TestFails","Elapsed":419}`,
		`{"Time":"2026-11-28T10:07:00Z","Action":"pass","Package":"p/a","Test":"TestNoCluster","Elapsed":1}`,
		`{"Time":"2026-11-28T10:07:00Z","Action":"fail","Package":"p/a","Elapsed":421}`,
	}, "\n")
	pkgs, err := summarize(strings.NewReader(stream))
	if err != nil {
		t.Fatal(err)
	}
	if got := pkgs[0].Tests[0]; got.Name != "TestWaits" || got.Waited != 300 {
		t.Errorf("TestWaits = %+v, want 300 s waited (its first leased line)", got)
	}
	var out bytes.Buffer
	printDurations(&out, pkgs)
	if out.String() != "TestWaits\t120\n" {
		t.Errorf("durations = %q, want TestWaits' 120 s alone: no failed test, none that leased no cluster", out.String())
	}
}
