package dispatch

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/failures"
	"github.com/mercamap/relay/internal/store"
)

// sendTimeout bounds one write; it is not tied to shutdown, so a write in flight at
// SIGTERM finishes and is committed.
const sendTimeout = 30 * time.Second

// readBatch is how many log entries a pass takes at a time.
const readBatch = 64

// worker delivers one destination's events in order while its lease is held. It keeps
// what it needs in memory (status, cursor, epoch, ExternalId) and reads the stored
// state only when told it changed (a control entry, a newer control version at the
// lease renewal, a lease that lapsed): nothing is read per write or per second.
type worker struct {
	d       *Dispatcher
	dest    destination.Destination
	token   int64
	holding *hold        // this replica's hold of the account: the lease lives and lapses with it
	life    life         // when it runs, waits, ends (pool.go)
	log     *slog.Logger // the dispatcher's, with the destination

	// fence guards what decides whether a write may start. A write starts only while
	// the state in hand is current (not stale), no status change halted it, and the
	// lease is surely still ours (hold.held, on this process's monotonic clock): so a
	// pause the API answered stops writes here at once, and a holder that was frozen
	// past its lease starts none before it has read the state again.
	fence   sync.Mutex
	stale   bool  // the stored state changed since it was read: read it before any write
	halted  bool  // a pause or disable asked for an answer: no write until the state is read
	writing int   // writes under way
	control int64 // the control version of the state in hand (store.State.Control)

	// The state in hand, read by the pass that loaded it; only the worker's own turn
	// touches these.
	status     string
	epoch      string // writes and commits are fenced by it: a replay or activation moves it
	cursor     string // the log id before the oldest unfinished event: every event up to it ended here (committed or on its way)
	externalID string
	retriesQ   bool

	// ww is the window of writes past the cursor (windowed.go), nil while nothing is
	// past it. A not-taken event waits out its backoff there; a pass that runs before (a
	// state change queued the worker) waits out the rest, unless the change was a real
	// one (the control version moved: an activation, a test that passed), which sends it
	// at once.
	ww *windowed
	// doneAfter are the events the stored state says ended past the cursor (state
	// format 2), for the next window to skip.
	doneAfter []string
	// nextCheck is when a pending destination's setup check runs next (zero: at once),
	// checkEvery the wait after the next failure.
	nextCheck  time.Time
	checkEvery time.Duration

	commits uncommitted // the delivered outcomes on their way to Redis (committer.go)
}

// errStop ends the worker's current pass: the destination is not active any more, the
// state in hand is stale, the lease was lost, or the replica is shutting down.
var errStop = errors.New("stop delivering")

// idleFor ends a pass that has nothing to do before a timer: a not-taken message's
// backoff, a pending destination's next setup check, Redis unreachable. The worker
// waits without a goroutine (pool.go) and its next pass starts from the state in hand.
type idleFor struct{ pause time.Duration }

func (idleFor) Error() string { return "nothing to do before a timer" }

// markStale says the stored state changed: the next pass reads it before writing.
func (w *worker) markStale() {
	w.fence.Lock()
	w.stale = true
	w.fence.Unlock()
}

// halt stops writes at once for a status change that asked for an answer; it reports
// whether a write is under way (it may still land; none starts after it).
func (w *worker) halt() (inFlight bool) {
	w.fence.Lock()
	defer w.fence.Unlock()
	w.halted, w.stale = true, true
	return w.writing > 0
}

// controlAt tells a worker the destination's control version now: one newer than the
// state in hand (a change whose control entry this replica missed) makes it stale.
func (w *worker) controlAt(control int64) {
	w.fence.Lock()
	if control > w.control {
		w.stale = true
	}
	w.fence.Unlock()
}

// knows says the state in hand already holds the change of control version v: the
// worker read the state since (its own setup check's activation, read before its
// control entry came back). Such an entry changes nothing; making the state stale would
// stop every write of the window until those in flight ended.
func (w *worker) knows(v int64) bool {
	w.fence.Lock()
	defer w.fence.Unlock()
	return v > 0 && v <= w.control
}

// leaseHeld says the lease is surely still ours at now.
func (w *worker) leaseHeld(now time.Time) bool { return w.holding.held(now) }

// startWrite is the write fence: it says whether a write may start now, and marks it
// under way.
func (w *worker) startWrite() bool {
	w.fence.Lock()
	defer w.fence.Unlock()
	if !w.leaseHeld(time.Now()) {
		w.stale = true // frozen or cut off past the lease: read the state again first
		return false
	}
	if w.stale || w.halted || w.status != store.Active {
		return false
	}
	w.writing++
	return true
}

func (w *worker) endWrite() {
	w.fence.Lock()
	w.writing--
	w.fence.Unlock()
}

// leaseValid says the lease is surely still ours.
func (w *worker) leaseValid() bool { return w.leaseHeld(time.Now()) }

// load reads the stored state when the one in hand is stale (or was never read).
func (w *worker) load(ctx context.Context, log *slog.Logger) error {
	w.fence.Lock()
	if !w.stale {
		w.fence.Unlock()
		return nil
	}
	w.stale = false // a change from now on makes it stale again
	w.fence.Unlock()
	// The stored cursor is behind the writes whose commits are on their way: wait for
	// them, or the worker would go back and send those events again.
	w.settle()
	st, err := w.d.opts.Store.LoadState(ctx, ref(w.dest))
	if err != nil {
		w.markStale()
		return err
	}
	if w.status == store.Active && st.Status != store.Active {
		log.Info("deliveries stopped: the destination is not active", "status", st.Status)
	}
	w.fence.Lock()
	w.halted = false // the state read now is the one the status change left
	released := st.Control > w.control
	w.control = max(w.control, st.Control)
	w.status = st.Status
	w.fence.Unlock()
	switch {
	case st.Epoch != w.epoch || st.Cursor != w.cursor || w.ww == nil:
		// The cursor moved under the window (a replay, an activation, another holder
		// before this one): read on from the stored one, skipping what ended past it.
		w.forget(store.DecodeDone(st.Done, st.Epoch, st.Cursor))
	case released:
		w.ww.win.Release() // something changed the destination: a held event goes now
	}
	w.epoch, w.cursor, w.externalID, w.retriesQ = st.Epoch, st.Cursor, st.ExternalID, st.RetriesQueued
	return nil
}

// pass delivers the next batch of the log past the destination's cursor. idle: there is
// nothing to do until something wakes it (new events, a control entry, a renewal).
func (w *worker) pass(ctx context.Context, log *slog.Logger) (idle bool, err error) {
	if !w.leaseValid() {
		return true, nil // the next renewal wakes it, or ends it when the lease is another's
	}
	if err := w.load(ctx, log); err != nil {
		log.Warn("cannot load destination state", "error", err)
		return false, idleFor{pause: time.Second}
	}
	switch w.status {
	case store.Active:
	case store.Pending:
		if wait := w.nextCheck.Sub(w.d.opts.Now()); wait > 0 {
			return false, idleFor{pause: wait}
		}
		if w.checkSetup(ctx, log) {
			return false, nil // active now: the next pass, at once, delivers what waited
		}
		return false, idleFor{pause: max(w.nextCheck.Sub(w.d.opts.Now()), time.Millisecond)}
	default:
		return true, nil // paused or disabled: an activation's control entry wakes it
	}
	dest := w.dest
	dest.ExternalID = w.externalID
	if w.retriesQ { // retries asked for go between ordered deliveries (retry.go)
		if err := w.retries(ctx, dest, log); err != nil {
			return false, err
		}
		w.retriesQ = false
	}
	return w.deliverWindow(ctx, dest)
}

// checkSetup runs a pending destination's setup check (probe and session for AWS, the
// label read for Pub/Sub) and records it: the first that passes makes it active, and
// the next pass delivers from the point it was added. A failure counts nothing; the
// next check runs after delivery.setup_check, doubling up to its max. A check the STS
// budget held back runs once the budget allows, and the card keeps its last sentence.
func (w *worker) checkSetup(ctx context.Context, log *slog.Logger) (active bool) {
	cfg := w.d.opts.Delivery.SetupCheck
	if w.checkEvery == 0 {
		w.checkEvery = cfg.Initial
	}
	res := w.d.runSetupCheck(ctx, w.dest)
	now, wait := w.d.opts.Now(), w.checkEvery
	if res.held > 0 {
		wait = res.held // not a failure: the wait does not double
	}
	next := now.Add(wait)
	status, err := w.d.recordCheck(ctx, w.dest, res, now, wait)
	if err != nil {
		log.Warn("setup check not recorded", "error", err)
		w.nextCheck = now.Add(time.Second)
		return false
	}
	w.markStale() // the status it left (active, or changed meanwhile) is read next
	switch {
	case res.passed:
		log.Info("setup check passed; the destination is active", "status", status)
		w.nextCheck, w.checkEvery = time.Time{}, 0
		return true
	case res.held > 0:
		log.Info("setup check held back by the STS budget", "next_check", next)
		w.nextCheck = next
		return false
	}
	log.Info("setup check failed; the destination stays pending", "message", res.message, "next_check", next)
	w.nextCheck, w.checkEvery = next, min(2*w.checkEvery, cfg.Max)
	return false
}

// send is one write on a goroutine of its own, beside others of the window: it hands
// its outcome to the pass.
func (w *worker) send(ctx context.Context, dest destination.Destination, h heldEvent, results chan<- written) {
	results <- w.write(ctx, dest, &h)
}

// write is one write, bounded by sendTimeout whatever becomes of the pass (a write in
// flight at SIGTERM finishes and is recorded).
func (w *worker) write(ctx context.Context, dest destination.Destination, h *heldEvent) written {
	sendCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sendTimeout)
	started := time.Now()
	endSpan := w.d.traceWrite(dest, h.entry)
	err := w.d.sink(dest).Send(sendCtx, dest, h.msg)
	cancel()
	return written{id: h.entry.ID, err: err, took: time.Since(started), endSpan: endSpan}
}

// written is one write's end, as write returns it: small, so the channel a window's
// writes end on (send) costs little. The event is the window's (held), by its log id.
type written struct {
	id      string
	err     error
	took    time.Duration
	endSpan func(outcome, message string)
}

// ended records a write's outcome. Delivered: the outcome goes to Redis behind the
// writes (committer.go). Rejected ends the message and is committed before anything
// else starts: the count of rejections in a row (in the order writes end) decides
// whether anything does. Not taken is committed too (the card shows it; it never
// counts) and the event waits out its backoff before every later event of its key.
func (w *worker) ended(ctx context.Context, dest destination.Destination, r written) error {
	w.endWrite()
	ww := w.ww
	h := ww.held[r.id]
	e := h.entry
	outcome := failures.Classify(r.err)
	r.endSpan(string(outcome.Class), outcome.Message)
	w.d.opts.Metrics.observe(dest, outcome.Class, r.took, time.Since(store.EntryTime(e.ID)))
	// A delivery is logged at debug (the attempt log and the metrics have it: a line per
	// delivery would cost more than the delivery); every failure at info.
	level := slog.LevelInfo
	if outcome.Class == failures.Delivered {
		level = slog.LevelDebug
	}
	w.d.opts.Logger.Log(ctx, level, "delivery attempt", "destination", dest.ID, "event_id", e.EventID,
		"class", string(outcome.Class), "code", failures.Code(r.err), "message", outcome.Message)
	c := store.Commit{Kind: string(outcome.Class), EventID: e.EventID, MessageID: h.msg.ID, Message: outcome.Message}
	switch outcome.Class {
	case failures.Delivered:
		ww.win.Finish(e.ID, true)
		delete(ww.held, e.ID)
		return w.commitBehind(ctx, w.settled(c))
	case failures.Rejected:
		ww.win.Finish(e.ID, false)
		delete(ww.held, e.ID)
		return w.commitEnded(ctx, w.settled(c))
	}
	ww.win.NotTaken(e.ID, w.d.opts.Now().Add(w.notTakenWait(e.ID, r.err)))
	return w.commitEnded(ctx, w.settled(c))
}

// notTakenWait is how long a not-taken event waits before its next write: what the
// sink said (a spent STS budget, a session backoff), or the backoff doubling from
// not_taken_backoff.initial to its max, with jitter.
func (w *worker) notTakenWait(id string, sendErr error) time.Duration {
	if until := failures.Wait(sendErr); until > 0 {
		return until
	}
	cfg := w.d.opts.Delivery.NotTakenBackoff
	wait := cfg.Initial
	for range w.ww.win.Attempts(id) {
		wait = min(2*wait, cfg.Max)
	}
	return wait/2 + rand.N(wait/2+1)
}

// expire ends an event that outlived delivery.max_message_age without being taken.
func (w *worker) expire(ctx context.Context, h heldEvent) error {
	cfg := w.d.opts.Delivery
	w.ww.win.Finish(h.entry.ID, false)
	delete(w.ww.held, h.entry.ID)
	return w.commitEnded(ctx, w.settled(store.Commit{Kind: store.KindExpired, EventID: h.entry.EventID, MessageID: h.msg.ID,
		Message: "the message outlived its age limit of " + cfg.MaxMessageAge.String() + " without being taken"}))
}

// commitEnded records an outcome that ended a message, or a write not taken, before
// the next write, and stops the pass when the commit found the destination not active
// or its cursor moved by hand (stopAfter).
func (w *worker) commitEnded(ctx context.Context, c store.Commit) error {
	res, err := w.commitNow(ctx, c)
	if err != nil {
		return err
	}
	return w.stopAfter(res, c.Cursor)
}

// stopAfter reports errStop when a commit found the destination not active, or its
// cursor not where this holder put it: an activation meanwhile skipped the events that
// arrived while it was stopped, or a replay moved it back, so what the window holds is
// stale and the state is read again.
func (w *worker) stopAfter(res store.Committed, cursor string) error {
	if res.Status != store.Active || (cursor != "" && res.Cursor != cursor) {
		w.markStale()
		return errStop
	}
	return nil
}

// commitNow records an outcome before the next write: it waits for the commits behind
// it (same queue, in order) and for its own answer.
func (w *worker) commitNow(ctx context.Context, c store.Commit) (store.Committed, error) {
	res, err := w.d.committerOf(w.dest.Account).commit(ctx, w, w.fill(c), true)
	if errors.Is(err, store.ErrStaleLease) || errors.Is(err, destination.ErrNotFound) {
		return res, store.ErrStaleLease
	}
	return res, err
}

// commitBehind hands an outcome to the account's committer and returns at once.
func (w *worker) commitBehind(ctx context.Context, c store.Commit) error {
	_, err := w.d.committerOf(w.dest.Account).commit(ctx, w, w.fill(c), false)
	return err
}

// fill completes a commit with what every commit of this worker carries.
func (w *worker) fill(c store.Commit) store.Commit {
	cfg := w.d.opts.Delivery
	c.Ref, c.Token = ref(w.dest), w.token
	if c.Epoch == "" {
		c.Epoch = w.epoch
	}
	c.DisableAfter, c.WarnAfter = cfg.DisableAfter, cfg.WarnAfter
	c.ChannelRetention, c.AttemptsRetention = cfg.ChannelRetention, cfg.AttemptsRetention
	return c
}

func (d *Dispatcher) sink(dest destination.Destination) Sink {
	if s, ok := d.opts.Sinks[dest.Connector]; ok {
		return s
	}
	return missingSink{}
}

// missingSink answers for a connector this relay was started without.
type missingSink struct{}

func (missingSink) Send(context.Context, destination.Destination, destination.Message) error {
	return failures.NewNotTaken("did not take the event: this relay has no sink for the connector configured", nil)
}
