package dispatch

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mercamap/relay/internal/destination"
)

// TestIdleDestinationsHoldNoGoroutineAndWakeOnNewEvents: once 300 destinations have
// delivered and are idle, no goroutine is left per destination (only the dispatcher's
// own: its lease round and log watcher), and a new event still reaches every one of
// them at once, woken by the account log and not by their poll (an hour here).
func TestIdleDestinationsHoldNoGoroutineAndWakeOnNewEvents(t *testing.T) {
	const n = 300
	sink := newTestSink(nil)
	var dests []destination.Destination
	for i := range n {
		dests = append(dests, bus(fmt.Sprintf("d%03d", i), fmt.Sprintf("%012d", i+1)))
	}
	before := runtime.NumGoroutine()
	r := newRig(t, sink, dests...)
	r.d.opts.Poll = time.Hour
	first := r.publish("job.completed") // waiting for each destination's setup check to pass
	r.start()
	all := func(id string) func() bool {
		return func() bool {
			for _, d := range dests {
				if !slices.Contains(sink.got(d.ID), id) {
					return false
				}
			}
			return true
		}
	}
	waitFor(t, "every destination's first event", all(first[0]))
	waitFor(t, "the pool to go idle", func() bool { return r.d.serving() == 0 && passesRunning() == 0 })
	// A pool goroutine that has left the queue may take a moment to return on a busy
	// machine: wait (bounded) for the count to settle at most 30 above the start.
	extra := 0
	deadline := time.Now().Add(5 * time.Second)
	for extra = runtime.NumGoroutine() - before; extra > 30 && time.Now().Before(deadline); extra = runtime.NumGoroutine() - before {
		time.Sleep(5 * time.Millisecond) // polling for the condition, with a deadline
	}
	if extra > 30 {
		t.Fatalf("%d goroutines more than before the dispatcher started, with %d idle destinations; the dispatcher's:\n%s",
			extra, n, dispatcherStacks())
	}

	second := r.publish("job.completed")
	waitFor(t, "every destination's second event, without a poll", all(second[0]))
}

// dispatcherStacks returns the stacks of the goroutines running dispatch code.
func dispatcherStacks() string {
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "relay/internal/dispatch.") {
			out = append(out, g)
		}
	}
	if len(out) > 5 {
		out = append(out[:5], fmt.Sprintf("… and %d more", len(out)-5))
	}
	return strings.Join(out, "\n\n")
}
