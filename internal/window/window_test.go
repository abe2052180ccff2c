package window

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// sim drives a Window as a worker would, on a simulated clock: events of random keys
// arrive, writes take random times, some are not taken. It checks, at every step, what
// the window promises.
type sim struct {
	t       *testing.T
	w       *Window
	now     time.Time
	log     []event          // the log, in arrival order
	read    int              // events taken into the window
	flight  map[string]int64 // event id → when its write ends (ns on the clock)
	started []string         // ids in the order their writes started
	ended   map[string]int   // times each event ended
	seqOf   map[string]int
}

type event struct{ id, key string }

func newSim(t *testing.T, setting, events, keys int, rng *rand.Rand) *sim {
	s := &sim{t: t, w: New(setting), now: time.Unix(0, 0), flight: map[string]int64{}, ended: map[string]int{},
		seqOf: map[string]int{}}
	for i := range events {
		e := event{id: fmt.Sprintf("e%05d", i), key: fmt.Sprintf("k%d", rng.IntN(keys))}
		s.log = append(s.log, e)
		s.seqOf[e.id] = i
	}
	return s
}

// run plays the whole log through; notTaken is the chance a write is not taken.
func (s *sim) run(rng *rand.Rand, notTaken float64) {
	t := s.t
	keyOf := map[string]string{}
	for _, e := range s.log {
		keyOf[e.id] = e.key
	}
	lastDone := map[string]int{} // key → sequence of its last ended event
	for step := 0; ; step++ {
		if step > 1_000_000 {
			t.Fatal("the simulation did not end")
		}
		for s.w.Room() > 0 && s.read < len(s.log) {
			e := s.log[s.read]
			s.w.Add(e.id, e.key)
			s.read++
		}
		if s.w.Len() > s.w.Ahead() {
			t.Fatalf("%d events held, past the look-ahead of %d", s.w.Len(), s.w.Ahead())
		}
		var wait time.Duration
		for {
			id, ok, d := s.w.Next(s.now)
			if !ok {
				wait = d
				break
			}
			// Nothing of its key may be in flight, nor unfinished before it.
			for other := range s.flight {
				if keyOf[other] == keyOf[id] {
					t.Fatalf("%s started while %s of the same key was in flight", id, other)
				}
			}
			s.flight[id] = s.now.Add(time.Duration(1+rng.IntN(200)) * time.Millisecond).UnixNano()
			s.started = append(s.started, id)
			if len(s.flight) > s.w.Size() || s.w.Size() > s.w.Setting() {
				t.Fatalf("%d writes in flight, window %d, setting %d", len(s.flight), s.w.Size(), s.w.Setting())
			}
		}
		if len(s.flight) == 0 {
			if s.read == len(s.log) && s.w.Len() == 0 {
				return
			}
			if wait <= 0 {
				last, _ := s.w.Settle()
				if s.read == len(s.log) && s.w.Len() == 0 {
					_ = last
					return
				}
				t.Fatalf("nothing in flight, nothing to wait for, %d events held", s.w.Len())
			}
			s.now = s.now.Add(wait)
			continue
		}
		// The earliest write in flight ends.
		first := ""
		for id, at := range s.flight {
			if first == "" || at < s.flight[first] || (at == s.flight[first] && id < first) {
				first = id
			}
		}
		if at := time.Unix(0, s.flight[first]); at.After(s.now) {
			s.now = at
		}
		delete(s.flight, first)
		if rng.Float64() < notTaken {
			s.w.NotTaken(first, s.now.Add(time.Duration(1+rng.IntN(50))*time.Millisecond))
			continue
		}
		if prev, ok := lastDone[keyOf[first]]; ok && prev > s.seqOf[first] {
			t.Fatalf("%s ended after a later event of its key", first)
		}
		lastDone[keyOf[first]] = s.seqOf[first]
		s.ended[first]++
		s.w.Finish(first, true)
		last, finished := s.w.Settle()
		s.checkSettled(last, finished)
	}
}

// checkSettled: every event up to last ended; finished are ended events after it.
func (s *sim) checkSettled(last string, finished []string) {
	if last != "" {
		for _, e := range s.log[:s.seqOf[last]+1] {
			if s.ended[e.id] == 0 {
				s.t.Fatalf("settled at %s while %s had not ended", last, e.id)
			}
		}
	}
	for _, id := range finished {
		if s.ended[id] == 0 {
			s.t.Fatalf("%s reported finished before it ended", id)
		}
	}
}

func TestEachKeyIsWrittenInArrivalOrderWithinTheWindowAndLookAhead(t *testing.T) {
	for seed := range uint64(40) {
		rng := rand.New(rand.NewPCG(seed, 7))
		setting := []int{1, 2, 16, 64}[seed%4]
		keys := []int{1, 3, 50, 300}[(seed/4)%4]
		notTaken := []float64{0, 0.1}[seed%2]
		t.Run(fmt.Sprintf("seed%d-window%d-keys%d-notTaken%.1f", seed, setting, keys, notTaken), func(t *testing.T) {
			s := newSim(t, setting, 2000, keys, rng)
			s.run(rng, notTaken)
			for _, e := range s.log {
				if s.ended[e.id] != 1 {
					t.Fatalf("%s ended %d times, want once", e.id, s.ended[e.id])
				}
			}
			// Starts of one key in arrival order (a not-taken write starts again before any later one).
			byKey := map[string][]int{}
			for _, id := range s.started {
				k := s.log[s.seqOf[id]].key
				byKey[k] = append(byKey[k], s.seqOf[id])
			}
			for k, seqs := range byKey {
				if !slices.IsSorted(seqs) {
					t.Fatalf("key %s started out of arrival order: %v", k, seqs)
				}
			}
		})
	}
}

func TestOneKeyIsOneWriteAtATimeWhateverTheWindow(t *testing.T) {
	w := New(16)
	for i := range 5 {
		w.Add(fmt.Sprint(i), "store-1")
	}
	now := time.Unix(0, 0)
	if id, ok, _ := w.Next(now); !ok || id != "0" {
		t.Fatalf("first write: %q %v, want 0", id, ok)
	}
	if id, ok, _ := w.Next(now); ok {
		t.Fatalf("a second write of the same key started: %s", id)
	}
	w.Finish("0", true)
	if id, ok, _ := w.Next(now); !ok || id != "1" {
		t.Fatalf("after the first ended: %q %v, want 1", id, ok)
	}
}

func TestANotTakenWriteHalvesTheWindowAndHoldsItsKeyOnly(t *testing.T) {
	w := New(16)
	w.Add("a1", "a")
	w.Add("a2", "a")
	w.Add("b1", "b")
	now := time.Unix(0, 0)
	w.Next(now) // a1
	w.Next(now) // b1
	w.NotTaken("a1", now.Add(time.Second))
	if w.Size() != 8 {
		t.Fatalf("window after a not-taken write: %d, want 8", w.Size())
	}
	if id, ok, wait := w.Next(now); ok || wait != time.Second {
		t.Fatalf("while a1 waits: %q %v %v, want nothing for 1s (a2 behind a1, b1 in flight)", id, ok, wait)
	}
	w.Finish("b1", true)
	if w.Size() != 9 {
		t.Fatalf("window after a delivery: %d, want 9", w.Size())
	}
	if id, ok, _ := w.Next(now.Add(time.Second)); !ok || id != "a1" {
		t.Fatalf("after the backoff: %q %v, want a1 again", id, ok)
	}
	if last, finished := w.Settle(); last != "" || !slices.Equal(finished, []string{"b1"}) {
		t.Fatalf("settle: %q %v, want nothing settled and b1 finished", last, finished)
	}
}

func TestTheRateCapSpacesStarts(t *testing.T) {
	w := New(16)
	w.SetRate(10)
	w.Add("a", "a")
	w.Add("b", "b")
	now := time.Unix(0, 0)
	if _, ok, _ := w.Next(now); !ok {
		t.Fatal("the first write did not start")
	}
	if _, ok, wait := w.Next(now); ok || wait != 100*time.Millisecond {
		t.Fatalf("a second write at once: %v, wait %v; want it 100 ms later", ok, wait)
	}
	if id, ok, _ := w.Next(now.Add(100 * time.Millisecond)); !ok || id != "b" {
		t.Fatalf("100 ms later: %q %v, want b", id, ok)
	}
}

func TestTheLookAheadBoundsWhatAHeldKeyLetsPass(t *testing.T) {
	w := New(2)
	if w.Ahead() != 8 {
		t.Fatalf("look-ahead of window 2: %d, want 8", w.Ahead())
	}
	for i := range w.Ahead() {
		w.Add(fmt.Sprint(i), fmt.Sprint("k", i))
	}
	if w.Room() != 0 {
		t.Fatalf("room with the look-ahead full: %d", w.Room())
	}
	now := time.Unix(0, 0)
	id, _, _ := w.Next(now)
	w.NotTaken(id, now.Add(time.Hour))
	for {
		id, ok, _ := w.Next(now)
		if !ok {
			break
		}
		w.Finish(id, true)
	}
	if last, _ := w.Settle(); last != "" || w.Room() != 0 {
		t.Fatalf("with the oldest held: settled %q, room %d; want nothing settled and no room", last, w.Room())
	}
}

func TestARenewedWindowIsANewOneOfItsSetting(t *testing.T) {
	w := New(16)
	w.SetRate(10)
	now := time.Unix(0, 0)
	for i := range 6 {
		w.Add(fmt.Sprint("old", i), fmt.Sprint("k", i%3))
	}
	id, _, _ := w.Next(now)
	w.NotTaken(id, now.Add(time.Hour)) // the window halved, a key held, the pace set
	w.Next(now)

	w.Renew(2)
	fresh := New(2)
	if w.Setting() != fresh.Setting() || w.Size() != fresh.Size() || w.Ahead() != fresh.Ahead() ||
		w.Len() != 0 || w.Writing() != 0 || w.Room() != fresh.Room() {
		t.Fatalf("renewed: setting %d size %d ahead %d len %d writing %d room %d; want those of New(2): %d %d %d 0 0 %d",
			w.Setting(), w.Size(), w.Ahead(), w.Len(), w.Writing(), w.Room(), fresh.Setting(), fresh.Size(), fresh.Ahead(), fresh.Room())
	}
	for _, id := range []string{"a", "b", "c"} {
		w.Add(id, id)
	}
	// No pace, no held key, nothing of the old events: two writes at once, the window's.
	for _, want := range []string{"a", "b"} {
		if id, ok, _ := w.Next(now); !ok || id != want {
			t.Fatalf("renewed window: %q %v, want %s at once", id, ok, want)
		}
	}
	if id, ok, _ := w.Next(now); ok {
		t.Fatalf("a third write with a window of 2: %s", id)
	}
	if w.Attempts("old0") != 0 || w.Attempts("a") != 0 {
		t.Fatal("the renewed window remembers attempts")
	}
	w.Finish("a", true)
	w.Finish("b", true)
	if last, finished := w.Settle(); last != "b" || len(finished) != 0 {
		t.Fatalf("settle: %q %v, want b and nothing after it", last, finished)
	}
}

func TestAWindowInUseAllocatesNothingPerEvent(t *testing.T) {
	w := New(16)
	now := time.Unix(0, 0)
	ids := make([]string, 64)
	for i := range ids {
		ids[i] = fmt.Sprint("e", i)
	}
	cycle := func() { // a look-ahead's worth of events of 5 keys, written and let go
		for i, id := range ids[:w.Ahead()] {
			w.Add(id, ids[i%5])
		}
		for w.Len() > 0 {
			for {
				id, ok, _ := w.Next(now)
				if !ok {
					break
				}
				w.Finish(id, true)
			}
			w.Settle()
		}
	}
	cycle() // its room made once
	if n := testing.AllocsPerRun(20, cycle); n != 0 {
		t.Fatalf("%.1f allocations for %d events through the window, want none", n, w.Ahead())
	}
	w.Renew(4)
	if n := testing.AllocsPerRun(20, cycle); n != 0 {
		t.Fatalf("%.1f allocations after Renew, want none", n)
	}
}
