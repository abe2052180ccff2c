// Package notify publishes operator events (destination.disabled) to the configured
// RabbitMQ exchange for the platform's mailer. The Redis script that disables a
// destination writes the event to its account's outbox in the same step; a Drainer on
// each replica publishes what the outboxes hold, with publisher confirms, and removes an
// entry only once the broker has confirmed it. It carries what the outbox holds and
// decides nothing about destinations.
package notify

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/mercamap/relay/internal/amqpnodes"
	"github.com/mercamap/relay/internal/store"
)

// Options configure a Drainer.
type Options struct {
	URLs     []string // the broker: one URL per node of the cluster, tried in turn
	Exchange string   // the operator-events exchange (topic, durable; declared on connect)
	Store    *store.Store
	Consumer string // this replica's name in the outboxes' consumer group; unique per process
	Logger   *slog.Logger
	Metrics  *Metrics // nil: not exported
	// Sweep is how often every outbox is looked at without a nudge (default 5 s): it
	// picks up events another replica wrote, or left behind when it died.
	Sweep time.Duration
	// Stale is how long an entry held by another drainer waits before this one takes it
	// over (default 1 min). It must exceed ConfirmTimeout: a live drainer never holds an
	// entry that long without looking at it again.
	Stale time.Duration
	// ConfirmTimeout bounds one publish and its confirm (default 10 s).
	ConfirmTimeout time.Duration
	// MaxBackoff caps the wait between tries while the broker is down (default 30 s).
	MaxBackoff time.Duration
}

// Drainer publishes the operator events of the configured accounts' outboxes.
type Drainer struct {
	opts  Options
	nudge chan struct{}

	mu       sync.Mutex
	accounts []string

	nodes *amqpnodes.Nodes // used by Run's goroutine only, as are conn and ch
	conn  *amqp.Connection
	ch    *amqp.Channel
}

// ErrNotConfirmed is returned when the broker refused (nacked) an operator event.
var ErrNotConfirmed = errors.New("operator event not confirmed by the broker")

// batch is how many entries one take claims from an outbox.
const batch = 32

// New returns a Drainer; call SetAccounts, then Run.
func New(opts Options) *Drainer {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Metrics == nil {
		opts.Metrics = NewMetrics(nil)
	}
	if opts.Sweep <= 0 {
		opts.Sweep = 5 * time.Second
	}
	if opts.ConfirmTimeout <= 0 {
		opts.ConfirmTimeout = 10 * time.Second
	}
	if opts.Stale <= 0 {
		opts.Stale = time.Minute
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = 30 * time.Second
	}
	return &Drainer{opts: opts, nudge: make(chan struct{}, 1), nodes: amqpnodes.New(opts.URLs)}
}

// SetAccounts replaces the accounts whose outboxes are drained (from the config; a
// reload may call it again).
func (d *Drainer) SetAccounts(ids []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.accounts = slices.Clone(ids)
}

func (d *Drainer) accountList() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.accounts
}

// Nudge asks for a pass now: an event was just written to an outbox. It never blocks.
func (d *Drainer) Nudge() {
	select {
	case d.nudge <- struct{}{}:
	default: // a pass is already asked for
	}
}

// Run drains until ctx is cancelled: a pass at each nudge and each sweep, and, while
// the broker or Redis fails, again after a backoff (200 ms doubling to MaxBackoff).
// An entry in hand when ctx is cancelled still finishes its publish (ConfirmTimeout).
func (d *Drainer) Run(ctx context.Context) error {
	defer d.leave()
	const minBackoff = 200 * time.Millisecond
	backoff := time.Duration(0)
	timer := time.NewTimer(0) // a first pass at once: what a previous run left behind
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-d.nudge:
			if backoff > 0 {
				continue // the broker is down: the backoff's timer runs the next pass
			}
		case <-timer.C:
		}
		err := d.pass(ctx)
		next := d.opts.Sweep
		switch {
		case err == nil:
			if backoff > 0 {
				d.opts.Logger.Info("operator events published again")
			}
			backoff = 0
		case ctx.Err() != nil:
			return nil
		default:
			if backoff == 0 {
				d.opts.Logger.Warn("operator events wait in the outbox; retrying", "error", err)
			}
			backoff = min(max(2*backoff, minBackoff), d.opts.MaxBackoff)
			next = backoff/2 + rand.N(backoff/2+1)
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(next)
	}
}

// pass publishes everything the outboxes hold that this drainer may take, and updates
// the pending gauge. It stops at the first failure, leaving the rest where it is.
func (d *Drainer) pass(ctx context.Context) error {
	accts := d.accountList()
	defer d.observePending(ctx, accts)
	for _, acct := range accts {
		for ctx.Err() == nil {
			entries, err := d.opts.Store.TakeOutbox(ctx, acct, d.opts.Consumer, d.opts.Stale, batch)
			if err != nil {
				return fmt.Errorf("read the outbox of %s: %w", acct, err)
			}
			for _, e := range entries {
				if err := d.publishOne(ctx, acct, e); err != nil {
					d.opts.Metrics.Failed.Inc()
					return err
				}
				d.opts.Metrics.Published.Inc()
			}
			if len(entries) < batch {
				break
			}
		}
	}
	return ctx.Err()
}

// publishOne publishes one entry, waits for the broker's confirm and removes it from the
// outbox. Neither step is cut short by shutdown: each is bounded by ConfirmTimeout.
func (d *Drainer) publishOne(ctx context.Context, acct string, e store.OutboxEntry) error {
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.opts.ConfirmTimeout)
	defer cancel()
	if err := d.publish(pctx, e); err != nil {
		d.reset()
		return err
	}
	// Confirmed. Should the removal fail, the entry is published again later: the
	// mailer drops the repeat by its message id.
	if err := d.opts.Store.AckOutbox(pctx, acct, e.StreamID); err != nil {
		return fmt.Errorf("remove a published operator event from the outbox of %s: %w", acct, err)
	}
	d.opts.Logger.Info("operator event published", "type", e.Type, "id", e.ID, "account", acct)
	return nil
}

func (d *Drainer) publish(ctx context.Context, e store.OutboxEntry) error {
	if d.ch == nil || d.ch.IsClosed() {
		if err := d.connect(); err != nil {
			return err
		}
	}
	dc, err := d.ch.PublishWithDeferredConfirmWithContext(ctx, d.opts.Exchange, e.Type, false, false, amqp.Publishing{
		ContentType: "application/json", DeliveryMode: amqp.Persistent, MessageId: e.ID,
		Timestamp: time.Now(), Type: e.Type, Body: e.Body,
	})
	if err != nil {
		return fmt.Errorf("publish operator event %s: %w", e.ID, err)
	}
	ok, err := dc.WaitContext(ctx)
	if err != nil {
		return fmt.Errorf("operator event %s: waiting for the broker's confirm: %w", e.ID, err)
	}
	if !ok {
		return fmt.Errorf("%w: %s", ErrNotConfirmed, e.ID)
	}
	return nil
}

func (d *Drainer) connect() error {
	d.reset()
	// A connection lost with its node makes the next publish connect here again, to the
	// next node first.
	var conn *amqp.Connection
	err := d.nodes.Connect(func(url string) error {
		var err error
		conn, err = amqp.DialConfig(url, amqp.Config{
			Heartbeat:  10 * time.Second,
			Dial:       amqp.DefaultDial(5 * time.Second),
			Properties: amqp.Table{"connection_name": "relay-operator-events"},
		})
		return err
	})
	if err != nil {
		return fmt.Errorf("connect to broker: %w", err) // dial errors name the host, never the password
	}
	ch, err := conn.Channel()
	if err == nil {
		err = ch.Confirm(false)
	}
	if err == nil {
		err = ch.ExchangeDeclare(d.opts.Exchange, amqp.ExchangeTopic, true, false, false, false, nil)
	}
	if err != nil {
		conn.Close()
		return fmt.Errorf("prepare operator-events exchange %q: %w", d.opts.Exchange, err)
	}
	d.conn, d.ch = conn, ch
	return nil
}

func (d *Drainer) reset() {
	if d.conn != nil {
		d.conn.Close()
	}
	d.conn, d.ch = nil, nil
}

// leave closes the connection and removes this drainer from the outboxes' groups where
// it holds nothing; what it still holds is taken over by another after Stale.
func (d *Drainer) leave() {
	d.reset()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, acct := range d.accountList() {
		if err := d.opts.Store.LeaveOutbox(ctx, acct, d.opts.Consumer); err != nil {
			d.opts.Logger.Warn("outbox consumer not removed", "account", acct, "error", err)
		}
	}
}

func (d *Drainer) observePending(ctx context.Context, accts []string) {
	lens, err := d.opts.Store.OutboxLens(context.WithoutCancel(ctx), accts)
	if err != nil {
		return // the gauge keeps its last value
	}
	var n int64
	for _, l := range lens {
		n += l
	}
	d.opts.Metrics.Pending.Set(float64(n))
}

// Metrics count operator events.
type Metrics struct {
	Pending   prometheus.Gauge   // entries in the outboxes, at the last pass
	Published prometheus.Counter // confirmed by the broker
	Failed    prometheus.Counter // publish attempts that failed (the entry stays)
}

// NewMetrics creates the metrics and registers them on reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Pending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "relay_operator_events_pending", Help: "Operator events waiting in the outboxes of the configured accounts, at the last pass.",
		}),
		Published: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "relay_operator_events_published_total", Help: "Operator events the broker confirmed.",
		}),
		Failed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "relay_operator_events_publish_failures_total", Help: "Operator event publishes that failed; the event stays in the outbox.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.Pending, m.Published, m.Failed)
	}
	return m
}
