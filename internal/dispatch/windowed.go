package dispatch

import (
	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/store"
	"github.com/mercamap/relay/internal/window"
)

// windowed is what a worker holds while it has events past its cursor: the window
// (package window decides which may be written now), the events taken into it, and
// where its reading of the log stands. A worker with nothing unfinished lets it go, so
// an idle destination costs no more than before.
type windowed struct {
	win  *window.Window
	read string               // the last log id taken into the window
	held map[string]heldEvent // the unfinished events, by log id
	// skip are events a takeover found ended past the cursor (state format 2): taken
	// into the window as finished, never written again.
	skip    map[string]bool
	results chan written // the writes' ends, from send to the pass
	logEnd  bool         // this pass read the log to its end: the feed has what comes next
	// committed and committedDone are the cursor and done field last handed to a commit.
	committed, committedDone string
}

// heldEvent is an event taken into the window, with its message for the bus.
type heldEvent struct {
	entry store.LogEntry
	msg   destination.Message
}

// windowed returns the worker's window, making it from the state in hand: its
// setting is the destination's in_flight (else delivery.in_flight), its rate the
// destination's max_rate.
func (w *worker) windowed(dest destination.Destination) *windowed {
	if w.ww != nil {
		return w.ww
	}
	win := window.New(dest.Window(w.d.opts.Delivery.InFlight))
	win.SetRate(dest.MaxRate)
	ww := &windowed{win: win, read: w.cursor, held: map[string]heldEvent{},
		results: make(chan written, window.Max), committed: w.cursor}
	if w.d.stateFormat() >= 2 {
		ww.committedDone = store.EncodeDone(w.epoch, w.cursor, w.doneAfter)
	}
	if len(w.doneAfter) > 0 {
		ww.skip = make(map[string]bool, len(w.doneAfter))
		for _, id := range w.doneAfter {
			ww.skip[id] = true
		}
	}
	w.doneAfter = nil
	w.ww = ww
	return ww
}

// letGoIfEmpty drops the window once nothing is left in it: the cursor is then where
// reading stands, and the next pass makes a new one.
func (ww *windowed) letGoIfEmpty(w *worker) {
	if ww.win.Len() == 0 && ww.win.Writing() == 0 && len(ww.skip) == 0 {
		w.ww = nil
	}
}

// forget drops the window and what it held: the cursor moved under it (a replay, an
// activation), so reading starts again from the stored state.
func (w *worker) forget(done []string) {
	w.ww, w.doneAfter = nil, done
}
