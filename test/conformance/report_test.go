package conformance

import (
	"encoding/xml"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"
)

// junit is the part of ginkgo's JUnit report a summary needs.
type junit struct {
	Suites []struct {
		Cases []struct {
			Name    string `xml:"name,attr"`
			Status  string `xml:"status,attr"`
			Skipped struct {
				Message string `xml:"message,attr"`
			} `xml:"skipped"`
			Failure *struct {
				Message string `xml:"message,attr"`
			} `xml:"failure"`
		} `xml:"testcase"`
	} `xml:"testsuite"`
}

// summary counts one run's specs by outcome.
type summary struct {
	Passed int
	// Failed names each failed spec and its first failure line.
	Failed []string
	// Skipped counts specs the run selected but did not run (a spec's own
	// Skip); NotSelected those outside its focus.
	Skipped, NotSelected int
	Duration             time.Duration
	Procs                int
}

func (s summary) ran() int { return s.Passed + len(s.Failed) }

func (s summary) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "passed %d, failed %d, skipped %d (of %d selected; %d not selected), %s with %d ginkgo processes\n",
		s.Passed, len(s.Failed), s.Skipped, s.ran()+s.Skipped, s.NotSelected, s.Duration.Round(time.Second), s.Procs)
	for _, f := range s.Failed {
		fmt.Fprintf(&b, "FAIL %s\n", f)
	}
	return b.String()
}

// summarize reads a ginkgo JUnit report. Ginkgo reports every spec of the
// suite: one outside the focus as skipped with the bare message "skipped",
// one that skipped itself with its reason. Suite set-up nodes are cases of
// their own and count only when they fail.
func summarize(path string, d time.Duration, procs int) (summary, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return summary{}, err
	}
	var r junit
	if err := xml.Unmarshal(data, &r); err != nil {
		return summary{}, fmt.Errorf("parse %s: %w", path, err)
	}
	s := summary{Duration: d, Procs: procs}
	for _, suite := range r.Suites {
		for _, c := range suite.Cases {
			spec := strings.HasPrefix(c.Name, "[It]")
			switch c.Status {
			case "passed":
				if spec {
					s.Passed++
				}
			case "skipped", "pending":
				if c.Skipped.Message == "skipped" {
					s.NotSelected++
				} else if spec {
					s.Skipped++
				}
			case "failed", "panicked", "interrupted", "aborted", "timedout":
				msg := ""
				if c.Failure != nil {
					msg, _, _ = strings.Cut(c.Failure.Message, "\n")
				}
				s.Failed = append(s.Failed, fmt.Sprintf("%s: %s", c.Name, msg))
			}
		}
	}
	sort.Strings(s.Failed)
	return s, nil
}

func TestSummarizeCountsOutcomes(t *testing.T) {
	path := t.TempDir() + "/junit.xml"
	report := `<testsuites><testsuite name="Kubernetes e2e suite">
<testcase name="[It] [sig-node] Pods should get a host IP [Conformance]" status="passed"></testcase>
<testcase name="[It] [sig-network] DNS should provide DNS for services [Conformance]" status="failed"><failure message="timed out&#10;more" type="failed"></failure></testcase>
<testcase name="[It] [sig-apps] Job should run [Conformance]" status="skipped"><skipped message="skipped"></skipped></testcase>
<testcase name="[SynchronizedBeforeSuite]" status="passed"></testcase>
</testsuite></testsuites>`
	if err := os.WriteFile(path, []byte(report), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := summarize(path, time.Minute, 4)
	if err != nil {
		t.Fatal(err)
	}
	if s.Passed != 1 || len(s.Failed) != 1 || s.NotSelected != 1 {
		t.Fatalf("summary %+v, want 1 passed, 1 failed, 1 not selected", s)
	}
	if want := "[It] [sig-network] DNS should provide DNS for services [Conformance]: timed out"; s.Failed[0] != want {
		t.Errorf("failure %q, want %q", s.Failed[0], want)
	}
}
