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
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/mercamap/relay/internal/amqpnodes"
	"github.com/mercamap/relay/internal/signature"
	"github.com/mercamap/relay/internal/store"
)

// Router says which accounts an event belongs to.
type Router interface {
	AccountsFor(tenant, source string) []string
}

// LocalFeed takes the runs of entries an append added to the account logs.
type LocalFeed interface {
	Appended([]store.Run)
}

// Options configure a Consumer.
type Options struct {
	URLs         []string // amqp:// URLs, one per node of the cluster (hold a password: never logged)
	Topology     Topology
	Prefetch     int
	Verifier     signature.Verifier
	Store        *store.Store
	Router       Router        // the routing at start; SetRouter replaces it
	DedupWindow  time.Duration // lifetime of a ce-id dedup marker
	LogRetention time.Duration // account logs are trimmed of entries older than this
	Logger       *slog.Logger
	Metrics      *Metrics
	// Tracer, when set, traces each stored event (trace.go); nil: tracing is off.
	Tracer Tracer
	// Rebalance is how often a replica with partitions compares the partitions it
	// consumes with its share (default 10 s); see rebalance.
	Rebalance time.Duration
	// Local, when set, is handed what each append added to the account logs, as it is
	// stored: this process's workers of those accounts deliver it without waiting to
	// read it back from Redis (dispatch.Dispatcher.Appended).
	Local LocalFeed
	// AfterAppend, when set, runs after a batch is in Redis and before it is acked.
	// Failure drills use it to stop the process in exactly that gap.
	AfterAppend func()
}

// Consumer is the ingest loop. Run it once; it reconnects by itself.
type Consumer struct {
	opts      Options
	connected atomic.Bool
	nodes     *amqpnodes.Nodes // used by Run's goroutine only

	// routing is held shared by each batch, from routing (prepare) to ack (settle), so a
	// batch is routed by one table and SetRouter swaps between batches. Each partition's
	// goroutine takes it once a batch (two batches in hand overlap); a reload waits for
	// the batches in hand.
	routing sync.RWMutex
	router  Router

	conn      atomic.Pointer[amqp.Connection] // the live connection, for lag.go's queue reads
	heldSince atomic.Int64                    // unix ns the batch in hand was formed; 0: none
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
	if opts.Rebalance <= 0 {
		opts.Rebalance = 10 * time.Second
	}
	return &Consumer{opts: opts, router: opts.Router, nodes: amqpnodes.New(opts.URLs)}
}

// SetRouter routes every event from the next batch on by r. It returns once the batches
// in hand (routed by the old table) are acked: from then on no event is acked as unrouted
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
// with other arguments, and a *PluginError when partitions need a plugin the broker has
// not enabled: those are fixed by an operator, never by reconnecting. Each reconnection
// tries the next node of Options.URLs first.
func (c *Consumer) Run(ctx context.Context) error {
	const minWait, maxWait = 100 * time.Millisecond, 15 * time.Second
	wait := minWait
	for {
		started := time.Now()
		err := c.session(ctx)
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

// session runs one broker connection until it fails or ctx is cancelled: one consumer
// (with its own channels) for each queue of the topology, the count of what a bounded
// quarantine drops and, with partitions, the rebalancing loop.
func (c *Consumer) session(ctx context.Context) error {
	// Through a headerFilter: headers amqp091-go cannot read would otherwise close the
	// connection at every delivery of the same message.
	var conn *amqp.Connection
	var nonce, at string
	err := c.nodes.Connect(func(url string) error {
		var err error
		conn, nonce, err = dialFiltered(url, amqp.Config{
			Heartbeat:  10 * time.Second,
			Properties: amqp.Table{"connection_name": "relay-ingest"},
		})
		at = url
		return err
	})
	if err != nil {
		return fmt.Errorf("connect to broker: %w", err) // dial errors name the host, never the password
	}
	defer conn.Close()
	pub, gate, err := openPublisher(at, c.opts.Logger) // publisher.go: why apart
	if err != nil {
		return fmt.Errorf("connect to broker for the quarantine: %w", err)
	}
	// A blocked connection's close is never answered (the broker does not read it).
	defer func() { _ = pub.CloseDeadline(time.Now().Add(pubCloseWait)) }()
	pubClosed := pub.NotifyClose(make(chan *amqp.Error, 1))
	ch, err := conn.Channel()
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
	subs := make([]*subscription, len(queues))
	defer func() {
		for _, s := range subs {
			s.stop() // the connection's close (deferred above) closes the channels
		}
	}()
	for i, q := range queues {
		parts[i] = &partition{queue: q, yieldNow: make(chan struct{}, 1)}
		if subs[i], err = c.subscribe(conn, pub, gate, nonce, q); err != nil {
			return err
		}
	}
	c.connected.Store(true)
	c.conn.Store(conn)
	defer c.conn.Store(nil)
	defer c.heldSince.Store(0) // unacked messages go back to the queue with the connection
	c.opts.Logger.Info("consuming", "queues", queues, "prefetch", c.opts.Prefetch)

	var drops func() error // counts what the full quarantine drops; nil: unbounded
	if c.opts.Topology.Quarantine.bounded() {
		if drops, err = c.countDrops(sctx, conn); err != nil {
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
	for i, p := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- c.consume(sctx, conn, pub, gate, nonce, p, &subs[i])
		}()
	}
	if len(parts) > 1 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- c.rebalance(sctx, conn, parts)
		}()
	}
	// The first to end (an error, or nil on shutdown) ends the session; each consumer
	// finishes the batch in hand before it returns.
	err = <-errs
	cancel()
	wg.Wait()
	return err
}

// partition is one queue this session consumes, and what rebalance knows of it.
type partition struct {
	queue string
	last  atomic.Int64 // UnixNano of the last batch taken from it; 0 since (re)subscribing
	yield atomic.Bool  // rebalance asks to hand it to another replica
	// yieldNow wakes a batches loop waiting for deliveries when rebalance sets yield: a
	// partition that went quiet right after it was counted hands over all the same.
	yieldNow chan struct{}
}

// subscription is one consumer on one queue: its channel (prefetch set), a quarantine
// channel with publisher confirms (on the quarantine connection), and its deliveries.
type subscription struct {
	ch, quarantine *amqp.Channel
	link           link
	deliveries     <-chan amqp.Delivery
	done           chan struct{} // closed by stop
}

// subscribe opens a subscription to queue on conn, its quarantine channel on pub.
func (c *Consumer) subscribe(conn, pub *amqp.Connection, gate *flowGate, nonce, queue string) (*subscription, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("open channel: %w", err)
	}
	s := &subscription{ch: ch, done: make(chan struct{})}
	if err := ch.Qos(c.opts.Prefetch, 0, false); err != nil {
		s.close()
		return nil, fmt.Errorf("set prefetch: %w", err)
	}
	if s.quarantine, err = pub.Channel(); err != nil {
		s.close()
		return nil, fmt.Errorf("open quarantine channel: %w", err)
	}
	if err := s.quarantine.Confirm(false); err != nil {
		s.close()
		return nil, fmt.Errorf("enable publisher confirms: %w", err)
	}
	s.link = link{quarantine: s.quarantine, gate: gate, nonce: nonce, frameMax: min(conn.Config.FrameSize, pub.Config.FrameSize)}
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

// errYield ends a subscription that rebalance hands to another replica.
var errYield = errors.New("partition handed to another replica")

// consume takes batches from *sub until ctx is cancelled or the connection fails. When
// rebalance asks, it settles the batch in hand, closes the subscription and subscribes
// again: it then waits behind the other replicas' consumers.
func (c *Consumer) consume(ctx context.Context, conn, pub *amqp.Connection, gate *flowGate, nonce string, p *partition, sub **subscription) error {
	for {
		err := c.batches(ctx, p, *sub)
		if !errors.Is(err, errYield) {
			return err
		}
		(*sub).close()
		p.last.Store(0)
		p.yield.Store(false)
		select { // a wake-up left from the handover just made
		case <-p.yieldNow:
		default:
		}
		c.opts.Metrics.PartitionHandovers.Inc()
		c.opts.Logger.Info("partition handed over to another replica", "queue", p.queue)
		s, err := c.subscribe(conn, pub, gate, nonce, p.queue)
		if err != nil {
			return err
		}
		*sub = s
	}
}

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

// rebalance spreads the partitions over the replicas. Every replica consumes every
// partition, and the broker delivers each to one of them at a time (single active
// consumer): the first to subscribe, so one replica would hold them all. Each round it
// counts the replicas (the consumers of ReplicasQueue, one per replica) and, when this
// one took batches from more partitions than its share (partitions ÷ replicas, rounded
// up), hands the excess over: after the batch in hand, it closes that subscription and
// subscribes again, behind the others, and the broker gives the partition to the next
// replica, starting with the messages left unacked.
func (c *Consumer) rebalance(ctx context.Context, conn *amqp.Connection, parts []*partition) error {
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("open replicas channel: %w", err)
	}
	name := c.opts.Topology.ReplicasQueue() // the channel closes with the connection
	// Registered after every partition's consumer, so a replica counted here is waiting
	// on each partition and can take one over.
	presence, err := ch.Consume(name, "", true, false, false, false, nil) // not WithContext: see subscribe
	if err != nil {
		return fmt.Errorf("consume %q: %w", name, err)
	}
	go func() {
		for range presence { // nothing is published to it; drop whatever is
		}
	}()
	every := c.opts.Rebalance
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		q, err := ch.QueueDeclarePassive(name, true, false, false, false, nil)
		if err != nil {
			return fmt.Errorf("count the replicas on %q: %w", name, err)
		}
		replicas := max(q.Consumers, 1)
		share := (len(parts) + replicas - 1) / replicas
		since := time.Now().Add(-every).UnixNano()
		active := 0
		for _, p := range parts {
			busy := p.last.Load() > since && !p.yield.Load()
			if busy {
				active++
			}
			if busy && active > share {
				p.yield.Store(true)
				select {
				case p.yieldNow <- struct{}{}:
				default:
				}
			}
		}
		c.opts.Metrics.PartitionsActive.Set(float64(min(active, share)))
	}
}

// link is what prepare needs of the broker connections.
type link struct {
	quarantine *amqp.Channel // publisher confirms on
	gate       *flowGate     // whether the broker blocks the quarantine's connection
	nonce      string        // the headerFilter's: see unreadableReason
	frameMax   int           // negotiated; 0: unlimited
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
			msg, fits := c.quarantineCopy(l, d, rej)
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

// blockedWhy is the log's word for a message dead-lettered while the broker blocks the
// quarantine connection.
const blockedWhy = "the broker blocks publishing (a resource alarm): the original goes to the quarantine whole"

// deadLetter rejects d without requeue: the broker moves it, unchanged but for its
// x-death header, to the quarantine exchange (the queue's dead-letter exchange).
func (c *Consumer) deadLetter(d amqp.Delivery, reason, why string) error {
	if err := d.Nack(false, false); err != nil {
		return fmt.Errorf("reject to the dead-letter exchange: %w", err)
	}
	c.opts.Metrics.DeadLettered.WithLabelValues(reason).Inc()
	c.opts.Logger.Warn("message dead-lettered to the quarantine", "reason", reason, "why", why,
		"routing_key", d.RoutingKey, "message_id", d.MessageId)
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

// quarantined is a message that failed verification, at index i of its batch, and its
// quarantine copy.
type quarantined struct {
	i      int
	reason string
	msg    amqp.Publishing
}

// quarantineCopy is the copy of d to republish to the quarantine exchange: every
// property kept, with why. fits is false when the copy would not fit in one frame (the
// broker would close the connection).
func (c *Consumer) quarantineCopy(l link, d amqp.Delivery, rej *rejection) (msg amqp.Publishing, fits bool) {
	msg = quarantineCopy(d, rej, c.opts.Topology.Quarantine.MaxBodyBytes)
	if size := headerFrameSize(msg); size < 0 || (l.frameMax > 0 && size > l.frameMax) {
		return msg, false
	}
	c.opts.Logger.Warn("message quarantined", "reason", rej.reason, "detail", boundDetail(rej.detail), "routing_key", d.RoutingKey, "message_id", d.MessageId)
	return msg, true
}

// publishCopies publishes the copies on the quarantine channel and returns each one's
// confirmation, nil for one not written. The writes run apart from the batch: once the
// broker blocks the connection a write waits in the socket for as long as the alarm
// lasts, and the batch then goes on without them (see publisher.go).
func (c *Consumer) publishCopies(l link, batch []amqp.Delivery, copies []quarantined) ([]*amqp.DeferredConfirmation, error) {
	if len(copies) == 0 {
		return nil, nil
	}
	var mu sync.Mutex
	dcs := make([]*amqp.DeferredConfirmation, len(copies))
	var failed error
	written := make(chan struct{})
	go func() {
		defer close(written)
		for k, p := range copies {
			dc, err := l.quarantine.PublishWithDeferredConfirm(c.opts.Topology.QuarantineExchange, batch[p.i].RoutingKey, false, false, p.msg)
			mu.Lock()
			dcs[k], failed = dc, err
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	select {
	case <-written:
	case <-l.gate.whenBlocked():
	}
	mu.Lock()
	defer mu.Unlock()
	if failed != nil {
		return nil, fmt.Errorf("quarantine publish: %w", failed)
	}
	return slices.Clone(dcs), nil
}

// confirmedOrBlocked waits for dc's confirmation (ack or nack) and reports true once it
// came, or false when the broker blocks the quarantine connection first (or dc was
// never written). A confirmation already in hand wins over a block.
func confirmedOrBlocked(dc *amqp.DeferredConfirmation, gate *flowGate) bool {
	if dc == nil {
		return false
	}
	select {
	case <-dc.Done():
		return true
	default:
	}
	select {
	case <-dc.Done():
		return true
	case <-gate.whenBlocked():
		return false
	}
}

// maxDetail bounds x-relay-detail: the detail can quote what the publisher sent.
const maxDetail = 256

// quarantineCopy is d as it was published, with x-relay-* headers saying why. Two
// properties become headers: user_id (the broker refuses a publish whose user_id is not
// the publishing connection's user) and expiration (the copy must not expire). A body
// longer than maxBody (0: no limit) is cut to that prefix (cutBody).
func quarantineCopy(d amqp.Delivery, rej *rejection, maxBody int) amqp.Publishing {
	headers := make(amqp.Table, len(d.Headers)+9)
	for k, v := range d.Headers {
		headers[k] = v
	}
	headers["x-relay-reason"] = rej.reason
	headers["x-relay-detail"] = boundDetail(rej.detail)
	headers["x-relay-exchange"] = d.Exchange
	headers["x-relay-routing-key"] = d.RoutingKey
	if d.UserId != "" {
		headers["x-relay-user-id"] = d.UserId
	}
	if d.Expiration != "" {
		headers["x-relay-expiration"] = d.Expiration
	}
	return amqp.Publishing{
		Headers:         headers,
		ContentType:     d.ContentType,
		ContentEncoding: d.ContentEncoding,
		DeliveryMode:    d.DeliveryMode,
		Priority:        d.Priority,
		CorrelationId:   d.CorrelationId,
		ReplyTo:         d.ReplyTo,
		MessageId:       d.MessageId,
		Timestamp:       d.Timestamp,
		Type:            d.Type,
		AppId:           d.AppId,
		Body:            cutBody(d.Body, maxBody, headers),
	}
}

// boundDetail returns s as valid UTF-8 of at most maxDetail bytes, marked when cut.
func boundDetail(s string) string {
	const cut = "… (truncated)"
	if len(s) <= maxDetail && utf8.ValidString(s) {
		return s
	}
	long := len(s) > maxDetail
	if long {
		s = s[:maxDetail-len(cut)]
	}
	s = strings.ToValidUTF8(s, "?") // a rune split by the cut, too
	if long {
		s += cut
	}
	return s
}

// headerFrameSize is the size of the content header frame amqp091-go sends for p
// (frame header and end included), or -1 if amqp091-go could not encode it.
func headerFrameSize(p amqp.Publishing) int {
	n := 8 + 14 // frame header and end; class, weight, body size, property flags
	for _, s := range []string{p.ContentType, p.ContentEncoding, p.CorrelationId, p.ReplyTo, p.Expiration, p.MessageId, p.Type, p.UserId, p.AppId} {
		if len(s) > 255 {
			return -1
		}
		if s != "" {
			n += 1 + len(s)
		}
	}
	if p.DeliveryMode > 0 {
		n++
	}
	if p.Priority > 0 {
		n++
	}
	if !p.Timestamp.IsZero() {
		n += 8
	}
	if len(p.Headers) > 0 {
		t := tableSize(p.Headers)
		if t < 0 {
			return -1
		}
		n += 4 + t
	}
	return n
}

// tableSize is the encoded size of a field table's entries, as amqp091-go writes them.
func tableSize(t amqp.Table) int {
	n := 0
	for k, v := range t {
		f := fieldSize(v)
		if f < 0 || len(k) > 255 {
			return -1
		}
		n += 1 + len(k) + f
	}
	return n
}

// fieldSize is the encoded size of one field value, type octet included (amqp091-go
// write.go writeField), or -1 for a type it cannot write.
func fieldSize(v any) int {
	switch v := v.(type) {
	case nil:
		return 1
	case bool, byte, int8:
		return 2
	case int16, uint16:
		return 3
	case int, int32, uint32, float32:
		return 5
	case amqp.Decimal:
		return 6
	case int64, float64, time.Time:
		return 9
	case string:
		return 5 + len(v)
	case []byte:
		return 5 + len(v)
	case amqp.Table:
		t := tableSize(v)
		if t < 0 {
			return -1
		}
		return 5 + t
	case []any:
		n := 5
		for _, e := range v {
			f := fieldSize(e)
			if f < 0 {
				return -1
			}
			n += f
		}
		return n
	}
	return -1
}
