package dispatch

import (
	"context"
	"time"

	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/failures"
	"github.com/mercamap/relay/internal/store"
)

// The setup check of a pending destination: run through its sink, recorded for its card.

// setupResult is what a setup check found: passed, or the sentence that says what is
// missing; held, when the relay's own STS pacing kept the check from running (nothing
// reached STS, so nothing is known of the customer's setup), is how long until it can.
type setupResult struct {
	passed  bool
	message string
	held    time.Duration
	last    *store.PendingCheck // the card's check as stored before this one (nil: none)
}

// runSetupCheck runs dest's setup check through its sink, if the sink has one (a sink
// without one passes), and records it as destination.checked: passed, or the sentence
// that says what is missing. A check the STS budget held back is not recorded.
func (d *Dispatcher) runSetupCheck(ctx context.Context, dest destination.Destination) setupResult {
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
	if wait, held := failures.HeldBackFor(checkErr); held {
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

// checker is a Sink that can check its destination's setup on demand: the AWS sinks
// (probe and session) and Pub/Sub (the ownership label).
type checker interface {
	Check(ctx context.Context, d destination.Destination) error
}
