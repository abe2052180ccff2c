package dispatch

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/failures"
	"github.com/mercamap/relay/internal/store"
)

// "Send a test": one clearly marked event through the whole path, recorded like any
// other attempt.

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
		res := d.runSetupCheck(ctx, dest)
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
		if wait, held := failures.HeldBackFor(err); held {
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
