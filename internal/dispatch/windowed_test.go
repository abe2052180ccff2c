package dispatch

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/failures"
	"github.com/mercamap/relay/internal/netdelay"
	"github.com/mercamap/relay/internal/store"
	"github.com/mercamap/relay/internal/store/storetest"
	"github.com/mercamap/relay/internal/testpeer"
	"github.com/mercamap/relay/internal/window"
)

// The tests of the window of writes (issue 53): many writes of a destination in flight
// at once, those of one ordering key one at a time in arrival order, never more than the
// window, never past the look-ahead; the rules that held with one write at a time (20
// rejections in a row disable, a pause stops writes, a throttle counts nothing) with
// writes in flight; and what a takeover writes again under state format 2.

// planned is one event of a test's log: its id and the store it names ("" for none:
// its ordering key is then the account).
type planned struct{ id, store string }

// plan makes n events over stores stores (a few name none), in arrival order. With
// skew, half of them go to a few hot stores.
func plan(rng *rand.Rand, tag string, n, stores int, skew bool) []planned {
	out := make([]planned, n)
	for i := range out {
		s := fmt.Sprintf("st_%d", rng.IntN(stores))
		switch {
		case rng.IntN(20) == 0:
			s = "" // the account's key
		case skew && rng.IntN(2) == 0:
			s = fmt.Sprintf("st_%d", rng.IntN(min(3, stores)))
		}
		out[i] = planned{id: fmt.Sprintf("fetcher.job.completed.%s-%05d", tag, i), store: s}
	}
	return out
}

// keyOf is the ordering key dispatch gives p: its store, else the account.
func (p planned) keyOf() string {
	if p.store == "" {
		return acct
	}
	return p.store
}

// publishPlanned appends the events to the account's log in batches of batch, in order.
func publishPlanned(t *testing.T, st *store.Store, events []planned, batch int) {
	t.Helper()
	for from := 0; from < len(events); from += batch {
		var appends []store.Append
		for _, e := range events[from:min(from+batch, len(events))] {
			data := `{"jobId":"` + e.id + `"}`
			if e.store != "" {
				data = `{"jobId":"` + e.id + `","metadata":{"store_id":"` + e.store + `"}}`
			}
			appends = append(appends, store.Append{Accounts: []string{acct}, Entry: store.Entry{
				EventID: e.id, Type: "job.completed", Time: time.Now().UTC().Format(time.RFC3339Nano),
				SchemaVersion: "1.0.0", Data: []byte(data)}})
		}
		if _, err := st.AppendBatch(context.Background(), appends, time.Hour, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
}

// busLog is what a bus took, in the order it took it, whoever wrote it.
type busLog struct {
	mu   sync.Mutex
	took []string
}

func (l *busLog) add(id string) {
	l.mu.Lock()
	l.took = append(l.took, id)
	l.mu.Unlock()
}

func (l *busLog) ids() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.took)
}

// busDouble is one destination's bus far away: unlike testSink, it holds no lock while
// a write is under way, so writes overlap as they do against a real bus. Each write
// takes latency(), or waits for the test to let it go (hold). With strict, every write
// is checked as it starts against what the window promises, the events' places in the
// log known beforehand: nothing of its key in flight or unfinished before it (so each
// key's events reach the bus in arrival order, each once), no more than window writes
// at once, none at or past the look-ahead from the oldest event not yet ended at the
// bus (which is never older than the worker's oldest unfinished one).
type busDouble struct {
	window, ahead int
	strict        bool
	pos           map[string]int   // event id → its place in the log
	keys          []string         // by place: its ordering key
	byKey         map[string][]int // key → its events' places, in order
	latency       func(r *rand.Rand) time.Duration
	answer        func(id string, attempt int) error // nil, or it answers nil: taken
	log           *busLog

	// cut, once closed, is a SIGKILL of the replica writing: a write under way lands at
	// the bus and is never answered, and no later one lands (both wait for after).
	cut, after chan struct{}

	mu         sync.Mutex
	rng        *rand.Rand
	keyDone    map[string]int // key → how many of its events ended
	ended      []bool         // by place
	oldest     int            // the oldest place not ended
	flying     map[string]bool
	inFlight   int
	most       int   // the most writes in flight at once
	farthest   int   // the farthest a write started past the oldest event not ended
	starts     []int // writes in flight as each write started (itself included)
	notTaken   int   // answers not taken so far
	notTakenAt []int // by start: answers not taken before it
	attempts   map[string]int
	hold       bool
	gates      map[string]chan struct{} // the writes held (hold), by event id
	problems   []string
}

func newBusDouble(events []planned, win int, log *busLog, seed uint64) *busDouble {
	b := &busDouble{window: win, ahead: window.AheadFactor * win, strict: true, pos: map[string]int{},
		byKey: map[string][]int{}, log: log, rng: rand.New(rand.NewPCG(seed, uint64(win))), keyDone: map[string]int{},
		ended: make([]bool, len(events)), flying: map[string]bool{}, attempts: map[string]int{},
		gates: map[string]chan struct{}{}}
	for i, e := range events {
		b.pos[e.id] = i
		b.keys = append(b.keys, e.keyOf())
		b.byKey[e.keyOf()] = append(b.byKey[e.keyOf()], i)
	}
	return b
}

func (b *busDouble) Send(_ context.Context, _ destination.Destination, m destination.Message) error {
	b.mu.Lock()
	p, known := b.pos[m.EventID]
	if !known {
		b.problems = append(b.problems, "a write of an event never published: "+m.EventID)
		b.mu.Unlock()
		return failures.NewRejected("unknown event", nil)
	}
	key := b.keys[p]
	b.attempts[m.EventID]++
	attempt := b.attempts[m.EventID]
	if b.flying[key] {
		b.problems = append(b.problems, fmt.Sprintf("%s (key %s) started while another write of its key was in flight", m.EventID, key))
	}
	if b.strict {
		if done := b.keyDone[key]; done >= len(b.byKey[key]) || b.byKey[key][done] != p {
			b.problems = append(b.problems, fmt.Sprintf("%s (place %d, key %s) started before the events of its key before it ended, or after it ended", m.EventID, p, key))
		}
		if b.inFlight+1 > b.window {
			b.problems = append(b.problems, fmt.Sprintf("%s started with %d writes in flight: the window is %d", m.EventID, b.inFlight, b.window))
		}
		if p-b.oldest >= b.ahead {
			b.problems = append(b.problems, fmt.Sprintf("%s (place %d) started %d past the oldest unfinished event (place %d): the look-ahead is %d",
				m.EventID, p, p-b.oldest, b.oldest, b.ahead))
		}
	}
	b.flying[key] = true
	b.inFlight++
	b.most = max(b.most, b.inFlight)
	b.farthest = max(b.farthest, p-b.oldest)
	b.starts = append(b.starts, b.inFlight)
	b.notTakenAt = append(b.notTakenAt, b.notTaken)
	var gate chan struct{}
	if b.hold {
		gate = make(chan struct{})
		b.gates[m.EventID] = gate
	}
	var wait time.Duration
	if b.latency != nil {
		wait = b.latency(b.rng)
	}
	cut, after := b.cut, b.after
	b.mu.Unlock()

	if cut != nil {
		select {
		case <-cut: // killed before it started: it never lands
			<-after
			return failures.NewNotTaken("the replica is gone", nil)
		default:
		}
	}
	switch {
	case gate != nil:
		<-gate
	case cut != nil:
		select {
		case <-time.After(wait):
		case <-cut:
		}
	default:
		time.Sleep(wait) // the bus's round trip
	}
	var err error
	if b.answer != nil {
		err = b.answer(m.EventID, attempt)
	}
	outcome := failures.Classify(err).Class
	if outcome == failures.Delivered {
		b.log.add(m.EventID)
	}
	if cut != nil {
		select {
		case <-cut: // it landed (or not), and its writer is gone: no answer
			<-after
			return failures.NewNotTaken("the replica is gone", nil)
		default:
		}
	}

	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.flying, key)
	b.inFlight--
	switch outcome {
	case failures.Delivered, failures.Rejected:
		if b.strict {
			b.keyDone[key]++
			b.ended[p] = true
			for b.oldest < len(b.ended) && b.ended[b.oldest] {
				b.oldest++
			}
		}
	default:
		b.notTaken++
	}
	return err
}

// held lists the writes held at the bus (hold), oldest place first.
func (b *busDouble) held() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var ids []string
	for id := range b.gates {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(x, y string) int { return b.pos[x] - b.pos[y] })
	return ids
}

// letAll ends every held write and holds none from now on (a test's cleanup, before
// the dispatcher's: a write held forever would keep it from stopping).
func (b *busDouble) letAll() {
	b.mu.Lock()
	b.hold = false
	gates := b.gates
	b.gates = map[string]chan struct{}{}
	b.mu.Unlock()
	for _, g := range gates {
		close(g)
	}
}

// let ends the held write of id.
func (b *busDouble) let(id string) {
	b.mu.Lock()
	gate := b.gates[id]
	delete(b.gates, id)
	b.mu.Unlock()
	close(gate)
}

func (b *busDouble) writes() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.starts)
}

func (b *busDouble) check(t *testing.T, dest string) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, p := range b.problems {
		if i == 10 {
			t.Errorf("%s: %d problems more", dest, len(b.problems)-10)
			break
		}
		t.Errorf("%s: %s", dest, p)
	}
}

// buses routes each destination's writes to its own bus double.
type buses map[string]*busDouble

func (bs buses) Send(ctx context.Context, d destination.Destination, m destination.Message) error {
	return bs[d.ID].Send(ctx, d, m)
}

// windowRig is a rig whose destinations write through their bus doubles.
func windowRig(t *testing.T, bs buses, dests ...destination.Destination) *rig {
	t.Helper()
	r := newRig(t, newTestSink(nil), dests...)
	r.d.opts.Sinks = map[destination.Connector]Sink{destination.EventBridge: bs, destination.Kinesis: bs, destination.PubSub: bs}
	r.d.opts.Delivery.InFlight = destination.DefaultInFlight
	return r
}

// startFollowed starts the rig and waits until the account's log follower runs. A
// follower's start marks every worker of the account stale, and a stale worker's pass
// stops and waits for its writes in flight: a test that holds writes at the bus
// publishes after it, or the pass it holds could wait for them for good.
func (r *rig) startFollowed() {
	r.t.Helper()
	r.start()
	waitFor(r.t, "the account's log followed", func() bool {
		f := r.d.feedOf(acct)
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.owner != nil
	})
}

// lastLogID is the id of the account log's newest entry.
func (r *rig) lastLogID() string {
	r.t.Helper()
	last, err := storetest.LastLogID(context.Background(), r.store.Client(), acct)
	if err != nil {
		r.t.Fatal(err)
	}
	return last
}

// checkOnceInOrder fails t unless took holds every event of events exactly once, each
// key's in arrival order.
func checkOnceInOrder(t *testing.T, dest string, events []planned, took []string) {
	t.Helper()
	seen := map[string]int{}
	for _, id := range took {
		seen[id]++
	}
	missing, twice := 0, 0
	for _, e := range events {
		switch n := seen[e.id]; {
		case n == 0:
			missing++
		case n > 1:
			twice++
		}
	}
	if missing > 0 || twice > 0 || len(took) != len(events) {
		t.Errorf("%s: the bus took %d writes of %d events: %d missing, %d more than once", dest, len(took), len(events), missing, twice)
	}
	if n := keyDisorder(events, took); n > 0 {
		t.Errorf("%s: %d events reached the bus before an earlier event of their key", dest, n)
	}
}

// keyDisorder counts the events whose first arrival in took came before the first
// arrival of an event of their key published earlier.
func keyDisorder(events []planned, took []string) int {
	pos, key := map[string]int{}, map[string]string{}
	for i, e := range events {
		pos[e.id], key[e.id] = i, e.keyOf()
	}
	seen, latest, n := map[string]bool{}, map[string]int{}, 0
	for _, id := range took {
		if seen[id] {
			continue
		}
		seen[id] = true
		k := key[id]
		if last, ok := latest[k]; ok && pos[id] < last {
			n++
		}
		latest[k] = max(latest[k], pos[id])
	}
	return n
}

// TestWindowPropertyEachKeyInOrderWithinTheWindowAndTheLookAheadEveryEventOnce: four
// destinations of one account with windows of 1, 4, 16 and 64 writes deliver the same
// log, each write taking a random time (mostly short, some far longer, so a slow write
// holds the oldest unfinished event while others run ahead), over a few seeds: many
// stores, a few, and hot ones. At every write's start the bus checks that nothing of
// its key is in flight or unfinished before it, that no more than the window are in
// flight, and that it is not past the look-ahead; at the end every event reached each
// bus exactly once, each key's in arrival order, the cursor stands at the log's end and
// nothing counted.
func TestWindowPropertyEachKeyInOrderWithinTheWindowAndTheLookAheadEveryEventOnce(t *testing.T) {
	for _, c := range []struct {
		seed           uint64
		events, stores int
		skew           bool
	}{
		{seed: 1, events: 500, stores: 300},
		{seed: 2, events: 500, stores: 40, skew: true},
		{seed: 3, events: 300, stores: 5},
	} {
		t.Run(fmt.Sprintf("seed%d-%dstores", c.seed, c.stores), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(c.seed, 53))
			events := plan(rng, fmt.Sprint("s", c.seed), c.events, c.stores, c.skew)
			bs, logs := buses{}, map[string]*busLog{}
			var dests []destination.Destination
			for _, win := range []int{1, 4, 16, 64} {
				d := bus(fmt.Sprintf("win%d", win), fmt.Sprintf("%012d", win))
				d.InFlight = win
				dests = append(dests, d)
				logs[d.ID] = &busLog{}
				b := newBusDouble(events, win, logs[d.ID], c.seed)
				b.latency = func(r *rand.Rand) time.Duration {
					if r.IntN(10) == 0 {
						return time.Duration(5+r.IntN(25)) * time.Millisecond // a slow answer
					}
					return time.Duration(r.IntN(2000)) * time.Microsecond
				}
				bs[d.ID] = b
			}
			r := windowRig(t, bs, dests...)
			r.start()
			publishPlanned(t, r.store, events[:c.events/2], 50)
			publishPlanned(t, r.store, events[c.events/2:], 7) // while the first half is being written
			last := r.lastLogID()
			for _, d := range dests {
				waitFor(t, d.ID+"'s cursor at the log's end", func() bool { return r.state(d.ID).Cursor == last })
			}
			for _, d := range dests {
				b := bs[d.ID]
				b.check(t, d.ID)
				checkOnceInOrder(t, d.ID, events, logs[d.ID].ids())
				if st := r.state(d.ID); st.Status != store.Active || st.ConsecutiveFailures != 0 {
					t.Errorf("%s: %s with %d failures in a row, want active and 0", d.ID, st.Status, st.ConsecutiveFailures)
				}
				b.mu.Lock()
				t.Logf("%s: %d writes, at most %d at once (window %d), at most %d past the oldest unfinished event (look-ahead %d)",
					d.ID, len(b.starts), b.most, b.window, b.farthest, b.ahead)
				// With more keys than the window, the writes overlap: the window is used.
				if b.window > 1 && c.stores > b.window && b.most < 2 {
					t.Errorf("%s: never more than one write at once with a window of %d", d.ID, b.window)
				}
				b.mu.Unlock()
			}
		})
	}
}

// verdicts answers each event's first write as the test decided when it let it go;
// a write again is taken.
type verdicts struct {
	mu  sync.Mutex
	err map[string]error
}

func (v *verdicts) set(id string, err error) {
	v.mu.Lock()
	v.err[id] = err
	v.mu.Unlock()
}

func (v *verdicts) answer(id string, attempt int) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if attempt > 1 {
		return nil
	}
	return v.err[id]
}

// attemptsLogged is how many attempts the destination's attempt log holds.
func (r *rig) attemptsLogged(id string) []store.Attempt {
	r.t.Helper()
	a, err := r.store.Attempts(context.Background(), store.Ref{Account: acct, ID: id}, 0, 10000)
	if err != nil {
		r.t.Fatal(err)
	}
	return a
}

// TestTwentyRejectionsInARowWithWritesInFlightDisableCountedInTheOrderWritesEnd: a
// window of 16 writes, every one held at the bus until the test lets it end, so the
// order writes end is the test's, not the order they started. 19 rejections, a
// delivery (the run of rejections ends), then 20 rejections: the 20th disables. After
// it no write starts; the 15 in flight end and are recorded (a destination's window
// less one is the most that end after the 20th), and none of them counts.
func TestTwentyRejectionsInARowWithWritesInFlightDisableCountedInTheOrderWritesEnd(t *testing.T) {
	const win = 16
	rng := rand.New(rand.NewPCG(20, 53))
	events := plan(rng, "rej", 100, 1, false)
	for i := range events {
		events[i].store = fmt.Sprintf("st_%d", i) // a key each: the window fills
	}
	v := &verdicts{err: map[string]error{}}
	b := newBusDouble(events, win, &busLog{}, 20)
	b.hold, b.answer = true, v.answer
	d := bus("orders", "111122223333")
	d.InFlight = win
	r := windowRig(t, buses{"orders": b}, d)
	r.startFollowed() // then the events: the follower's start, past them, would stop the held writes' pass
	publishPlanned(t, r.store, events, 100)
	t.Cleanup(b.letAll)

	rejected := failures.NewRejected("AccessDeniedException: the role may not write to the bus", nil)
	ended := 0
	// end lets one held write end with err, picking the newest or the oldest held in
	// turn (the order writes end is not the order they started), and waits for the
	// window to fill again.
	end := func(err error, refill bool) {
		t.Helper()
		held := b.held()
		id := held[len(held)-1]
		if ended%2 == 1 {
			id = held[0]
		}
		v.set(id, err)
		b.let(id)
		ended++
		if refill {
			waitFor(t, fmt.Sprintf("the window full again after %d writes ended", ended), func() bool {
				return len(b.held()) == win && b.writes() == win+ended
			})
		}
	}
	waitFor(t, "the window full", func() bool { return len(b.held()) == win })
	for range 19 {
		end(rejected, true)
	}
	waitFor(t, "19 rejections counted", func() bool { return r.state("orders").ConsecutiveFailures == 19 })
	end(nil, true) // a delivery: the run ends
	waitFor(t, "the count back to 0", func() bool { return r.state("orders").ConsecutiveFailures == 0 })
	for range 19 {
		end(rejected, true)
	}
	end(rejected, false) // the 20th in a row
	waitFor(t, "the destination disabled", func() bool { return r.state("orders").Status == store.Disabled })
	if n := b.writes(); n != win+ended-1 {
		t.Fatalf("%d writes started, want %d: none after the 20th rejection", n, win+ended-1)
	}
	// The writes in flight end, some taken, some not: each is recorded, none counts.
	inFlight := b.held()
	if len(inFlight) != win-1 {
		t.Fatalf("%d writes in flight after the 20th rejection, want %d", len(inFlight), win-1)
	}
	for i, id := range inFlight {
		if i%2 == 0 {
			v.set(id, rejected)
		}
		b.let(id)
	}
	waitFor(t, "every write recorded", func() bool { return len(r.attemptsLogged("orders")) == b.writes() })
	waitFor(t, "the worker idle", func() bool { return passesRunning() == 0 })
	if n := b.writes(); n != 40+win-1 {
		t.Fatalf("%d writes in all, want %d: 40 up to the 20th rejection and the %d in flight then", n, 40+win-1, win-1)
	}
	st := r.state("orders")
	if st.Status != store.Disabled || st.Disabled == nil {
		t.Fatalf("after the writes in flight ended: %+v, want disabled", st)
	}
	t.Logf("after the writes in flight ended: %d failures in a row on the card", st.ConsecutiveFailures)
	if notes := r.outbox(); countOperator(notes, "destination.disabled") != 1 {
		t.Errorf("operator events %+v, want one destination.disabled", notes)
	}
	if n := countIn(r.channelTypes(store.DestinationChannel("orders")), "destination.disabled"); n != 1 {
		t.Errorf("%d destination.disabled channel events, want 1", n)
	}
	b.check(t, "orders")
}

func countOperator(notes []store.OperatorEvent, typ string) int {
	n := 0
	for _, e := range notes {
		if e.Type == typ {
			n++
		}
	}
	return n
}

// TestAPauseWithWritesInFlightStartsNoneAfterItAndRecordsThem: eight writes held at
// the bus when the destination is paused. The answer says a write was in flight; no
// write starts after it; the eight end (one not taken) and each is recorded, and none
// counts. An activation from where the pause stopped writes the one not taken and what
// followed, each key in order.
func TestAPauseWithWritesInFlightStartsNoneAfterItAndRecordsThem(t *testing.T) {
	const win = 8
	rng := rand.New(rand.NewPCG(8, 53))
	events := plan(rng, "pause", 40, 1, false)
	for i := range events {
		events[i].store = fmt.Sprintf("st_%d", i)
	}
	log := &busLog{}
	v := &verdicts{err: map[string]error{}}
	b := newBusDouble(events, win, log, 8)
	b.hold, b.answer = true, v.answer
	d := bus("orders", "111122223333")
	d.InFlight = win
	r := windowRig(t, buses{"orders": b}, d)
	r.d.opts.StateFormat = func() int { return 2 }
	r.startFollowed()
	publishPlanned(t, r.store, events, 40)
	t.Cleanup(b.letAll)
	waitFor(t, "the window full", func() bool { return len(b.held()) == win })

	ctx := context.Background()
	change, err := r.d.Pause(ctx, "orders", false)
	if err != nil {
		t.Fatal(err)
	}
	if !change.WriteInFlight {
		t.Fatal("the pause answered no write in flight with eight held at the bus")
	}
	held := b.held()
	v.set(held[0], failures.NewNotTaken("did not take the event: ThrottlingException", nil))
	for _, id := range held {
		b.let(id)
	}
	waitFor(t, "the eight writes recorded", func() bool { return len(r.attemptsLogged("orders")) == win })
	waitFor(t, "the worker idle", func() bool { return passesRunning() == 0 })
	if n := b.writes(); n != win {
		t.Fatalf("%d writes started, want the %d in flight at the pause and none after", n, win)
	}
	types := r.channelTypes(store.DestinationChannel("orders"))
	if countIn(types, "delivery.succeeded") != win-1 || countIn(types, "delivery.not_taken") != 1 {
		t.Fatalf("channel %v, want the %d deliveries and the write not taken recorded", types, win-1)
	}
	if st := r.state("orders"); st.Status != store.Paused || st.ConsecutiveFailures != 0 {
		t.Fatalf("after the writes in flight ended: %s, %d failures; want paused, none", st.Status, st.ConsecutiveFailures)
	}

	b.check(t, "orders")

	// Resumed from where the pause stopped: the event not taken, then what followed.
	b.mu.Lock()
	b.hold, b.strict = false, false
	b.mu.Unlock()
	if _, err := r.d.ActivateSince(ctx, "orders", false, store.SincePaused); err != nil {
		t.Fatal(err)
	}
	last := r.lastLogID()
	waitFor(t, "the cursor at the log's end", func() bool { return r.state("orders").Cursor == last })
	took := log.ids()
	seen, again := map[string]bool{}, 0
	for _, id := range took {
		if seen[id] {
			again++
		}
		seen[id] = true
	}
	if len(seen) != len(events) || keyDisorder(events, took) > 0 {
		t.Errorf("after the activation the bus has %d of %d events, %d of them before an earlier one of their key",
			len(seen), len(events), keyDisorder(events, took))
	}
	// What ended past the cursor before the pause stays ended (state format 2: the
	// activation carries the done field over to its new epoch): nothing is written again.
	if again > 0 {
		t.Errorf("%d events written again after the activation since the pause, want none", again)
	}
	t.Logf("written again after the activation since the pause: %d", again)
}

// TestAThrottledBusShrinksTheWindowCountsNothingAndLosesNothing: a window of 16
// writes over 100 stores, each write 2–4 ms. After 150 deliveries the bus throttles
// every write (not taken) for 60 answers, then takes them again. While it throttles,
// the writes in flight at the bus fall to one (the window halves per write not taken);
// after, they grow back. Nothing counts (no failure in a row, still active), nothing is
// lost or written twice, each key's events arrive in order, and the look-ahead holds.
func TestAThrottledBusShrinksTheWindowCountsNothingAndLosesNothing(t *testing.T) {
	const (
		win       = 16
		before    = 150 // deliveries before the throttle
		throttled = 60  // answers not taken
		settled   = 40  // not-taken answers after which every write in flight started under the shrunk window
	)
	rng := rand.New(rand.NewPCG(16, 53))
	events := plan(rng, "thr", 600, 100, false)
	log := &busLog{}
	b := newBusDouble(events, win, log, 16)
	b.latency = func(r *rand.Rand) time.Duration { return time.Duration(2000+r.IntN(2000)) * time.Microsecond }
	var mu sync.Mutex
	delivered, refused := 0, 0
	b.answer = func(string, int) error {
		mu.Lock()
		defer mu.Unlock()
		if delivered >= before && refused < throttled {
			refused++
			return failures.NewNotTaken("did not take the event: ThrottlingException: Rate exceeded", nil)
		}
		delivered++
		return nil
	}
	d := bus("orders", "111122223333")
	r := windowRig(t, buses{"orders": b}, d) // in_flight: delivery.in_flight's 16
	publishPlanned(t, r.store, events, 100)
	r.start()
	last := r.lastLogID()
	waitFor(t, "the cursor at the log's end", func() bool { return r.state("orders").Cursor == last })

	b.check(t, "orders")
	checkOnceInOrder(t, "orders", events, log.ids())
	st := r.state("orders")
	if st.Status != store.Active || st.ConsecutiveFailures != 0 {
		t.Errorf("after the throttle: %s with %d failures in a row, want active and none counted", st.Status, st.ConsecutiveFailures)
	}
	if n := countIn(r.channelTypes(store.DestinationChannel("orders")), "delivery.not_taken"); n != throttled {
		t.Errorf("%d delivery.not_taken channel events, want %d", n, throttled)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	mostBefore, mostThrottled, mostAfter := 0, 0, 0
	for i, n := range b.starts {
		switch at := b.notTakenAt[i]; {
		case at == 0:
			mostBefore = max(mostBefore, n)
		case at >= settled && at < throttled:
			mostThrottled = max(mostThrottled, n)
		case at >= throttled:
			mostAfter = max(mostAfter, n)
		}
	}
	t.Logf("writes in flight at once: at most %d before the throttle, %d while it throttled (after %d answers not taken), %d after",
		mostBefore, mostThrottled, settled, mostAfter)
	if mostBefore < win/2 {
		t.Errorf("at most %d writes in flight before the throttle: the window of %d was never used", mostBefore, win)
	}
	if mostThrottled != 1 {
		t.Errorf("%d writes in flight at once while the bus throttled, want 1: the window did not shrink", mostThrottled)
	}
	if mostAfter < win/2 {
		t.Errorf("at most %d writes in flight after the throttle: the window did not grow back", mostAfter)
	}
}

// TestATakeoverUnderStateFormat2RepeatsOnlyWhatWasInFlightOrUncommitted: replica A
// writes a log of 600 events over 60 stores to a bus 20–60 ms away, with a window of 16
// and uncommitted_max 4, under state format 2. Mid-stream it dies as a SIGKILL leaves
// it: its Redis connections cut at once, its writes in flight land at the bus and are
// never answered, and nothing it starts after lands. Replica B takes the destination
// over once A's lease runs out: every event reaches the bus, each key's first arrivals
// in order, and B writes again at most in_flight + uncommitted_max events.
func TestATakeoverUnderStateFormat2RepeatsOnlyWhatWasInFlightOrUncommitted(t *testing.T) {
	const (
		win         = 16
		uncommitted = 4
	)
	rds := testpeer.StartRedis(t)
	cut, err := netdelay.Listen("127.0.0.1:0", rds.Addr(), 0) // A's way to Redis, which the kill cuts
	if err != nil {
		t.Fatal(err)
	}
	connect := func(url string) *store.Store {
		st, err := store.Connect(store.Options{URL: url, Bounds: store.Bounds{ChannelEvents: 100000, Attempts: 100000}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
	direct := connect(rds.URL())
	rng := rand.New(rand.NewPCG(2, 53))
	events := plan(rng, "kill", 600, 60, false)
	log := &busLog{}
	late := func(r *rand.Rand) time.Duration { return time.Duration(20+r.IntN(40)) * time.Millisecond }
	busA, busB := newBusDouble(events, win, log, 1), newBusDouble(events, win, log, 2)
	busA.strict, busB.strict = false, false // a takeover writes some events again
	busA.latency, busB.latency = late, late
	busA.cut, busA.after = make(chan struct{}), make(chan struct{})
	dest := bus("orders", "111122223333")
	dest.InFlight = win
	cfg := delivery()
	cfg.InFlight, cfg.UncommittedMax, cfg.CommitWait = win, uncommitted, 5*time.Millisecond
	replica := func(owner string, st *store.Store, sink Sink) (*Dispatcher, func()) {
		d := New(Options{Store: st, Delivery: cfg, Owner: owner, Poll: 20 * time.Millisecond,
			Sinks: map[destination.Connector]Sink{destination.EventBridge: sink}, StateFormat: func() int { return 2 }})
		if err := d.SetDestinations(context.Background(), []destination.Destination{dest}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = d.Run(ctx) }()
		return d, func() { cancel(); <-done }
	}
	_, stopA := replica("replica-a", connect("redis://"+cut.Addr()+"/0"), busA)
	publishPlanned(t, direct, events, 100)
	waitFor(t, "A a third through", func() bool { return len(log.ids()) >= len(events)/3 })

	// The kill: A's Redis gone, its writes in flight landing unanswered.
	addr := cut.Addr()
	cut.Close()
	close(busA.cut)
	busA.mu.Lock()
	inFlight := busA.inFlight
	busA.mu.Unlock()
	atKill := len(log.ids())
	t.Cleanup(func() {
		// A comes back only to be stopped: its commits are refused (B holds the lease).
		healed, err := netdelay.Listen(addr, rds.Addr(), 0)
		if err != nil {
			t.Errorf("A's way to Redis again: %v", err)
		} else {
			defer healed.Close()
		}
		close(busA.after)
		stopA()
	})

	_, stopB := replica("replica-b", direct, busB)
	t.Cleanup(stopB)
	waitFor(t, "every event at the bus", func() bool {
		have := map[string]bool{}
		for _, id := range log.ids() {
			have[id] = true
		}
		return len(have) == len(events)
	})
	last, err := storetest.LastLogID(context.Background(), direct.Client(), acct)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "B's cursor at the log's end", func() bool {
		st, err := direct.LoadState(context.Background(), store.Ref{Account: acct, ID: "orders"})
		return err == nil && st.Cursor == last
	})
	took := log.ids()
	seen, repeats := map[string]bool{}, 0
	for _, id := range took {
		if seen[id] {
			repeats++
		}
		seen[id] = true
	}
	t.Logf("the bus had %d events at the kill, %d writes in flight; after the takeover %d writes, %d of them again (bound %d)",
		atKill, inFlight, len(took), repeats, win+uncommitted)
	if repeats > win+uncommitted {
		t.Errorf("%d events written again after the takeover, want at most in_flight + uncommitted_max = %d", repeats, win+uncommitted)
	}
	if n := keyDisorder(events, took); n > 0 {
		t.Errorf("%d events first reached the bus before an earlier event of their key", n)
	}
	if inFlight < 2 {
		t.Errorf("%d writes in flight at the kill: the test killed A with its window nearly empty", inFlight)
	}
	busB.check(t, "orders (B)")
	busA.check(t, "orders (A)")
}
