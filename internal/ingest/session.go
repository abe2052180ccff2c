package ingest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// A session: one broker connection, reconnected by Run, and the subscriptions on it.

// Run consumes until ctx is cancelled, reconnecting with backoff whenever the broker
// connection is lost. On cancel it finishes the batch in hand and returns nil. It returns
// a *TopologyError, without retrying, when the broker holds the queue (or an exchange)
// with other arguments, and a *PluginError when partitions need a plugin the broker has
// not enabled: those are fixed by an operator, never by reconnecting. Each reconnection
// tries the next node of Options.URLs first.
func (c *Consumer) Run(ctx context.Context) error {
	const minWait, maxWait = 100 * time.Millisecond, 15 * time.Second
	wait := minWait
	for {
		started := time.Now()
		err := c.runSession(ctx)
		wasConnected := c.connected.Swap(false)
		if ctx.Err() != nil {
			return nil
		}
		var mismatch *TopologyError
		var plugin *PluginError
		if errors.As(err, &mismatch) || errors.As(err, &plugin) {
			return err
		}
		if wasConnected {
			c.opts.Metrics.ConnectionLosses.Inc()
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

// session is one broker connection and what rides beside it: the quarantine's own
// connection (publisher.go: why apart) with the gate that says whether the broker
// blocks it, and the nonce of the connection's header filter (unreadableReason).
type session struct {
	conn  *amqp.Connection // through a headerFilter (framefilter.go)
	pub   *amqp.Connection // the quarantine copies' connection
	gate  *flowGate
	nonce string
}

// runSession runs one session until it fails or ctx is cancelled: one consumer (with
// its own channels) for each queue of the topology, the count of what a bounded
// quarantine drops and, with partitions, the rebalancing loop.
func (c *Consumer) runSession(ctx context.Context) error {
	// Through a headerFilter: headers amqp091-go cannot read would otherwise close the
	// connection at every delivery of the same message.
	var s session
	var at string
	err := c.nodes.Connect(func(url string) error {
		var err error
		s.conn, s.nonce, err = dialFiltered(url, amqp.Config{
			Heartbeat:  10 * time.Second,
			Properties: amqp.Table{"connection_name": "relay-ingest"},
		})
		at = url
		return err
	})
	if err != nil {
		return fmt.Errorf("connect to broker: %w", err) // dial errors name the host, never the password
	}
	defer s.conn.Close()
	s.pub, s.gate, err = openPublisher(at, c.opts.Logger) // publisher.go: why apart
	if err != nil {
		return fmt.Errorf("connect to broker for the quarantine: %w", err)
	}
	// A blocked connection's close is never answered (the broker does not read it).
	defer func() { _ = s.pub.CloseDeadline(time.Now().Add(pubCloseWait)) }()
	pubClosed := s.pub.NotifyClose(make(chan *amqp.Error, 1))
	ch, err := s.conn.Channel()
	if err != nil {
		return fmt.Errorf("open channel: %w", err)
	}
	if err := c.opts.Topology.declare(ch); err != nil {
		return err
	}
	ch.Close()

	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	queues := c.opts.Topology.Queues()
	parts := make([]*partition, len(queues))
	for i, q := range queues {
		parts[i] = &partition{queue: q, yieldNow: make(chan struct{}, 1)}
	}
	defer func() {
		for _, p := range parts {
			p.sub.stop() // the connection's close (deferred above) closes the channels
		}
	}()
	for _, p := range parts {
		if p.sub, err = c.subscribe(&s, p.queue); err != nil {
			return err
		}
	}
	c.connected.Store(true)
	c.conn.Store(s.conn)
	defer c.conn.Store(nil)
	defer c.heldSince.Store(0) // unacked messages go back to the queue with the connection
	c.opts.Logger.Info("consuming", "queues", queues, "prefetch", c.opts.Prefetch)

	var drops func() error // counts what the full quarantine drops; nil: unbounded
	if c.opts.Topology.Quarantine.bounded() {
		if drops, err = c.countDrops(sctx, s.conn); err != nil {
			return err
		}
	}

	errs := make(chan error, len(parts)+3)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case e := <-pubClosed:
			errs <- fmt.Errorf("quarantine connection closed: %v", e)
		case <-sctx.Done():
		}
	}()
	if drops != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- drops()
		}()
	}
	for _, p := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- c.consume(sctx, &s, p)
		}()
	}
	if len(parts) > 1 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- c.rebalance(sctx, s.conn, parts)
		}()
	}
	// The first to end (an error, or nil on shutdown) ends the session; each consumer
	// finishes the batch in hand before it returns.
	err = <-errs
	cancel()
	wg.Wait()
	return err
}

// subscription is one consumer on one queue: its channel (prefetch set), a quarantine
// channel with publisher confirms (on the quarantine connection), and its deliveries.
type subscription struct {
	ch, quarantine *amqp.Channel
	link           link
	deliveries     <-chan amqp.Delivery
	done           chan struct{} // closed by stop
}

// subscribe opens a subscription to queue on the session's connection, its quarantine
// channel on the quarantine's.
func (c *Consumer) subscribe(ss *session, queue string) (*subscription, error) {
	ch, err := ss.conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("open channel: %w", err)
	}
	s := &subscription{ch: ch, done: make(chan struct{})}
	if err := ch.Qos(c.opts.Prefetch, 0, false); err != nil {
		s.close()
		return nil, fmt.Errorf("set prefetch: %w", err)
	}
	if s.quarantine, err = ss.pub.Channel(); err != nil {
		s.close()
		return nil, fmt.Errorf("open quarantine channel: %w", err)
	}
	if err := s.quarantine.Confirm(false); err != nil {
		s.close()
		return nil, fmt.Errorf("enable publisher confirms: %w", err)
	}
	s.link = link{quarantine: s.quarantine, gate: ss.gate, nonce: ss.nonce, frameMax: min(ss.conn.Config.FrameSize, ss.pub.Config.FrameSize)}
	tag := "relay-" + strconv.Itoa(os.Getpid()) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	// Not ConsumeWithContext: its cancel on ctx.Done races with close's Channel.Close, and
	// amqp091-go can hand one call's reply to the other, leaving that call waiting forever.
	deliveries, err := ch.Consume(queue, tag, false, false, false, false, nil)
	if err != nil {
		s.close()
		return nil, fmt.Errorf("consume %q: %w", queue, err)
	}
	// amqp091-go hands deliveries over one at a time on an unbuffered channel; a buffer
	// the size of the prefetch window lets a batch form while Redis answers the last one.
	buffered := make(chan amqp.Delivery, c.opts.Prefetch)
	go func(in <-chan amqp.Delivery) {
		defer close(buffered)
		for d := range in {
			select {
			case buffered <- d:
			case <-s.done:
				// Keep taking what amqp091-go hands over until it closes in: closing the
				// channel waits for its delivery goroutine, blocked on in otherwise.
				for range in {
				}
				return
			}
		}
	}(deliveries)
	s.deliveries = buffered
	return s, nil
}

// close ends the subscription: the broker takes back what it delivered and nobody acked,
// and hands the queue to the next consumer, those messages first.
func (s *subscription) close() {
	if s == nil {
		return
	}
	s.stop()
	s.ch.Close()
	if s.quarantine != nil {
		// Its close waits for the broker's answer, which a blocked connection never
		// reads until the alarm ends (publisher.go): the handover does not wait for it.
		go s.quarantine.Close()
	}
}

// stop ends the forwarding of deliveries, leaving the channels to the connection's close.
func (s *subscription) stop() {
	if s == nil {
		return
	}
	select {
	case <-s.done:
	default:
		close(s.done)
	}
}

// link is what prepare needs of the broker connections.
type link struct {
	quarantine *amqp.Channel // publisher confirms on
	gate       *flowGate     // whether the broker blocks the quarantine's connection
	nonce      string        // the headerFilter's: see unreadableReason
	frameMax   int           // negotiated; 0: unlimited
}
