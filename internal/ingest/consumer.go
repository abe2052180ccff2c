// Package ingest takes job events off RabbitMQ: it declares the relay's queue and the
// quarantine, verifies each message, appends the good ones to Redis and acks the broker
// only after Redis holds them. It must never ack a message Redis does not hold.
package ingest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/mercamap/relay/internal/signature"
	"github.com/mercamap/relay/internal/store"
)

// Router says which accounts an event belongs to.
type Router interface {
	AccountsFor(tenant, source string) []string
}

// Options configure a Consumer.
type Options struct {
	URL          string // amqp:// URL (holds a password: never logged)
	Topology     Topology
	Prefetch     int
	Verifier     signature.Verifier
	Store        *store.Store
	Router       Router        // the routing at start; SetRouter replaces it
	DedupWindow  time.Duration // lifetime of a ce-id dedup marker
	LogRetention time.Duration // account logs are trimmed of entries older than this
	Logger       *slog.Logger
	Metrics      *Metrics
	// AfterAppend, when set, runs after a batch is in Redis and before it is acked.
	// Failure drills use it to stop the process in exactly that gap.
	AfterAppend func()
}

// Consumer is the ingest loop. Run it once; it reconnects by itself.
type Consumer struct {
	opts      Options
	connected atomic.Bool

	// routing is held by handle for one batch, from routing to ack, so a batch is routed
	// by one table and SetRouter swaps between batches. Only the ingest goroutine takes it
	// in steady state (once a batch, never contended); a reload waits for the batch in hand.
	routing sync.Mutex
	router  Router
}

// New returns a Consumer. Logger and Metrics default to discarding ones.
func New(opts Options) *Consumer {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Metrics == nil {
		opts.Metrics = NewMetrics(nil)
	}
	if opts.Prefetch < 1 {
		opts.Prefetch = 256
	}
	return &Consumer{opts: opts, router: opts.Router}
}

// SetRouter routes every event from the next batch on by r. It returns once the batch in
// hand (routed by the old table) is acked: from then on no event is acked as unrouted
// unless r routes it nowhere. r must not change afterwards.
func (c *Consumer) SetRouter(r Router) {
	c.routing.Lock()
	defer c.routing.Unlock()
	c.router = r
}

// Connected reports whether the consumer holds a live broker connection.
func (c *Consumer) Connected() bool { return c.connected.Load() }

// Run consumes until ctx is cancelled, reconnecting with backoff whenever the broker
// connection is lost. On cancel it finishes the batch in hand and returns nil. It returns
// a *TopologyError, without retrying, when the broker holds the queue (or an exchange)
// with other arguments: that is fixed by an operator, never by reconnecting.
func (c *Consumer) Run(ctx context.Context) error {
	const minWait, maxWait = 100 * time.Millisecond, 15 * time.Second
	wait := minWait
	for {
		started := time.Now()
		err := c.session(ctx)
		c.connected.Store(false)
		if ctx.Err() != nil {
			return nil
		}
		var mismatch *TopologyError
		if errors.As(err, &mismatch) {
			return err
		}
		if time.Since(started) > time.Minute {
			wait = minWait
		}
		pause := wait/2 + rand.N(wait/2+1)
		c.opts.Logger.Warn("broker connection lost; reconnecting", "error", err, "retry_in", pause.String())
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(pause):
		}
		wait = min(2*wait, maxWait)
	}
}

// session runs one broker connection until it fails or ctx is cancelled.
func (c *Consumer) session(ctx context.Context) error {
	conn, err := amqp.DialConfig(c.opts.URL, amqp.Config{
		Heartbeat:  10 * time.Second,
		Properties: amqp.Table{"connection_name": "relay-ingest"},
	})
	if err != nil {
		return fmt.Errorf("connect to broker: %w", err) // dial errors name the host, never the password
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("open channel: %w", err)
	}
	if err := c.opts.Topology.declare(ch); err != nil {
		return err
	}
	if err := ch.Qos(c.opts.Prefetch, 0, false); err != nil {
		return fmt.Errorf("set prefetch: %w", err)
	}
	quarantine, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("open quarantine channel: %w", err)
	}
	if err := quarantine.Confirm(false); err != nil {
		return fmt.Errorf("enable publisher confirms: %w", err)
	}
	tag := "relay-" + strconv.Itoa(os.Getpid()) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	deliveries, err := ch.ConsumeWithContext(ctx, c.opts.Topology.Queue, tag, false, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("consume %q: %w", c.opts.Topology.Queue, err)
	}
	// amqp091-go hands deliveries over one at a time on an unbuffered channel; a buffer
	// the size of the prefetch window lets a batch form while Redis answers the last one.
	buffered := make(chan amqp.Delivery, c.opts.Prefetch)
	stop := make(chan struct{})
	defer close(stop)
	go func(in <-chan amqp.Delivery) {
		defer close(buffered)
		for d := range in {
			select {
			case buffered <- d:
			case <-stop:
				return
			}
		}
	}(deliveries)
	deliveries = buffered
	c.connected.Store(true)
	c.opts.Logger.Info("consuming", "queue", c.opts.Topology.Queue, "prefetch", c.opts.Prefetch)

	batch := make([]amqp.Delivery, 0, c.opts.Prefetch)
	for {
		batch = batch[:0]
		select {
		case <-ctx.Done():
			return nil // unacked deliveries go back to the queue when the connection closes
		case d, ok := <-deliveries:
			if !ok {
				return errors.New("delivery channel closed by the broker")
			}
			batch = append(batch, d)
		}
	fill:
		for len(batch) < cap(batch) {
			select {
			case d, ok := <-deliveries:
				if !ok {
					break fill
				}
				batch = append(batch, d)
			default:
				break fill
			}
		}
		if err := c.handle(ctx, quarantine, batch); err != nil {
			return err
		}
	}
}

// handle verifies a batch, quarantines what fails, appends the rest in one round trip,
// and acks the whole batch only once Redis has answered for every event in it.
func (c *Consumer) handle(ctx context.Context, quarantine *amqp.Channel, batch []amqp.Delivery) error {
	c.routing.Lock()
	defer c.routing.Unlock()
	m := c.opts.Metrics
	m.Consumed.Add(float64(len(batch)))
	appends := make([]store.Append, 0, len(batch))
	var confirms []*amqp.DeferredConfirmation
	for _, d := range batch {
		entry, tenant, rej := c.check(d)
		if rej != nil {
			dc, err := c.quarantine(ctx, quarantine, d, rej)
			if err != nil {
				return err
			}
			confirms = append(confirms, dc)
			continue
		}
		accounts := c.router.AccountsFor(tenant, entry.Source)
		if len(accounts) == 0 {
			m.Unrouted.Inc()
			c.opts.Logger.Debug("event for no account", "event_id", entry.EventID, "tenant", tenant)
			continue
		}
		appends = append(appends, store.Append{Entry: entry, Accounts: accounts})
	}
	for _, dc := range confirms {
		if ok, err := dc.WaitContext(context.WithoutCancel(ctx)); err != nil || !ok {
			return fmt.Errorf("quarantine publish not confirmed (ok=%v): %v", ok, err)
		}
	}
	results, err := c.appendUntilStored(ctx, appends)
	if err != nil {
		return err
	}
	for _, r := range results {
		if r.Duplicate() {
			m.Duplicates.Inc()
		} else {
			m.Stored.Inc()
		}
	}
	if c.opts.AfterAppend != nil {
		c.opts.AfterAppend()
	}
	// Every message up to the last of the batch is settled: one multiple-ack covers them.
	if err := batch[len(batch)-1].Ack(true); err != nil {
		return fmt.Errorf("ack: %w", err)
	}
	m.Acked.Add(float64(len(batch)))
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
		results, err := c.opts.Store.AppendBatch(actx, appends, c.opts.DedupWindow, c.opts.LogRetention)
		cancel()
		if err == nil {
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

// quarantine republishes the whole message, with why, to the quarantine exchange.
func (c *Consumer) quarantine(ctx context.Context, ch *amqp.Channel, d amqp.Delivery, rej *rejection) (*amqp.DeferredConfirmation, error) {
	headers := make(amqp.Table, len(d.Headers)+4)
	for k, v := range d.Headers {
		headers[k] = v
	}
	headers["x-relay-reason"] = rej.reason
	headers["x-relay-detail"] = rej.detail
	headers["x-relay-exchange"] = d.Exchange
	headers["x-relay-routing-key"] = d.RoutingKey
	dc, err := ch.PublishWithDeferredConfirmWithContext(context.WithoutCancel(ctx), c.opts.Topology.QuarantineExchange, d.RoutingKey, false, false, amqp.Publishing{
		Headers:         headers,
		ContentType:     d.ContentType,
		ContentEncoding: d.ContentEncoding,
		DeliveryMode:    amqp.Persistent,
		CorrelationId:   d.CorrelationId,
		MessageId:       d.MessageId,
		Timestamp:       d.Timestamp,
		Type:            d.Type,
		AppId:           d.AppId,
		Body:            d.Body,
	})
	if err != nil {
		return nil, fmt.Errorf("quarantine publish: %w", err)
	}
	c.opts.Metrics.Quarantined.WithLabelValues(rej.reason).Inc()
	c.opts.Logger.Warn("message quarantined", "reason", rej.reason, "detail", rej.detail, "routing_key", d.RoutingKey, "message_id", d.MessageId)
	return dc, nil
}
