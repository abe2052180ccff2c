// Package window decides which of one destination's events may be written now: events
// of one ordering key one at a time, in arrival order; events of different keys together,
// up to the window; never more than a bounded look-ahead past the oldest unfinished
// event; no faster than the destination's rate cap. It is bookkeeping only — no I/O, no
// clock but the one it is given — so dispatch's worker stays the story of one write.
package window

import (
	"math"
	"time"
)

// Max is the widest window a destination may set (config and API: in_flight 1–64).
const Max = 64

// AheadFactor sets the look-ahead: at most AheadFactor × the window setting events are
// held from the oldest unfinished one on (finished ones after it included), so a key
// waiting out a backoff never lets the others run unboundedly far ahead of it.
const AheadFactor = 4

// The states of an event taken into the window.
const (
	waiting = iota // not written yet, or not taken and waiting out its backoff (until)
	writing        // its write is under way
	done           // it ended (delivered, rejected, expired, filtered out)
)

type slot struct {
	id, key  string
	state    int
	until    time.Time // a not-taken event is not written again before this
	attempts int       // writes that were not taken
}

// Window is one destination's events from its oldest unfinished one on, in arrival
// order. It is not safe for concurrent use: the worker's pass owns it. What it let go
// of (slots, its maps' room) it keeps for the next events, and Renew readies it for
// another destination, so a window in use allocates nothing per event.
type Window struct {
	setting int     // the destination's in_flight
	size    int     // the window now: halved by a not-taken write, widened by one per delivery
	ahead   int     // the look-ahead: the most events held at once
	slots   []*slot // from the oldest unfinished event (or the first done one not yet let go) on
	free    []*slot // slots let go of, emptied, for Add to take again
	byID    map[string]*slot
	writing int
	busy    map[string]bool // Next's scratch: keys with an unfinished event passed over

	interval  time.Duration // 1 / max_rate; zero: no cap
	nextStart time.Time     // the pace's next free start
}

// New returns an empty window of setting writes in flight (1–Max) and no rate cap.
func New(setting int) *Window {
	w := &Window{byID: map[string]*slot{}, busy: map[string]bool{}}
	w.Renew(setting)
	return w
}

// Renew empties the window and readies it for a destination of setting writes in
// flight (1–Max) and no rate cap, as New would make it, keeping the room it has.
func (w *Window) Renew(setting int) {
	w.empty()
	w.setting = min(max(setting, 1), Max)
	w.size, w.ahead = w.setting, AheadFactor*w.setting
	w.interval, w.nextStart = 0, time.Time{}
}

// empty lets go of every event held, keeping their slots for Add.
func (w *Window) empty() {
	w.letGo(len(w.slots))
	clear(w.byID)
	w.writing = 0
}

// letGo drops the first n slots (emptied, for Add to take again), moving the rest to
// the front: the array is kept, not left behind.
func (w *Window) letGo(n int) {
	for _, s := range w.slots[:n] {
		*s = slot{}
		w.free = append(w.free, s)
	}
	m := copy(w.slots, w.slots[n:])
	clear(w.slots[m:])
	w.slots = w.slots[:m]
}

// SetRate caps how many writes start per second (0: no cap).
func (w *Window) SetRate(perSecond float64) {
	w.interval = 0
	if perSecond > 0 && !math.IsInf(perSecond, 1) {
		w.interval = time.Duration(float64(time.Second) / perSecond)
	}
}

// Setting is the window the destination asked for; Size the window now.
func (w *Window) Setting() int { return w.setting }
func (w *Window) Size() int    { return w.size }

// Ahead is the look-ahead: the most events the window holds at once.
func (w *Window) Ahead() int { return w.ahead }

// Room is how many more events may be taken in now.
func (w *Window) Room() int { return w.ahead - len(w.slots) }

// Len is how many events the window holds (finished ones after the oldest unfinished
// one included); Writing how many writes are under way.
func (w *Window) Len() int     { return len(w.slots) }
func (w *Window) Writing() int { return w.writing }

// Add takes the next event of the log, with its ordering key, in arrival order. The
// caller keeps to Room.
func (w *Window) Add(id, key string) {
	var s *slot
	if n := len(w.free); n > 0 {
		s, w.free[n-1], w.free = w.free[n-1], nil, w.free[:n-1]
		s.id, s.key = id, key
	} else {
		s = &slot{id: id, key: key}
	}
	w.slots = append(w.slots, s)
	w.byID[id] = s
}

// Next is the oldest waiting event that may be written at now, and marks it writing:
// none of its key is unfinished before it, its backoff is over, the window has room and
// the pace allows. Otherwise ok is false and wait, when above zero, is how long until a
// backoff or the pace could let one go (zero: only a finished write makes room).
func (w *Window) Next(now time.Time) (id string, ok bool, wait time.Duration) {
	if w.writing >= w.size {
		return "", false, 0
	}
	busy := w.busy
	clear(busy)
	for _, s := range w.slots {
		if s.state == done {
			continue
		}
		if busy[s.key] {
			continue
		}
		busy[s.key] = true
		if s.state != waiting {
			continue
		}
		if d := s.until.Sub(now); d > 0 {
			wait = shorter(wait, d)
			continue
		}
		if d := w.nextStart.Sub(now); d > 0 {
			return "", false, d
		}
		s.state = writing
		w.writing++
		if w.interval > 0 {
			w.nextStart = now.Add(w.interval)
			if w.nextStart.Before(now) {
				w.nextStart = now
			}
		}
		return s.id, true, 0
	}
	return "", false, wait
}

// shorter is the smaller of two waits, a zero one counting as none yet.
func shorter(a, b time.Duration) time.Duration {
	if a == 0 || b < a {
		return b
	}
	return a
}

// Finish ends an event: its write ended it (delivered reports whether the bus took it,
// which widens the window by one), or it needs no write (filtered out, expired, already
// finished before a takeover).
func (w *Window) Finish(id string, delivered bool) {
	s := w.byID[id]
	if s == nil || s.state == done {
		return
	}
	if s.state == writing {
		w.writing--
	}
	s.state = done
	if delivered {
		w.size = min(w.size+1, w.setting)
	}
}

// NotTaken puts an event whose write the bus did not take back to waiting until until,
// before every later event of its key, and halves the window: a throttled bus is backed
// off from, not pressed. It returns how many times the event was not taken.
func (w *Window) NotTaken(id string, until time.Time) (attempts int) {
	s := w.byID[id]
	if s == nil || s.state == done {
		return 0
	}
	if s.state == writing {
		w.writing--
	}
	s.state, s.until = waiting, until
	s.attempts++
	w.size = max(w.size/2, 1)
	return s.attempts
}

// Unstart puts an event Next just handed out back, as if it had not: its write did not
// start after all (the destination stopped first).
func (w *Window) Unstart(id string) {
	if s := w.byID[id]; s != nil && s.state == writing {
		s.state = waiting
		w.writing--
	}
}

// Attempts is how many times the bus did not take the event so far.
func (w *Window) Attempts(id string) int {
	if s := w.byID[id]; s != nil {
		return s.attempts
	}
	return 0
}

// Release lets every held event go now: something changed the destination (an
// activation, a test that passed), so a backoff no longer stands.
func (w *Window) Release() {
	for _, s := range w.slots {
		s.until = time.Time{}
	}
}

// Settle lets go of the leading finished events and returns the last of them ("" when
// the oldest event held is unfinished): every event up to it ended, so a cursor may
// stand there. done lists the finished events after the oldest unfinished one, in
// arrival order.
func (w *Window) Settle() (last string, finished []string) {
	n := 0
	for n < len(w.slots) && w.slots[n].state == done {
		last = w.slots[n].id
		delete(w.byID, last)
		n++
	}
	if n > 0 {
		w.letGo(n)
	}
	for _, s := range w.slots {
		if s.state == done {
			finished = append(finished, s.id)
		}
	}
	return last, finished
}

// Reset empties the window (the cursor moved under it: a replay, an activation), keeping
// its setting and rate; the window size starts over at the setting.
func (w *Window) Reset() {
	w.empty()
	w.size = w.setting
}
