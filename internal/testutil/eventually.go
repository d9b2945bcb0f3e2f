// Package testutil holds helpers shared by Nest's controller and end-to-end
// tests.
package testutil

import (
	"testing"
	"time"
)

// pollInterval is how often Eventually retries.
const pollInterval = 100 * time.Millisecond

// Eventually calls check until it returns nil, and fails the test with check's
// last error when timeout passes. Tests poll with it instead of sleeping.
func Eventually(t testing.TB, timeout time.Duration, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not true after %s: %v", what, timeout, err)
		}
		time.Sleep(pollInterval)
	}
}
