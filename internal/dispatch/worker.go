package dispatch

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/failures"
	"github.com/mercamap/relay/internal/store"
)

// sendTimeout bounds one write; it is not tied to shutdown, so a write in flight at
// SIGTERM finishes and is committed.
const sendTimeout = 30 * time.Second

// readBatch is how many log entries a worker reads at a time.
const readBatch = 64

// worker delivers one destination's events in order while its lease is held.
type worker struct {
	d     *Dispatcher
	dest  destination.Destination
	token int64
	life  life // when it runs, waits, ends (pool.go)
	// held is the outcome of the last ended message, not committed yet: it is committed
	// in the script that begins the next write (Commit.Next), or alone by flush.
	held     *store.Commit
	retrying string        // the log id of the message in not-taken backoff, if any
	backoff  time.Duration // its next backoff
	status   string        // the status the last pass found ("" before the first)
	epoch    string        // the state's epoch the pass read: writes and commits are fenced by it
	// nextCheck is when a pending destination's setup check runs next (zero: at once),
	// checkEvery the wait after the next failure.
	nextCheck  time.Time
	checkEvery time.Duration
}

// errStop ends the worker's current pass: the destination is not active any more, the
// lease was lost, or the replica is shutting down.
var errStop = errors.New("stop delivering")

// notTaken ends a pass whose message the bus did not take: the worker waits pause in
// backoff, without a goroutine (pool.go), and the next pass retries it from the cursor.
type notTaken struct{ pause time.Duration }

func (notTaken) Error() string { return "not taken; retry after a backoff" }

// pass delivers the next batch of the log past the destination's cursor. idle: there is
// nothing to do until the log grows (not active, nothing new, or Redis unreachable).
func (w *worker) pass(ctx context.Context, log *slog.Logger) (idle bool, err error) {
	st, err := w.d.opts.Store.LoadState(ctx, ref(w.dest))
	if err != nil {
		log.Warn("cannot load destination state", "error", err)
		return true, nil
	}
	if st.Status == store.Pending {
		w.status = st.Status
		if !w.d.opts.Now().Before(w.nextCheck) && w.checkSetup(ctx, log) {
			return false, nil // active now: the next pass, at once, delivers what waited
		}
		return true, nil
	}
	if st.Status != store.Active {
		if w.status == store.Active {
			log.Info("deliveries stopped: the destination is not active", "status", st.Status)
		}
		w.status = st.Status
		return true, nil
	}
	w.status, w.epoch = st.Status, st.Epoch
	dest := w.dest
	dest.ExternalID = st.ExternalID
	if st.RetriesQueued { // retries asked for go between ordered deliveries (retry.go)
		if err := w.retries(ctx, dest, log); err != nil {
			return false, err
		}
	}
	entries, err := w.d.opts.Store.ReadLog(ctx, w.dest.Account, st.Cursor, readBatch)
	if err != nil {
		log.Warn("cannot read the account log", "error", err)
		return true, nil
	}
	if len(entries) == 0 {
		return true, nil
	}
	return false, w.deliverAll(ctx, dest, entries)
}

// checkSetup runs a pending destination's setup check (probe and session for AWS, the
// label read for Pub/Sub) and records it: the first that passes makes it active, and
// the next pass delivers from the point it was added. A failure counts nothing; the
// next check runs after delivery.setup_check, doubling up to its max.
func (w *worker) checkSetup(ctx context.Context, log *slog.Logger) (active bool) {
	cfg := w.d.opts.Delivery.SetupCheck
	if w.checkEvery == 0 {
		w.checkEvery = cfg.Initial
	}
	passed, msg := w.d.checkSetup(ctx, w.dest)
	now := w.d.opts.Now()
	next := now.Add(w.checkEvery)
	status, err := w.d.opts.Store.SetupChecked(ctx, ref(w.dest), passed,
		store.PendingCheck{At: now.UTC(), Message: msg, NextCheck: next.UTC()}, w.d.opts.Delivery.ChannelRetention)
	if err != nil {
		log.Warn("setup check not recorded", "error", err)
		return false
	}
	if passed {
		log.Info("setup check passed; the destination is active", "status", status)
		w.nextCheck, w.checkEvery = time.Time{}, 0
		return true
	}
	log.Info("setup check failed; the destination stays pending", "message", msg, "next_check", next)
	w.nextCheck, w.checkEvery = next, min(2*w.checkEvery, cfg.Max)
	return false
}

// deliverAll takes entries in order; it returns early when the destination stops. The
// last ended message's outcome is committed before it returns (when it returns early,
// the pool's turn commits it).
func (w *worker) deliverAll(ctx context.Context, dest destination.Destination, entries []store.LogEntry) error {
	skipped := ""
	for _, e := range entries {
		if ctx.Err() != nil {
			return errStop
		}
		if !dest.Wants(e.Type) {
			skipped = e.ID
			continue
		}
		skipped = ""
		if err := w.deliver(ctx, dest, e); err != nil {
			return err // errStop, notTaken: run reloads the state; a stale lease ends the worker
		}
	}
	if err := w.flush(ctx); err != nil {
		return err
	}
	if skipped != "" { // the batch ended on filtered-out events: move past them
		_, err := w.commit(ctx, store.Commit{Kind: store.KindSkip, Cursor: skipped})
		return err
	}
	return nil
}

// deliver writes one event: delivered, rejected or expired end it; not taken is
// committed (it shows on the card, never counts) and returned as notTaken, holding the
// destination's later events behind it until a later pass retries it. An ended
// message's outcome is held and committed in the same script that begins the next
// write (one Redis round trip between two writes, and a crash re-sends at most the one
// message whose commit was held). Each write starts behind that fence, one Redis step
// that checks the status: a pause or disable stored during a write lets that write
// finish, and none after it.
func (w *worker) deliver(ctx context.Context, dest destination.Destination, e store.LogEntry) error {
	cfg := w.d.opts.Delivery
	msg := w.d.message(dest, e)
	if w.retrying != e.ID { // a message's backoff starts over; another's does not carry on
		w.retrying, w.backoff = e.ID, cfg.NotTakenBackoff.Initial
	}
	arrived := store.EntryTime(e.ID)
	if w.d.opts.Now().Sub(arrived) > cfg.MaxMessageAge {
		if err := w.flush(ctx); err != nil {
			return err
		}
		_, err := w.commit(ctx, store.Commit{Kind: store.KindExpired, Cursor: e.ID, EventID: e.EventID,
			MessageID: msg.ID, Message: "the message outlived its age limit of " + cfg.MaxMessageAge.String() + " without being taken"})
		return err
	}
	if err := w.begin(ctx, e); err != nil {
		return err
	}
	sendCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sendTimeout)
	started := time.Now()
	endSpan := w.d.startWrite(dest, e)
	err := w.d.sink(dest).Send(sendCtx, dest, msg)
	cancel()
	outcome := failures.Classify(err)
	endSpan(string(outcome.Class), outcome.Message)
	w.d.opts.Metrics.observe(dest, outcome.Class, time.Since(started), time.Since(arrived))
	w.d.opts.Logger.Info("delivery attempt", "destination", dest.ID, "event_id", e.EventID,
		"class", string(outcome.Class), "code", failures.Code(err), "message", outcome.Message)
	c := store.Commit{Kind: string(outcome.Class), EventID: e.EventID, MessageID: msg.ID, Message: outcome.Message, Wrote: e.ID}
	if outcome.Class != failures.NotTaken {
		c.Cursor = e.ID
		w.held = &c // committed with the next write's begin, or by flush
		return nil
	}
	res, err := w.commit(ctx, c)
	if err != nil {
		return err
	}
	if stopAfter(res, "") != nil {
		return errStop // paused or disabled meanwhile: no retry
	}
	if until := failures.Wait(err); until > 0 {
		// The sink knows when the next attempt can be taken (a spent STS budget, a
		// session backoff): wait exactly that, without doubling the backoff for it.
		return notTaken{pause: until}
	}
	wait := w.backoff
	w.backoff = min(2*wait, cfg.NotTakenBackoff.Max)
	return notTaken{pause: wait/2 + rand.N(wait/2+1)}
}

// begin starts the write of e behind the write fence: one Redis step that checks that
// the destination is still active (and e still past its cursor) and marks the write as
// started, so a pause or disable the API answered is seen here, on whichever replica
// holds the lease, and no write starts. The held outcome of the message before, if any,
// is committed in the same script (Commit.Next). errStop when the write must not start
// (or that commit left the destination stopped); ErrStaleLease when the lease is
// another's.
func (w *worker) begin(ctx context.Context, e store.LogEntry) error {
	var res string
	var err error
	if h := w.held; h != nil {
		w.held = nil
		h.Next = e.ID
		// The fence runs after the commit's own changes: a commit that disabled the
		// destination refuses it ("disabled"), and an activation or a replay since the
		// state was read, which moved the cursor, makes it "moved" or "skipped".
		var c store.Committed
		if c, err = w.commit(ctx, *h); err != nil {
			return err // errStop or ErrStaleLease
		}
		res = c.Began
	} else {
		res, err = w.d.opts.Store.BeginWrite(context.WithoutCancel(ctx), ref(w.dest), w.token, e.ID, w.epoch)
	}
	switch {
	case errors.Is(err, store.ErrStaleLease), errors.Is(err, store.ErrUnknownDestination):
		return store.ErrStaleLease
	case err != nil:
		w.d.opts.Logger.Warn("cannot mark a write as started; the pass ends", "destination", w.dest.ID, "error", err)
		return errStop
	case res != "ok":
		w.d.opts.Logger.Info("write not started: the destination changed", "destination", w.dest.ID,
			"event_id", e.EventID, "status", res)
		return errStop
	}
	return nil
}

// flush commits the held outcome, if any: errStop when the commit left the destination
// not active (or its cursor elsewhere), ErrStaleLease when the lease was lost.
func (w *worker) flush(ctx context.Context) error {
	h := w.held
	if h == nil {
		return nil
	}
	w.held = nil
	res, err := w.commit(ctx, *h)
	if err != nil {
		return err
	}
	return stopAfter(res, h.Cursor)
}

// stopAfter reports errStop when a commit found the destination not active, or its
// cursor not at the message just ended: an activation meanwhile skipped the events that
// arrived while it was stopped, or a replay moved it back, so the rest of the batch in
// hand is stale.
func stopAfter(res store.Committed, ended string) error {
	if res.Status != store.Active || (ended != "" && res.Cursor != ended) {
		return errStop
	}
	return nil
}

// commit records an outcome, retrying while Redis is unreachable: a write that landed
// must not be forgotten (a crash here re-sends it: at-least-once, receivers dedup).
func (w *worker) commit(ctx context.Context, c store.Commit) (store.Committed, error) {
	cfg := w.d.opts.Delivery
	c.Ref, c.Token = ref(w.dest), w.token
	if c.Epoch == "" {
		c.Epoch = w.epoch
	}
	c.DisableAfter, c.WarnAfter = cfg.DisableAfter, cfg.WarnAfter
	c.ChannelRetention, c.AttemptsRetention = cfg.ChannelRetention, cfg.AttemptsRetention
	wait := 50 * time.Millisecond
	for {
		res, err := w.d.opts.Store.Commit(context.WithoutCancel(ctx), c)
		if err == nil {
			if res.Disabled {
				w.d.announceDisabled(ctx, w.dest)
			}
			if res.Warned && w.d.opts.Outbox != nil {
				w.d.opts.Outbox.Nudge() // destination.failing is in the outbox
			}
			return res, nil
		}
		if errors.Is(err, store.ErrStaleLease) || errors.Is(err, store.ErrUnknownDestination) {
			return res, store.ErrStaleLease
		}
		w.d.opts.Logger.Warn("commit failed; retrying", "destination", w.dest.ID, "error", err)
		if ctx.Err() != nil && wait > 2*time.Second {
			return res, errStop
		}
		time.Sleep(wait)
		wait = min(2*wait, 5*time.Second)
	}
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
