package dispatch

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/mercamap/relay/internal/destination"
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
