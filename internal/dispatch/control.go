package dispatch

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/failures"
	"github.com/mercamap/relay/internal/store"
)

// Change is what a pause, activation or disable found.
type Change struct {
	// WriteInFlight: the lease holder (on any replica) had a write under way when it
	// stopped, or did not answer within its lease (unknown, so true). That write may
	// still reach the bus; no write starts after the change.
	WriteInFlight bool
}

// Disabled is what Disable did.
type Disabled struct {
	IDs      []string // the destinations disabled, the cascade included
	InFlight []string // those of them with a write in flight (see Change)
}

// ErrOperatorDisabled is returned when an account asks to pause or activate a
// destination our operators disabled.
var ErrOperatorDisabled = store.ErrOperatorDisabled

// Pause stops deliveries to a destination: nothing is sent or counted until it is
// activated, and no notification goes out. operator is true for an admin token; an
// account may not pause (nor activate) what an operator disabled.
func (d *Dispatcher) Pause(ctx context.Context, id string, operator bool) (Change, error) {
	return d.setStatus(ctx, id, store.Paused, operator, "")
}

// Activate resumes a paused or disabled destination with the events that arrive from
// now on, and resets its count. A destination our operators disabled is re-activated
// by an operator only (ErrOperatorDisabled); one the rejections disabled, by its account.
func (d *Dispatcher) Activate(ctx context.Context, id string, operator bool) (Change, error) {
	return d.setStatus(ctx, id, store.Active, operator, "")
}

// ActivateSince activates a destination like Activate, but with since
// (store.SinceDisabled or store.SincePaused) delivery resumes from where it stopped:
// the events that arrived meanwhile are sent, in order, before newer ones. since must
// name the destination's status (store.ErrSinceMismatch); "" is Activate.
func (d *Dispatcher) ActivateSince(ctx context.Context, id string, operator bool, since string) (Change, error) {
	return d.setStatus(ctx, id, store.Active, operator, since)
}

// Replay delivers a destination's events from a point of its account's log again, in
// log order, before newer events (store.Replay). A point older than the log's retention
// (Options.LogRetention) is store.ErrTooOld, which names the oldest point still
// replayable.
func (d *Dispatcher) Replay(ctx context.Context, id string, point store.ReplayPoint) (store.Replayed, error) {
	dest, ok := d.Destination(id)
	if !ok {
		return store.Replayed{}, destination.ErrNotFound
	}
	cfg := d.opts.Delivery
	res, err := d.opts.Store.Replay(ctx, store.Replay{Ref: ref(dest), Point: point, Oldest: d.ReplayableFrom(),
		ChannelRetention: cfg.ChannelRetention, AttemptsRetention: cfg.AttemptsRetention})
	if err != nil {
		return res, err
	}
	d.opts.Logger.Info("replay asked for", "destination", id, "cursor", res.Cursor, "pending", res.Pending)
	d.touch(id) // this replica's worker, if any, starts the replay now
	return res, nil
}

// ReplayableFrom is the oldest point a replay may start from: the account logs keep
// events for Options.LogRetention. The zero time when no retention is configured.
func (d *Dispatcher) ReplayableFrom() time.Time {
	if d.opts.LogRetention <= 0 {
		return time.Time{}
	}
	// A second's margin: the log is trimmed by arrival time, ahead of the request.
	return d.opts.Now().Add(-d.opts.LogRetention + time.Second).UTC().Truncate(time.Second)
}

func (d *Dispatcher) setStatus(ctx context.Context, id, status string, operator bool, since string) (Change, error) {
	dest, ok := d.Destination(id)
	if !ok {
		return Change{}, destination.ErrNotFound
	}
	res, err := d.opts.Store.ChangeStatus(ctx, store.StatusChange{Ref: ref(dest), Status: status, Operator: operator,
		ChannelRetention: d.opts.Delivery.ChannelRetention, Since: since})
	if err != nil {
		return Change{}, err
	}
	d.touch(dest.ID) // this replica's worker, if any, reads its status now
	return Change{WriteInFlight: d.stopped(ctx, dest, res)}, nil
}

// stopped waits, after a pause or a disable, until no write can start for dest on any
// replica, and reports whether one was under way (it may still land). The change reached
// the lease holder on its account's control stream: the holder stops starting writes
// and answers (store.Ack). A holder that does not answer within its lease is frozen,
// cut off or dead, and by then its lease has run out: a holder starts no write past
// its lease, nor after a renewal that shows the state changed, before reading the
// state (worker.startWrite). With no lease held, the next holder reads the state first.
func (d *Dispatcher) stopped(ctx context.Context, dest destination.Destination, res store.StatusResult) (inFlight bool) {
	if res.Holder == 0 {
		return false
	}
	d.mu.Lock()
	w := d.workers[dest.ID]
	d.mu.Unlock()
	if w != nil && w.token == res.Holder {
		return w.halt() // the holder is this replica
	}
	tok, inFlight, err := d.opts.Store.WaitAck(ctx, dest.Account, res.Ack, d.opts.Delivery.LeaseTTL+time.Second)
	switch {
	case err == nil && tok == res.Holder:
		return inFlight
	case err == nil:
		return true // a newer holder answered: the one before may have had a write under way
	default:
		d.opts.Logger.Warn("the lease holder did not answer a status change within its lease; its lease ran out",
			"destination", dest.ID, "error", err)
		return true // unknown: a write it started before may still land
	}
}

// Disable switches a destination off on an operator's word, and with it the account's
// other destinations in the same AWS account or Google Cloud project. It returns the
// ids it disabled, the cascade included, and those with a write in flight. Only an
// operator re-activates them.
func (d *Dispatcher) Disable(ctx context.Context, id, reason string) (Disabled, error) {
	var out Disabled
	dest, ok := d.Destination(id)
	if !ok {
		return out, destination.ErrNotFound
	}
	if reason == "" {
		reason = "disabled by an operator"
	}
	targets := []destination.Destination{dest}
	if scope := dest.CloudScope(); scope != "" {
		for _, other := range d.AccountDestinations(dest.Account) {
			if other.ID != dest.ID && other.CloudScope() == scope {
				targets = append(targets, other)
			}
		}
	}
	var results []store.StatusResult
	for _, t := range targets {
		r := reason
		if t.ID != dest.ID {
			r = fmt.Sprintf("%s (with %s: same %s)", reason, dest.ID, dest.CloudScope())
		}
		res, err := d.opts.Store.ChangeStatus(ctx, store.StatusChange{Ref: ref(t), Status: store.Disabled, Reason: r,
			Operator: true, ChannelRetention: d.opts.Delivery.ChannelRetention})
		if err != nil {
			return out, fmt.Errorf("disable %s: %w", t.ID, err)
		}
		d.touch(t.ID)
		out.IDs = append(out.IDs, t.ID)
		results = append(results, res)
		if res.Changed {
			d.announceDisabled(ctx, t)
		}
	}
	// Each holder answers on its own: wait for them together.
	inFlight := make([]bool, len(targets))
	var wg sync.WaitGroup
	for i, res := range results {
		wg.Go(func() { inFlight[i] = d.stopped(ctx, targets[i], res) })
	}
	wg.Wait()
	for i, t := range targets {
		if inFlight[i] {
			out.InFlight = append(out.InFlight, t.ID)
		}
	}
	return out, nil
}

// Test writes a clearly marked test event through the whole path (probe, session or
// label check, the one write) and records the attempt like any other: it counts.
func (d *Dispatcher) Test(ctx context.Context, id string) (failures.Outcome, error) {
	dest, ok := d.Destination(id)
	if !ok {
		return failures.Outcome{}, destination.ErrNotFound
	}
	st, err := d.opts.Store.LoadState(ctx, ref(dest))
	if err != nil {
		return failures.Outcome{}, err
	}
	dest.ExternalID = st.ExternalID
	checked := false // the setup check ran (and passed) already
	if st.Status == store.Pending {
		// A pending destination's test is its setup check, at once: a pass makes it
		// active (and the test event is written); a failure is answered in the check's
		// words and counts nothing (no attempt is recorded).
		res := d.checkSetup(ctx, dest)
		if res.held > 0 {
			return failures.Outcome{}, HeldBack{Wait: res.held}
		}
		if _, err := d.recordCheck(ctx, dest, res, d.opts.Now(), d.opts.Delivery.SetupCheck.Initial); err != nil {
			return failures.Outcome{}, err
		}
		if !res.passed {
			return failures.Outcome{Class: failures.Rejected, Message: res.message}, nil // counted nowhere: it is pending
		}
		d.touch(id) // its worker, if on this replica, starts delivering what waited
		checked = true
	}
	now := d.opts.Now().UTC()
	eventID := "relay.test." + randomHex(8)
	data, _ := json.Marshal(map[string]any{"test": true, "message": "a test event sent from the relay; ignore it", "destination": dest.ID})
	msg := destination.Message{ID: destination.MessageID(dest.ID, eventID), Type: destination.TestType, EventID: eventID,
		CreatedAt: now.Format(time.RFC3339Nano), Data: data, Account: dest.Account}
	sendCtx, cancel := context.WithTimeout(ctx, sendTimeout)
	defer cancel()
	sink := d.sink(dest)
	// The whole path: a fresh probe and session, or a fresh label read, before the write.
	if c, ok := sink.(checker); ok && !checked {
		err = c.Check(sendCtx, dest)
		if wait, held := failures.HeldBack(err); held {
			return failures.Outcome{}, HeldBack{Wait: wait} // nothing was sent: no attempt is recorded
		}
		check := failures.Classify(err)
		if _, emitErr := d.opts.Store.Emit(ctx, ref(dest), "destination.checked", map[string]any{
			"destination": dest.ID, "class": string(check.Class), "message": check.Message, "test": true,
		}, d.opts.Delivery.ChannelRetention); emitErr != nil {
			d.opts.Logger.Warn("destination.checked not recorded", "destination", dest.ID, "error", emitErr)
		}
	}
	if err == nil {
		err = sink.Send(sendCtx, dest, msg)
	}
	outcome := failures.Classify(err)
	d.opts.Metrics.observe(dest, outcome.Class, 0, 0)
	cfg := d.opts.Delivery
	res, err := d.opts.Store.Commit(ctx, store.Commit{Ref: ref(dest), Kind: string(outcome.Class), EventID: eventID,
		MessageID: msg.ID, Message: outcome.Message, Test: true, DisableAfter: cfg.DisableAfter, WarnAfter: cfg.WarnAfter,
		ChannelRetention: cfg.ChannelRetention, AttemptsRetention: cfg.AttemptsRetention})
	if err != nil {
		return outcome, err
	}
	if outcome.Class == failures.Delivered && st.Status == store.Active {
		// The bus takes writes now: the holder sends a message it holds in backoff at once.
		if err := d.opts.Store.Notify(ctx, ref(dest), store.ControlCount); err != nil {
			d.opts.Logger.Warn("the lease holder was not told of the delivered test", "destination", dest.ID, "error", err)
		}
		d.touch(id)
	}
	if res.Disabled {
		d.announceDisabled(ctx, dest)
		// The test's rejection disabled it: the lease holder reads the status now.
		if err := d.opts.Store.Notify(ctx, ref(dest), store.ControlStatus); err != nil {
			d.opts.Logger.Warn("the lease holder was not told of the disable", "destination", dest.ID, "error", err)
		}
		d.touch(id)
	}
	return outcome, nil
}

// setupResult is what a setup check found: passed, or the sentence that says what is
// missing; held, when the relay's own STS pacing kept the check from running (nothing
// reached STS, so nothing is known of the customer's setup), is how long until it can.
type setupResult struct {
	passed  bool
	message string
	held    time.Duration
	last    *store.PendingCheck // the card's check as stored before this one (nil: none)
}

// checkSetup runs dest's setup check through its sink, if the sink has one (a sink
// without one passes), and records it as destination.checked: passed, or the sentence
// that says what is missing. A check the STS budget held back is not recorded.
func (d *Dispatcher) checkSetup(ctx context.Context, dest destination.Destination) setupResult {
	c, ok := d.sink(dest).(checker)
	if !ok {
		return setupResult{passed: true}
	}
	st, err := d.opts.Store.LoadState(ctx, ref(dest))
	if err != nil {
		return setupResult{message: "the setup check did not run: " + err.Error()}
	}
	dest.ExternalID = st.ExternalID
	checkCtx, cancel := context.WithTimeout(ctx, sendTimeout)
	defer cancel()
	checkErr := c.Check(checkCtx, dest)
	if wait, held := failures.HeldBack(checkErr); held {
		return setupResult{held: max(wait, time.Millisecond), last: st.Pending}
	}
	check, reason := failures.Classify(checkErr), failures.Reason(checkErr)
	if check.Class == failures.Rejected {
		d.setupRefused(ctx, dest, reason) // before the event, whose card state then says it
	}
	event := map[string]any{"destination": dest.ID, "class": string(check.Class), "message": check.Message, "setup": true}
	if reason != "" {
		event["reason"], event["security"] = reason, true
	}
	if _, err := d.opts.Store.Emit(ctx, ref(dest), "destination.checked", event, d.opts.Delivery.ChannelRetention); err != nil {
		d.opts.Logger.Warn("destination.checked not recorded", "destination", dest.ID, "error", err)
	}
	if check.Class == failures.Delivered {
		return setupResult{passed: true}
	}
	return setupResult{message: check.Message}
}

// recordCheck stores a pending destination's setup check, ended at now, for its card,
// with the next check wait after it, and returns the status after (active when it
// passed). One clock reading gives both times, so the card's gap is the wait. A check the STS
// budget held back keeps the card's last sentence (the last refusal: what the customer
// must fix) and moves only the next check's time; with no check stored yet it says so.
func (d *Dispatcher) recordCheck(ctx context.Context, dest destination.Destination, res setupResult, now time.Time, wait time.Duration) (string, error) {
	now = now.UTC()
	next := now.Add(wait)
	check := store.PendingCheck{At: now, Message: res.message, NextCheck: next}
	if res.held > 0 {
		if res.last != nil && res.last.Message != "" {
			check.At, check.Message = res.last.At, res.last.Message
		} else {
			check.Message = "the setup check has not run yet: the relay paces its calls to AWS STS and runs it at " +
				next.Format(time.RFC3339)
		}
	}
	return d.opts.Store.SetupChecked(ctx, ref(dest), res.passed, check, d.opts.Delivery.ChannelRetention)
}

// setupRefused records a definite refusal of dest's setup: its reason for the card
// (store.SetupRefusal: the pending check the caller stores next carries it) and the
// count by reason. A security reason is also logged as a warning: it is a customer's
// role that would let others in, which the relay refuses to use.
func (d *Dispatcher) setupRefused(ctx context.Context, dest destination.Destination, reason string) {
	if err := d.opts.Store.SetupRefusal(ctx, ref(dest), reason); err != nil {
		d.opts.Logger.Warn("setup refusal not recorded", "destination", dest.ID, "error", err)
	}
	if reason == "" {
		d.opts.Metrics.SetupRefused.WithLabelValues(setupIncomplete).Inc()
		return
	}
	d.opts.Metrics.SetupRefused.WithLabelValues(reason).Inc()
	d.opts.Logger.Warn("setup refused for a security reason; the destination stays pending", "destination", dest.ID,
		"account", dest.Account, "reason", reason)
}

// HeldBack is Test's error when the relay's own pacing of STS calls (aws.sts_budget)
// kept the test from running: nothing was sent or recorded, and it can run after Wait.
type HeldBack struct{ Wait time.Duration }

func (h HeldBack) Error() string {
	return fmt.Sprintf("the relay paces its calls to AWS STS for this destination: send a test again in %s", retryIn(h.Wait))
}

// retryIn is d rounded up to a whole second, at least one.
func retryIn(d time.Duration) time.Duration {
	return max(time.Second, (d + time.Second - 1).Truncate(time.Second))
}

// checker is a Sink that can check its destination's setup on demand: the AWS sinks
// (probe and session) and Pub/Sub (the ownership label).
type checker interface {
	Check(ctx context.Context, d destination.Destination) error
}

// announceDisabled runs after a script disabled dest: the script wrote
// destination.disabled, with the card's last failure, to the account's outbox in the
// same step, so the platform's mailer can tell the customer. Here it is logged, and the
// outbox's drainer nudged to publish it now. Nothing here waits on the broker.
func (d *Dispatcher) announceDisabled(ctx context.Context, dest destination.Destination) {
	reason, by := "", store.DisabledByOperator
	if st, err := d.opts.Store.LoadState(ctx, ref(dest)); err == nil && st.Disabled != nil {
		reason, by = st.Disabled.Reason, st.Disabled.By
	}
	d.opts.Metrics.Disabled.WithLabelValues(by).Inc()
	d.opts.Logger.Warn("destination disabled; destination.disabled is in the outbox", "destination", dest.ID,
		"account", dest.Account, "reason", reason, "by", by)
	if d.opts.Outbox != nil {
		d.opts.Outbox.Nudge()
	}
}
