package dispatch

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/failures"
	"github.com/mercamap/relay/internal/store"
)

// Retry asks for the message of attempt n of a destination's attempt log to be written
// once more, outside the ordered stream (store.AskRetry). The destination's lease
// holder, on whichever replica, carries it out between ordered deliveries, through the
// same sink, session and write fence, and records its outcome as an attempt of its own.
// It never moves the cursor and never counts toward the disable.
func (d *Dispatcher) Retry(ctx context.Context, id string, n int64) (store.RetryRequest, error) {
	dest, ok := d.Destination(id)
	if !ok {
		return store.RetryRequest{}, destination.ErrNotFound
	}
	req, err := d.opts.Store.AskRetry(ctx, ref(dest), n)
	if err != nil {
		return req, err
	}
	d.opts.Logger.Info("retry asked for", "destination", id, "event_id", req.EventID, "retry_of", n, "attempt", req.Attempt)
	d.touch(id) // this replica's worker, if any, takes it now; another's on the control entry
	return req, nil
}

// retries carries out the destination's queued retries, oldest first, one write at a
// time, at the start of a pass. It returns nil once none is left, ErrStaleLease when
// the lease was lost, errStop when the write fence refused, and idleFor when Redis
// failed: the rest stay queued for a later pass.
func (w *worker) retries(ctx context.Context, dest destination.Destination, log *slog.Logger) error {
	for {
		if ctx.Err() != nil {
			return errStop
		}
		req, err := w.d.opts.Store.NextRetry(ctx, ref(w.dest), w.token)
		switch {
		case errors.Is(err, store.ErrStaleLease):
			return err
		case err != nil:
			log.Warn("cannot take a queued retry", "error", err)
			return idleFor{pause: time.Second}
		case req == nil:
			return nil // none left, or the destination is no longer active
		}
		done := store.RetryDone{Ref: ref(w.dest), Token: w.token, Request: *req,
			ChannelRetention: w.d.opts.Delivery.ChannelRetention}
		e, err := w.d.opts.Store.LogEntryAt(ctx, w.dest.Account, req.LogID)
		switch {
		case errors.Is(err, store.ErrNoSuchEvent):
			done.Kind, done.Message = store.KindExpired, "the account's log no longer holds the event (older than the log keeps)"
		case err != nil:
			log.Warn("cannot read a retry's event", "event_id", req.EventID, "error", err)
			return idleFor{pause: time.Second}
		default:
			msg := w.d.message(dest, e)
			if !w.startWrite() {
				return errStop // the fence: a status change or a lapsed lease
			}
			sendCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sendTimeout)
			outcome := failures.Classify(w.d.sink(dest).Send(sendCtx, dest, msg))
			cancel()
			w.endWrite()
			done.Kind, done.MessageID, done.Message = string(outcome.Class), msg.ID, outcome.Message
			if outcome.Class == failures.Delivered {
				done.Message = "delivered"
			}
		}
		log.Info("retry attempt", "event_id", req.EventID, "retry_of", req.RetryOf, "class", done.Kind, "message", done.Message)
		if err := w.retryDone(ctx, done); err != nil {
			return err
		}
	}
}

// retryDone records a retry's outcome, retrying while Redis is unreachable (as commit
// does: a write that landed must not be forgotten).
func (w *worker) retryDone(ctx context.Context, done store.RetryDone) error {
	wait := 50 * time.Millisecond
	for {
		_, err := w.d.opts.Store.RetryDone(context.WithoutCancel(ctx), done)
		if err == nil || errors.Is(err, store.ErrStaleLease) {
			return err
		}
		w.d.opts.Logger.Warn("retry outcome not recorded; retrying", "destination", w.dest.ID, "error", err)
		if ctx.Err() != nil && wait > 2*time.Second {
			return errStop
		}
		time.Sleep(wait)
		wait = min(2*wait, 5*time.Second)
	}
}
