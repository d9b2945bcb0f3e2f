package framework

import (
	"errors"
	"strings"
	"testing"
)

// A probe result names its most frequent errors, probe names blanked, so
// two failures of one kind count together.
func TestProbeResultCountsErrorsByKind(t *testing.T) {
	p := &APIProber{}
	for _, e := range []string{"configmaps \"probe-k3x9-00001\" already exists", "configmaps \"probe-k3x9-00002\" already exists", "connection refused"} {
		p.record(errors.New(e), "")
	}
	got := ProbeResult{Calls: 3, Failed: 3, Errors: p.errors}.String()
	if !strings.Contains(got, "2x configmaps \"probe-N\" already exists") || !strings.Contains(got, "1x connection refused") {
		t.Errorf("ProbeResult = %q, want each kind with its count", got)
	}
}
