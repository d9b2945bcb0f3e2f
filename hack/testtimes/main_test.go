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
