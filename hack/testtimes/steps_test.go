package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestMakeTestNamesTheFailedCase runs hack/steps.sh, which `make test` and
// CI run, on the end-to-end step with a stand-in package (testdata/suite)
// whose one parallel case fails: the run fails, and its output names the
// failed case in gotestsum's "=== Failed" section and in the time table.
func TestMakeTestNamesTheFailedCase(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(root, "hack", "steps.sh"), "e2e-run")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "OUT="+t.TempDir(), "E2E_PACKAGES=./hack/testtimes/testdata/suite/", "NEST_DELIBERATE_FAILURE=1")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("steps.sh with a failing case: %v, want a non-zero exit\n%s", err, out)
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`=== FAIL: hack/testtimes/testdata/suite TestDeliberateFailure`),
		regexp.MustCompile(`deliberate failure: the case a broken suite would report`),
		regexp.MustCompile(`(?m)^e2e-run\s+\d+\s+FAILED`),
		regexp.MustCompile(`(?m)^  TestDeliberateFailure\s+\d+\s+\d+\s+FAIL$`),
		regexp.MustCompile(`(?m)^  TestPasses\s+\d+\s+\d+\s+pass$`),
		regexp.MustCompile(`make e2e-run failed`),
	} {
		if !want.Match(out) {
			t.Errorf("output lacks %s:\n%s", want, out)
		}
	}
	if strings.Contains(string(out), "=== FAIL: hack/testtimes/testdata/suite TestPasses") {
		t.Errorf("the passing case is reported failed:\n%s", out)
	}
}
