package framework

import (
	"regexp"
	"testing"
)

func TestPhasesListsEachPhaseInOrder(t *testing.T) {
	p := NewPhases()
	p.Done("first")
	p.Done("second")
	if got, want := p.String(), `^first \d+\.\ds, second \d+\.\ds$`; !regexp.MustCompile(want).MatchString(got) {
		t.Fatalf("phases = %q, want it to match %s", got, want)
	}
}
