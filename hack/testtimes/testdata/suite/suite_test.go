// Package suite is a stand-in end-to-end package for hack/testtimes'
// TestMakeTestNamesTheFailedCase: two parallel cases, one failing when
// NEST_DELIBERATE_FAILURE is set, as a broken end-to-end case would.
package suite

import (
	"os"
	"testing"
)

func TestPasses(t *testing.T) {
	t.Parallel()
}

func TestDeliberateFailure(t *testing.T) {
	t.Parallel()
	if os.Getenv("NEST_DELIBERATE_FAILURE") != "" {
		t.Fatal("deliberate failure: the case a broken suite would report")
	}
}
