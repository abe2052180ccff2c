package ingest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/mercamap/relay/internal/store"
	amqp "github.com/rabbitmq/amqp091-go"
)

// The batch pipeline: the path that must never ack what Redis does not hold.

// batches handles what s delivers, one batch at a time, in two stages that overlap:
// while one batch's append is in Redis, the next is formed, verified and routed
// (prepare); once the first is acked (settle), what arrived meanwhile joins the next
// before it goes to Redis. Batches are appended and acked in order, so a multiple ack
// never covers a message of a later batch, and each is acked only once Redis holds it.
func (c *Consumer) batches(ctx context.Context, p *partition, s *subscription) error {
	var bufs [2][]amqp.Delivery // a batch in Redis and the one being formed
	for i := range bufs {
		bufs[i] = make([]amqp.Delivery, 0, c.opts.Prefetch)
	}
	var inflight *prepared // appending; nil: none
	settle := func() error {
		err := c.settle(inflight)
		inflight = nil
		return err
	}
	// fill adds to batch what is already waiting, up to the prefetch.
	fill := func(batch []amqp.Delivery) []amqp.Delivery {
		for len(batch) < cap(batch) {
			select {
			case d, ok := <-s.deliveries:
				if !ok {
					return batch // the next receive reports it
				}
				batch = append(batch, d)
			default:
				return batch
			}
		}
		return batch
	}
	for next := 0; ; {
		batch := bufs[next][:0]    // bufs[1-next] holds the batch in flight, if any
		var stored <-chan struct{} // closed when the batch in flight is stored
		if inflight != nil {
			stored = inflight.stored
		}
		select {
		case <-ctx.Done():
			if inflight != nil {
				return settle()
			}
			return nil // unacked deliveries go back to the queue when the connection closes
		case <-stored:
			if err := settle(); err != nil {
				return err
			}
			continue
		case <-p.yieldNow:
			if !p.yield.Load() {
				continue
			}
			if inflight != nil {
				if err := settle(); err != nil {
					return err
				}
			}
			return errYield
		case d, ok := <-s.deliveries:
			if !ok {
				err := fmt.Errorf("delivery channel of %q closed by the broker", p.queue)
				if inflight != nil { // settled all the same: it holds the routing lock
					err = errors.Join(err, settle())
				}
				return err
			}
			batch = append(batch, d)
		}
		batch = fill(batch)
		p.last.Store(time.Now().UnixNano())
		formed := time.Now().UnixNano()
		c.heldSince.CompareAndSwap(0, formed) // the oldest batch in hand, of any partition
		// A reload waiting for the routing lock waits for the batch in flight: settle it
		// before waiting in line (a reader blocked behind a writer would never settle it).
		if !c.routing.TryRLock() {
			if inflight != nil {
				if err := settle(); err != nil {
					return err
				}
			}
			c.routing.RLock()
		}
		pb := &prepared{batch: batch, stored: make(chan struct{})}
		err := c.prepare(ctx, s.link, pb, 0)
		if err == nil && inflight != nil {
			err = settle() // in order: the batch before this one is acked first
			if n := len(pb.batch); err == nil && n < cap(pb.batch) {
				// What arrived while that batch was in Redis joins this one.
				if pb.batch = fill(pb.batch); len(pb.batch) > n {
					err = c.prepare(ctx, s.link, pb, n)
				}
			}
		}
		if err != nil {
			pb.spans.end(err)
			c.routing.RUnlock()
			if inflight != nil { // prepare failed: still settle the batch before it
				err = errors.Join(err, settle())
			}
			c.heldSince.Store(0)
			return err
		}
		c.heldSince.Store(formed)
		pb.formed = formed
		inflight = pb
		next = 1 - next
		go c.store(ctx, pb)
		if p.yield.Load() {
			if err := settle(); err != nil {
				return err
			}
			return errYield
		}
	}
}

// prepared is a batch verified and routed (holding the routing lock shared), whose
// append runs while the next batch is prepared.
type prepared struct {
	batch    []amqp.Delivery
	appends  []store.Append
	rejected []bool
	spans    traceSpans
	formed   int64 // unix ns the batch was formed

	stored  chan struct{} // closed by store once results or err is set
	results []store.Appended
	err     error
}

// prepare verifies pb.batch[from:], quarantines what fails and routes the rest. A message that
// cannot be quarantined by a copy (unreadable headers, a copy too large for a frame, a
// copy the broker refused, or blocks: publisher.go) is rejected instead, and the broker
// dead-letters it, unchanged, to the quarantine exchange. The caller holds c.routing shared; settle
// releases it once the batch is acked.
func (c *Consumer) prepare(ctx context.Context, l link, pb *prepared, from int) error {
	m := c.opts.Metrics
	batch := pb.batch[from:]
	m.Consumed.Add(float64(len(batch)))
	pb.rejected = append(pb.rejected, make([]bool, len(batch))...)
	if pb.appends == nil {
		pb.appends = make([]store.Append, 0, cap(pb.batch))
	}
	var copies []quarantined
	for i, d := range batch {
		if reason := unreadableReason(d.Headers, l.nonce); reason != "" {
			if err := c.deadLetter(d, reason, "headers the client cannot read"); err != nil {
				return err
			}
			pb.rejected[from+i] = true
			continue
		}
		entry, tenant, rej := c.check(d)
		if rej != nil && l.gate.isBlocked() {
			if err := c.deadLetter(d, rej.reason, blockedWhy); err != nil {
				return err
			}
			pb.rejected[from+i] = true
			continue
		}
		if rej != nil {
			msg, fits := c.fittingCopy(l, d, rej)
			if !fits {
				if err := c.deadLetter(d, rej.reason, "the quarantine copy would not fit in one frame"); err != nil {
					return err
				}
				pb.rejected[from+i] = true
			} else {
				copies = append(copies, quarantined{i: from + i, reason: rej.reason, msg: msg})
			}
			continue
		}
		accounts := c.router.AccountsFor(tenant, entry.Source)
		if len(accounts) == 0 {
			m.Unrouted.Inc()
			c.opts.Logger.Debug("event for no account", "event_id", entry.EventID, "tenant", tenant)
			continue
		}
		pb.spans.start(c.opts.Tracer, d, &entry)
		pb.appends = append(pb.appends, store.Append{Entry: entry, Accounts: accounts})
	}
	dcs, err := c.publishCopies(l, pb.batch, copies)
	if err != nil {
		return err
	}
	for k, p := range copies {
		dc := dcs[k]
		if !confirmedOrBlocked(dc, l.gate) {
			// The copy waits behind the alarm, or was never written (and may land once it
			// ends: a second copy then); the original goes now, whole.
			if err := c.deadLetter(pb.batch[p.i], p.reason, blockedWhy); err != nil {
				return err
			}
			pb.rejected[p.i] = true
			continue
		}
		if !dc.Acked() {
			if err := c.deadLetter(pb.batch[p.i], p.reason, "the broker refused the quarantine copy"); err != nil {
				return err
			}
			pb.rejected[p.i] = true
			continue
		}
		m.Quarantined.WithLabelValues(p.reason).Inc()
		if max := c.opts.Topology.Quarantine.MaxBodyBytes; max > 0 && len(pb.batch[p.i].Body) > max {
			m.QuarantineTruncated.Inc()
		}
	}
	return nil
}

// store appends pb's events (appendUntilStored) and closes pb.stored.
func (c *Consumer) store(ctx context.Context, pb *prepared) {
	pb.results, pb.err = c.appendUntilStored(ctx, pb.appends)
	close(pb.stored)
}

// settle waits for pb's append and acks the batch once Redis has answered for every
// event in it: one multiple-ack of the last message not rejected covers them all (the
// broker skips the rejected ones; a multiple-ack of a rejected one would fail as an
// unknown delivery tag and close the channel). It releases the routing lock.
func (c *Consumer) settle(pb *prepared) (err error) {
	defer c.routing.RUnlock()
	defer func() { pb.spans.end(err) }()
	<-pb.stored
	if pb.err != nil {
		return pb.err
	}
	m := c.opts.Metrics
	for _, r := range pb.results {
		if r.Duplicate() {
			m.Duplicates.Inc()
		} else {
			m.Stored.Inc()
		}
	}
	if c.opts.AfterAppend != nil {
		c.opts.AfterAppend()
	}
	for i := len(pb.batch) - 1; i >= 0; i-- {
		if pb.rejected[i] {
			continue
		}
		if err := pb.batch[i].Ack(true); err != nil {
			return fmt.Errorf("ack: %w", err)
		}
		break
	}
	for _, r := range pb.rejected {
		if !r {
			m.Acked.Inc()
		}
	}
	c.heldSince.CompareAndSwap(pb.formed, 0)
	return nil
}

// appendUntilStored retries the append while Redis is unreachable. Nothing is acked
// meanwhile; on shutdown it gives up and the broker keeps the messages.
func (c *Consumer) appendUntilStored(ctx context.Context, appends []store.Append) ([]store.Appended, error) {
	const minWait, maxWait = 50 * time.Millisecond, 5 * time.Second
	wait := minWait
	for {
		// The append of a batch in hand finishes even while shutting down.
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		results, runs, err := c.opts.Store.AppendBatchRuns(actx, appends, c.opts.DedupWindow, c.opts.LogRetention)
		cancel()
		if err == nil {
			if c.opts.Local != nil {
				c.opts.Local.Appended(runs)
			}
			return results, nil
		}
		c.opts.Metrics.StoreErrors.Inc()
		c.opts.Logger.Warn("redis append failed; holding the batch unacked", "events", len(appends), "error", err, "retry_in", wait.String())
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("shutting down with %d events not stored (left in the broker): %w", len(appends), err)
		case <-time.After(wait):
		}
		wait = min(2*wait, maxWait)
	}
}
