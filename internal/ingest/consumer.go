// Package ingest takes job events off RabbitMQ: it declares the relay's queue and the
// quarantine, verifies each message, appends the good ones to Redis and acks the broker
// only after Redis holds them. It must never ack a message Redis does not hold.
package ingest

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

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
