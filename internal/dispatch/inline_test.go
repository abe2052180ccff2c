package dispatch

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mercamap/relay/internal/destination"
)

// pathBus is a bus that answers after latency and notes how each write reached it: in
// a pass's own goroutine (inline) or on a goroutine of its own (apart), and how many
// were in flight at once.
type pathBus struct {
	latency time.Duration

	mu            sync.Mutex
	inline, apart int
	flying, most  int
	took          []string
}

func (b *pathBus) Send(_ context.Context, _ destination.Destination, m destination.Message) error {
	buf := make([]byte, 64<<10)
	inPass := strings.Contains(string(buf[:runtime.Stack(buf, false)]), passFunc+"(")
	b.mu.Lock()
	if inPass {
		b.inline++
	} else {
		b.apart++
	}
	b.flying++
	b.most = max(b.most, b.flying)
	b.took = append(b.took, m.EventID)
	b.mu.Unlock()
	time.Sleep(b.latency) // the bus's round trip
	b.mu.Lock()
	b.flying--
	b.mu.Unlock()
	return nil
}

// paths is what the bus saw so far: writes inline and apart, the most at once, and the
// events in the order their writes started.
func (b *pathBus) paths() (inline, apart, most int, took []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.inline, b.apart, b.most, slices.Clone(b.took)
}

// Issue 54: a write the window hands out alone (nothing else of the destination in
// flight, nothing else it would let go before a write ends) is written in the pass's
// own goroutine; writes it lets go together each go on their own, and overlap.
func TestALoneWriteGoesInThePassAndWritesTheWindowLetsGoTogetherOverlap(t *testing.T) {
	d := bus("d1", "111122223333")
	pb := &pathBus{latency: 20 * time.Millisecond}
	r := windowRig(t, nil, d)
	r.d.opts.Sinks = map[destination.Connector]Sink{destination.EventBridge: pb}
	r.start()

	// One event at a time: each pass writes one, alone.
	for i := range 4 {
		ids := r.publish("job.completed")
		waitFor(t, fmt.Sprintf("event %d delivered", i), func() bool { return r.state(d.ID).Cursor == r.lastLogID() })
		if inline, apart, _, took := pb.paths(); inline != i+1 || apart != 0 || took[i] != ids[0] {
			t.Fatalf("after %d lone events: %d written inline, %d apart (%v); want each inline, in order", i+1, inline, apart, took)
		}
	}
	// Events of one key go one at a time whatever the window: each alone, so inline.
	ids := r.publish("job.completed", "job.completed", "job.completed", "job.completed")
	waitFor(t, "one key's events delivered", func() bool { return r.state(d.ID).Cursor == r.lastLogID() })
	if inline, apart, most, took := pb.paths(); inline != 8 || apart != 0 || most != 1 || !slices.Equal(took[4:], ids) {
		t.Fatalf("one key's 4 events: %d inline, %d apart, at most %d at once, order %v; want all inline, one at a time, in order %v",
			inline-4, apart, most, took[4:], ids)
	}
	// Events of many keys: the window lets them go together, each on its own.
	events := plan(rand.New(rand.NewPCG(54, 1)), "many", 40, 1000, false)
	publishPlanned(t, r.store, events, 40)
	waitFor(t, "many keys' events delivered", func() bool { return r.state(d.ID).Cursor == r.lastLogID() })
	inline, apart, most, took := pb.paths()
	checkOnceInOrder(t, d.ID, events, took[8:])
	if most < 2 || apart < 2 {
		t.Fatalf("40 events of many keys: %d inline, %d apart, at most %d at once; want them apart, overlapping", inline-8, apart, most)
	}
}

// A rate cap spaces the starts, and a write in flight does not hold the next back
// beyond the pace: a destination whose bus answers slower than the pace has writes
// overlap, none of them written inline while another waits out the pace.
func TestAPacedDestinationWhoseBusIsSlowerThanThePaceStillOverlaps(t *testing.T) {
	d := bus("d1", "111122223333")
	d.MaxRate = 100 // a start every 10 ms
	pb := &pathBus{latency: 60 * time.Millisecond}
	r := windowRig(t, nil, d)
	r.d.opts.Sinks = map[destination.Connector]Sink{destination.EventBridge: pb}
	r.start()
	events := plan(rand.New(rand.NewPCG(54, 2)), "paced", 20, 1000, false)
	publishPlanned(t, r.store, events, 20)
	waitFor(t, "the paced events delivered", func() bool { return r.state(d.ID).Cursor == r.lastLogID() })
	inline, apart, most, took := pb.paths()
	checkOnceInOrder(t, d.ID, events, took)
	if most < 3 || inline > 1 {
		t.Fatalf("20 events of many keys at 100/s, the bus 60 ms away: %d inline, %d apart, at most %d at once; want ~6 at once, only the last alone", inline, apart, most)
	}
}
