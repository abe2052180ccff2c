package waittest

import (
	"errors"
	"testing"
	"time"
)

func TestWithinAsksUntilTheConditionHoldsAndNoLonger(t *testing.T) {
	n := 0
	if !Within(time.Second, func() bool { n++; return n == 3 }) || n != 3 {
		t.Fatalf("asked %d times", n)
	}
	start := time.Now()
	if Within(30*time.Millisecond, func() bool { return false }) {
		t.Fatal("a condition that never holds held")
	}
	if took := time.Since(start); took < 30*time.Millisecond {
		t.Fatalf("gave up after %s, before the limit", took)
	}
	n = 0
	NoError(t, time.Second, "the third call", func() error {
		if n++; n < 3 {
			return errors.New("not yet")
		}
		return nil
	})
}
