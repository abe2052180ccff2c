// Package waittest is the one wait the tests of every package share: ask a condition
// again until it holds or a time limit passes. Only tests and their helpers import it;
// it starts nothing and changes nothing.
package waittest

import (
	"testing"
	"time"
)

// Poll is how long a wait sleeps before asking its condition again.
const Poll = 10 * time.Millisecond

// For fails t unless cond holds within timeout; what names what was awaited.
func For(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Within(timeout, cond) {
		t.Fatalf("timed out after %s waiting for %s", timeout, what)
	}
}

// Within reports whether cond holds within timeout, asked every Poll (and once more at
// the limit).
func Within(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(Poll)
	}
	return true
}

// NoError fails t, with f's last error, unless f returns nil within timeout.
func NoError(t testing.TB, timeout time.Duration, what string, f func() error) {
	t.Helper()
	var err error
	if !Within(timeout, func() bool { err = f(); return err == nil }) {
		t.Fatalf("%s: not within %s: %v", what, timeout, err)
	}
}
