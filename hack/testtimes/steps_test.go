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
// failed case in gotestsum's "=== Failed" section and in the time table,
// whether the step ran in the foreground or beside the others (--beside,
// as the unit tests run in `make test`), where its output comes whole
// under its own heading.
func TestMakeTestNamesTheFailedCase(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		args []string
		more []*regexp.Regexp
	}{
		{name: "in the foreground", args: []string{"e2e-run"}},
		{name: "beside", args: []string{"--beside", "e2e-run"}, more: []*regexp.Regexp{
			regexp.MustCompile(`(?m)^=== make e2e-run \(ran beside the steps after it\): output$`),
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.Command(filepath.Join(root, "hack", "steps.sh"), c.args...)
			cmd.Dir = root
			cmd.Env = append(os.Environ(), "OUT="+t.TempDir(), "E2E_PACKAGES=./hack/testtimes/testdata/suite/", "NEST_DELIBERATE_FAILURE=1")
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) {
				t.Fatalf("steps.sh with a failing case: %v, want a non-zero exit\n%s", err, out)
			}
			for _, want := range append([]*regexp.Regexp{
				regexp.MustCompile(`=== FAIL: hack/testtimes/testdata/suite TestDeliberateFailure`),
				regexp.MustCompile(`deliberate failure: the case a broken suite would report`),
				regexp.MustCompile(`(?m)^e2e-run\s+\d+\s+FAILED`),
				regexp.MustCompile(`(?m)^  TestDeliberateFailure\s+\d+\s+\d+\s+FAIL$`),
				regexp.MustCompile(`(?m)^  TestPasses\s+\d+\s+\d+\s+pass$`),
				regexp.MustCompile(`make e2e-run failed`),
			}, c.more...) {
				if !want.Match(out) {
					t.Errorf("output lacks %s:\n%s", want, out)
				}
			}
			if strings.Contains(string(out), "=== FAIL: hack/testtimes/testdata/suite TestPasses") {
				t.Errorf("the passing case is reported failed:\n%s", out)
			}
		})
	}
}
