package dispatch

import (
	"context"
	"fmt"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/failures"
	"github.com/mercamap/relay/internal/store"
	"github.com/mercamap/relay/internal/store/storetest"
)

// funcName is the name a goroutine's stack gives fn, taken from the function itself so
// that a rename renames what the stacks are searched for (a name typed as text would
// match nothing after a rename, and the tests that count on it would pass untested).
func funcName(fn any) string { return runtime.FuncForPC(reflect.ValueOf(fn).Pointer()).Name() }

var (
	passFunc    = funcName((*worker).pass)
	workerFuncs = passFunc[:strings.LastIndex(passFunc, ".")+1] // every method of a worker
	serveFunc   = funcName((*Dispatcher).serve)
)

// goroutineStacks returns the stacks of every goroutine that runs a worker's pass or
// serves the pool.
func goroutineStacks() string {
	buf := make([]byte, 1<<22)
	n := runtime.Stack(buf, true)
	var out []string
	for _, g := range strings.Split(string(buf[:n]), "\n\n") {
		if strings.Contains(g, workerFuncs) || strings.Contains(g, serveFunc+"(") {
			out = append(out, g)
		}
	}
	return strings.Join(out, "\n\n")
}

// passesRunning counts the goroutines running a worker's pass.
func passesRunning() int { return strings.Count(goroutineStacks(), passFunc+"(") }

// serving is how many pool goroutines run.
func (d *Dispatcher) serving() int {
	d.pool.mu.Lock()
	defer d.pool.mu.Unlock()
	return d.pool.serving
}

func (s *testSink) attemptsAt(dest string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for k, v := range s.attempts {
		if strings.HasPrefix(k, dest+"/") {
			n += v
		}
	}
	return n
}

func TestShutdownLeavesNoWorkerOrPassRunningAndNoSlotHeld(t *testing.T) {
	sink := newTestSink(func(dest string, _ destination.Message, _ int) error {
		switch {
		case strings.HasPrefix(dest, "throttled"):
			return failures.NewNotTaken("did not take the event: ThrottlingException", nil)
		case strings.HasPrefix(dest, "slow"):
			time.Sleep(20 * time.Millisecond) // a bus with a 20 ms round trip
		}
		return nil
	})
	r := newRig(t, sink, bus("throttled", "111111111111"), bus("slow", "222222222222"), bus("fine", "333333333333"))
	r.start()
	for range 5 {
		r.publish("job.completed", "job.completed", "job.completed")
	}
	waitFor(t, "every kind of worker busy", func() bool {
		return len(sink.got("fine")) > 0 && len(sink.got("slow")) > 0 && sink.attemptsAt("throttled") >= 2
	})
	r.stop()
	if s := goroutineStacks(); s != "" {
		t.Fatalf("goroutines of workers or passes left after Run returned:\n%s", s)
	}
	if n := r.d.serving(); n != 0 {
		t.Fatalf("%d pool goroutines still serving after Run returned", n)
	}
}

// TestALostLeaseEndsTheWorkerAndFreesItsSlot: another replica takes the lease while a
// write is in flight (as after a Redis failover that lost the lease key). The write's
// commit, behind it, is refused, and the worker ends: with delivery.uncommitted_max 1
// no other write starts before that answer, so only the write in flight lands.
func TestALostLeaseEndsTheWorkerAndFreesItsSlot(t *testing.T) {
	release := make(chan struct{})
	var inFlight atomic.Bool
	sink := newTestSink(func(string, destination.Message, int) error {
		if inFlight.CompareAndSwap(false, true) {
			<-release
		}
		return nil
	})
	r := newRig(t, sink, bus("orders", "111122223333"))
	r.d.opts.Delivery.UncommittedMax = 1
	r.start()
	r.publish("job.completed", "job.completed", "job.completed")
	waitFor(t, "the first write in flight", inFlight.Load)
	// The write runs in the worker's pass: the count the tests below rely on must see it.
	if n := passesRunning(); n != 1 {
		t.Fatalf("%d passes counted with one write in flight, want 1", n)
	}

	// Another replica takes the lease while the write is in flight.
	ctx := context.Background()
	if err := storetest.EndHold(ctx, r.store.Client(), acct, r.d.opts.Owner); err != nil { // its hold ends
		t.Fatal(err)
	}
	if tok, err := acquireLease(ctx, r.store, store.Ref{Account: acct, ID: "orders"}, "another-replica", time.Minute); err != nil || tok == 0 {
		t.Fatalf("another replica could not take the lease: %d, %v", tok, err)
	}
	close(release)
	waitFor(t, "the worker to end", func() bool { return goroutineStacks() == "" })
	if n := r.d.serving(); n != 0 {
		t.Fatalf("%d pool goroutines still serving after the worker ended", n)
	}
	if got := sink.got("orders"); len(got) != 1 {
		t.Fatalf("the worker wrote %d events, want only the one in flight when the lease was lost", len(got))
	}
}

func TestDestinationsInBackoffWaitWithoutAPassRunning(t *testing.T) {
	sink := newTestSink(func(string, destination.Message, int) error {
		return failures.NewNotTaken("did not take the event: ThrottlingException", nil)
	})
	var dests []destination.Destination
	for i := range 8 {
		dests = append(dests, bus(fmt.Sprintf("throttled%d", i), strings.Repeat(fmt.Sprint(i+1), 12)))
	}
	r := newRig(t, sink, dests...)
	r.d.opts.MaxActive = 1 // every pass but one waits its turn
	r.start()
	r.publish("job.completed")

	// While all eight keep retrying, a pass runs only while it holds the slot: a
	// destination waiting out its backoff holds neither a slot nor a pass goroutine
	// (with its grown stack).
	most := 0
	waitFor(t, "each destination to retry three times", func() bool {
		most = max(most, passesRunning())
		for _, d := range dests {
			if sink.attemptsAt(d.ID) < 3 {
				return false
			}
		}
		return true
	})
	if most > 1 {
		t.Fatalf("up to %d passes ran at once with one slot: destinations in backoff kept theirs", most)
	}
}

// TestReadingTheStateAgainWhileCommitsAreBehindSendsNothingTwice: a worker whose state
// turns stale (here an API call on this replica) while its delivered events wait
// uncommitted in the account's committer (commit_wait an hour: they wait until hurried)
// reads the stored cursor only once those commits are recorded: it goes on after the
// last event it wrote, and the bus gets each event once, in order.
func TestReadingTheStateAgainWhileCommitsAreBehindSendsNothingTwice(t *testing.T) {
	release := make(chan struct{})
	var writes atomic.Int32
	sink := newTestSink(func(string, destination.Message, int) error {
		if writes.Add(1) == 3 {
			<-release
		}
		return nil
	})
	r := newRig(t, sink, bus("orders", "111122223333"))
	r.d.opts.Delivery.CommitWait = time.Hour
	r.start()
	ids := r.publish("job.completed", "job.completed", "job.completed", "job.completed", "job.completed", "job.completed")
	waitFor(t, "the third write held at the sink", func() bool { return writes.Load() == 3 })
	r.d.touch("orders") // as a retry or a replay asked on this replica does
	close(release)
	last, err := storetest.LastLogID(context.Background(), r.store.Client(), acct)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the six events at the sink", func() bool { return len(sink.got("orders")) >= 6 })
	// The last writes' commits wait for commit_wait (an hour) unless hurried: the next
	// read of the state hurries them, as any later change would.
	r.d.touch("orders")
	waitFor(t, "the sixth event committed", func() bool { return r.state("orders").Cursor == last })
	waitFor(t, "the pool to go idle", func() bool { return r.d.serving() == 0 && passesRunning() == 0 })
	if got := sink.got("orders"); !slices.Equal(got, ids) {
		t.Fatalf("the bus got %v, want each of %v once, in order", got, ids)
	}
}
