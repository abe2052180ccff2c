package dispatch

import (
	"context"
	"sync"
	"time"

	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/store"
	"github.com/mercamap/relay/internal/window"
)

// windowed is what a worker holds while it has events past its cursor: the window
// (package window decides which may be written now), the events taken into it, and
// where its reading of the log stands. A worker with nothing unfinished lets it go, so
// an idle destination costs no more than before: emptied, into spareWindows, where the
// next pass of any destination takes it up again rather than making one (a destination
// that gets an event or two a pass made its window, maps and channel every pass).
type windowed struct {
	win  *window.Window
	read string               // the last log id taken into the window
	held map[string]heldEvent // the unfinished events, by log id
	// skip are events a takeover found ended past the cursor (state format 2): taken
	// into the window as finished, never written again.
	skip    map[string]bool
	results chan written // the writes' ends, from send to the pass (room for the window's setting)
	logEnd  bool         // this pass read the log to its end: the feed has what comes next
	// committed and committedDone are the cursor and done field last handed to a commit.
	committed, committedDone string
}

// heldEvent is an event taken into the window, with its message for the bus.
type heldEvent struct {
	entry store.LogEntry
	msg   destination.Message
}

// spareWindows are the windows workers let go of, emptied, nothing in flight: any worker's
// next window is one of them while there are some.
var spareWindows sync.Pool

// windowed returns the worker's window, making it from the state in hand (or renewing
// one let go of): its setting is the destination's in_flight (else
// delivery.in_flight), its rate the destination's max_rate.
func (w *worker) windowed(dest destination.Destination) *windowed {
	if w.ww != nil {
		return w.ww
	}
	setting := dest.Window(w.d.opts.Delivery.InFlight)
	ww, _ := spareWindows.Get().(*windowed)
	if ww == nil {
		ww = &windowed{win: window.New(setting), held: map[string]heldEvent{}}
	} else {
		ww.win.Renew(setting)
	}
	ww.win.SetRate(dest.MaxRate)
	if cap(ww.results) < ww.win.Setting() {
		ww.results = make(chan written, ww.win.Setting())
	}
	ww.read, ww.logEnd, ww.committed, ww.committedDone = w.cursor, false, w.cursor, ""
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
// reading stands, and the next pass takes one from spareWindows. Nothing is in flight,
// so no write holds its channel any more.
func (ww *windowed) letGoIfEmpty(w *worker) {
	if ww.win.Len() == 0 && ww.win.Writing() == 0 && len(ww.skip) == 0 {
		w.ww = nil
		clear(ww.held)
		ww.skip = nil
		spareWindows.Put(ww)
	}
}

// forget drops the window and what it held: the cursor moved under it (a replay, an
// activation), so reading starts again from the stored state.
func (w *worker) forget(done []string) {
	w.ww, w.doneAfter = nil, done
}

// deliverWindow writes the events past the cursor, as many at once as the window lets
// (package window decides which), and records each outcome as its write ends. It returns
// idle when nothing is left to write, idleFor when what is left waits out a backoff or
// the rate cap, and errStop (or the lease's error) when the destination stopped: then
// no write starts any more, and those in flight finish and are recorded first.
func (w *worker) deliverWindow(ctx context.Context, dest destination.Destination) (idle bool, err error) {
	ww := w.windowed(dest)
	defer ww.letGoIfEmpty(w)
	ww.logEnd = false
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	started := 0
	for {
		// A pass that has had its share yields its pool goroutine to the workers queued
		// for one: it starts no more writes, and once those in flight ended it is queued
		// again behind them. No busy destination keeps the others from their turn.
		yielding := started >= passShare && w.d.contended()
		var took int
		var wait time.Duration
		if !yielding {
			if took, err = w.take(ctx, dest); err != nil {
				break
			}
			var n int
			var inline bool
			n, wait, inline, err = w.startWrites(ctx, dest)
			started += n
			if err != nil {
				break
			}
			if inline { // a write ended and was recorded here: take and start again
				if ctx.Err() != nil {
					err = errStop
					break
				}
				continue
			}
		}
		if ww.win.Writing() == 0 {
			if err = w.commitSettled(ctx); err != nil {
				break
			}
			switch {
			case yielding:
				return false, nil
			case ww.win.Len() == 0 && took > 0:
				continue // all filtered out: the log may hold more past them
			case ww.win.Len() == 0:
				return true, nil
			}
			return false, idleFor{pause: max(wait, time.Millisecond)}
		}
		var tick <-chan time.Time
		if wait > 0 {
			if timer == nil {
				timer = time.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			tick = timer.C
		}
		select {
		case r := <-ww.results:
			err = w.ended(ctx, dest, r)
		case <-tick:
		case <-ctx.Done():
			err = errStop
		}
		if err != nil {
			break
		}
	}
	w.drain(ctx, dest)
	return false, err
}

// take takes the log's next events into the window, as far as its look-ahead allows:
// from the account's entries this replica read for all its destinations, or, for a
// destination behind them, from the log itself. An event the destination does not
// want, or that ended before a takeover (state format 2), needs no write.
func (w *worker) take(ctx context.Context, dest destination.Destination) (took int, err error) {
	ww := w.ww
	room := min(ww.win.Room(), readBatch)
	if room <= 0 {
		return 0, nil
	}
	entries, ok := w.d.feedOf(w.dest.Account).after(ww.read, room)
	if !ok {
		if ww.logEnd || room < min(readBatch, ww.win.Ahead())/4 {
			return 0, nil // read more once more room is free: a round trip per batch, not per event
		}
		if entries, err = w.d.opts.Store.ReadLog(ctx, w.dest.Account, ww.read, int64(room)); err != nil {
			w.log.Warn("cannot read the account log", "error", err)
			return 0, idleFor{pause: time.Second}
		}
		ww.logEnd = len(entries) < room
	}
	for _, e := range entries {
		ww.read = e.ID
		if !dest.Wants(e.Type) || ww.skip[e.ID] {
			delete(ww.skip, e.ID)
			ww.win.Add(e.ID, "")
			ww.win.Finish(e.ID, false)
			continue
		}
		msg := w.d.message(dest, e)
		ww.win.Add(e.ID, orderingKey(msg))
		ww.held[e.ID] = heldEvent{entry: e, msg: msg}
	}
	return len(entries), nil
}

// orderingKey is the key the bus orders by (Kinesis PartitionKey, Pub/Sub ordering_key):
// the event's store id, else the account id. Events of one key are written one at a time.
func orderingKey(m destination.Message) string {
	if m.StoreID != "" {
		return m.StoreID
	}
	return m.Account
}

// startWrites starts every write the window lets go now, each behind the write fence
// (startWrite), and says how many it started. wait is how long until a held event's
// backoff or the rate cap lets the next one go (zero: only a write ending makes room).
//
// A write the window hands out alone (nothing else of the destination in flight, and
// nothing else it would let go before a write ends) is written inline: here, in the
// pass's own goroutine, and recorded (ended) as it ends, with no goroutine and no
// channel between, as one write at a time was before the window; the pass then takes
// and starts again, as after any write's end. Others each go on their own (send), their
// ends coming to the pass on the window's channel.
func (w *worker) startWrites(ctx context.Context, dest destination.Destination) (started int, wait time.Duration, inline bool, err error) {
	ww := w.ww
	cfg := w.d.opts.Delivery
	next := "" // an event Next handed out already, to start first (log ids are never "")
	for {
		now := w.d.opts.Now()
		id := next
		if id == "" {
			var ok bool
			if id, ok, wait = ww.win.Next(now); !ok {
				return started, wait, false, nil
			}
		}
		next = ""
		h := ww.held[id]
		if now.Sub(store.EntryTime(id)) > cfg.MaxMessageAge {
			if err := w.expire(ctx, h); err != nil {
				return started, 0, false, err
			}
			continue
		}
		w.commits.room(cfg.UncommittedMax)
		if ctx.Err() != nil || !w.startWrite() {
			ww.win.Unstart(id)
			if ctx.Err() == nil {
				w.log.Info("write not started: the destination changed", "event_id", h.entry.EventID)
			}
			return started, 0, false, errStop
		}
		started++
		if ww.win.Writing() == 1 { // alone in flight: would the window let another go now?
			var ok bool
			if next, ok, wait = ww.win.Next(now); !ok && wait == 0 {
				return started, 0, true, w.ended(ctx, dest, w.write(ctx, dest, &h))
			}
		}
		go w.send(ctx, dest, h, ww.results)
	}
}

// passShare is how many writes a pass starts before it yields to workers queued for a
// pool goroutine (the old pass's batch of readBatch, four times over: a window drains
// once in that many writes, and only while others wait).
const passShare = 4 * readBatch

// drain waits for the writes in flight after the pass stopped, and records each: they
// may have landed, and the card and the cursor must say so. Nothing new starts.
func (w *worker) drain(ctx context.Context, dest destination.Destination) {
	for w.ww.win.Writing() > 0 {
		r := <-w.ww.results
		w.ended(ctx, dest, r) // a stop or a lost lease is already what ends the pass
	}
}

// settled fills c's cursor: the last event before the oldest unfinished one (every
// event up to it ended), and, under state format 2, what ended after it.
func (w *worker) settled(c store.Commit) store.Commit {
	ww := w.ww
	last, finished := ww.win.Settle()
	if last != "" {
		w.cursor = last
	}
	c.Cursor = w.cursor
	if w.d.stateFormat() >= 2 {
		c.Done = store.EncodeDone(w.epoch, w.cursor, finished)
	}
	ww.committed, ww.committedDone = c.Cursor, c.Done
	return c
}

// commitSettled records a cursor that moved, or what ended past it, with no write to
// carry it (events filtered out, or ended before a takeover).
func (w *worker) commitSettled(ctx context.Context) error {
	ww := w.ww
	before, beforeDone := ww.committed, ww.committedDone
	c := w.settled(store.Commit{Kind: store.KindSkip})
	if c.Cursor == before && c.Done == beforeDone {
		return nil
	}
	return w.commitBehind(ctx, c)
}
