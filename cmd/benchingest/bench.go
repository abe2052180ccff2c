package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"

	"github.com/mercamap/relay/internal/benchkit"
	"github.com/mercamap/relay/internal/ingest"
	"github.com/mercamap/relay/internal/jobevent"
	"github.com/mercamap/relay/internal/signature"
	"github.com/mercamap/relay/internal/store"
	"github.com/mercamap/relay/internal/store/storetest"
)

// tenant is the producer tenant of every event; the router sends it to the run's account.
const tenant = "single-tenant"

// phase is what one path (bare or relay) did in one run.
type phase struct {
	events  int
	elapsed time.Duration            // first publish to last ack (bare) or to the Nth stored event (relay)
	cpu     time.Duration            // this process, user+sys: publisher plus consumer
	peers   map[string]time.Duration // CPU of each -peer-pids process over the same span
	batch   float64                  // relay: mean events per Redis append round trip
}

func (p phase) rate() float64 { return float64(p.events) / p.elapsed.Seconds() }

// perEvent is a CPU time per event, in microseconds.
func (p phase) perEvent(d time.Duration) float64 {
	return float64(d.Microseconds()) / float64(p.events)
}

// cores is how many cores' worth of CPU d is over the phase.
func (p phase) cores(d time.Duration) float64 { return d.Seconds() / p.elapsed.Seconds() }

// result is one run: both paths, measured the same way, back to back.
type result struct{ bare, relay phase }

type bench struct {
	cfg    config
	st     *store.Store
	trips  *benchkit.RoundTrips // counts the store's round trips: ingest appends one batch a pipeline
	key    []byte               // external HMAC key the events are signed with and verified against
	stderr io.Writer
	stamp  string // names this invocation's queues, exchanges and accounts
}

func newBench(cfg config, stderr io.Writer) (*bench, error) {
	st, err := store.Open(cfg.redisURL)
	if err != nil {
		return nil, fmt.Errorf("-redis: %w", err)
	}
	key := make([]byte, 32)
	for i := range key {
		key[i] = byte(0xA0 + i)
	}
	trips := &benchkit.RoundTrips{}
	st.Client().AddHook(trips)
	return &bench{cfg: cfg, st: st, trips: trips, key: key, stderr: stderr, stamp: fmt.Sprintf("%x", time.Now().UnixNano())}, nil
}

func (b *bench) close() { b.st.Close() }

func (b *bench) logf(format string, args ...any) { fmt.Fprintf(b.stderr, format+"\n", args...) }

// measure runs the warm-up, then -runs rounds. Odd rounds run bare first, even rounds
// relay first, so neither path always gets the warmer broker.
func (b *bench) measure(ctx context.Context) ([]result, error) {
	if err := b.st.Client().Ping(ctx).Err(); err != nil {
		return nil, fmt.Errorf("redis: %w", err)
	}
	if b.cfg.warmup > 0 {
		b.logf("warm-up: %d events per path", b.cfg.warmup)
		if _, err := b.round(ctx, 0, b.cfg.warmup, false); err != nil {
			return nil, fmt.Errorf("warm-up: %w", err)
		}
	}
	var results []result
	for i := 1; i <= b.cfg.runs; i++ {
		r, err := b.round(ctx, i, b.cfg.events, i == 1 && b.cfg.cpuProfile != "")
		if err != nil {
			return nil, fmt.Errorf("run %d: %w", i, err)
		}
		b.logf("run %d: bare %.0f events/s, relay %.0f events/s, ratio %.2f", i, r.bare.rate(), r.relay.rate(), r.relay.rate()/r.bare.rate())
		results = append(results, r)
	}
	return results, nil
}

// round measures both paths once with n events each and cleans up after itself.
func (b *bench) round(ctx context.Context, i, n int, profile bool) (result, error) {
	name := fmt.Sprintf("bench.%s.%d", b.stamp, i)
	account := fmt.Sprintf("bench_%s_%d", b.stamp, i)
	relayExchange := name + ".relay"
	// Both paths publish the same pre-built messages; they are signed for the relay's
	// exchange (the signature covers it), which the bare consumer never checks.
	b.logf("run %d: signing %d events of %d bytes", i, n, b.cfg.size)
	msgs, err := buildMessages(n, b.cfg.size, relayExchange, b.key, fmt.Sprintf("%08x", uint32(time.Now().UnixNano())), i)
	if err != nil {
		return result{}, err
	}
	defer b.cleanup(name, account)
	var r result
	bare := func() (err error) { r.bare, err = b.bare(ctx, name+".bare", msgs); return err }
	relay := func() (err error) { r.relay, err = b.relay(ctx, relayExchange, account, msgs, profile); return err }
	order := []func() error{bare, relay}
	if i%2 == 0 {
		order = []func() error{relay, bare}
	}
	for _, f := range order {
		if err := f(); err != nil {
			return result{}, err
		}
	}
	return r, nil
}

// bare publishes msgs to a fresh exchange and quorum queue while a plain consumer
// (prefetch, ack each) drains it: the rate is n / (first publish to last ack). With
// -prefill the queue is filled first and the span runs from the consumer's connect.
func (b *bench) bare(ctx context.Context, name string, msgs []message) (phase, error) {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.timeout)
	defer cancel()
	if err := declare(b.cfg.amqpURL, name, name); err != nil {
		return phase{}, err
	}
	p, err := newPublisher(b.cfg.amqpURL)
	if err != nil {
		return phase{}, err
	}
	defer p.close()
	if b.cfg.prefill {
		t0 := time.Now()
		if err := p.send(ctx, name, msgs, b.cfg.window); err != nil {
			return phase{}, fmt.Errorf("bare prefill: %w", err)
		}
		b.logf("bare: prefilled %d events at %.0f/s (publish with confirms alone)", len(msgs), float64(len(msgs))/time.Since(t0).Seconds())
	}
	var c *bareConsumer
	connect := func() (err error) { c, err = newBareConsumer(b.cfg.amqpURL, name, b.cfg.prefetch); return err }
	if !b.cfg.prefill {
		if err := connect(); err != nil {
			return phase{}, err
		}
		defer c.close()
	}

	start := b.sample()
	published := make(chan error, 1)
	if b.cfg.prefill {
		if err := connect(); err != nil {
			return phase{}, err
		}
		defer c.close()
		published <- nil
	} else {
		go func() { published <- p.send(ctx, name, msgs, b.cfg.window) }()
	}
	end, err := c.consume(ctx, len(msgs))
	if err != nil {
		return phase{}, fmt.Errorf("bare consumer: %w", err)
	}
	stop := b.sample()
	if err := <-published; err != nil {
		return phase{}, fmt.Errorf("bare publish: %w", err)
	}
	return stop.since(start, end, len(msgs)), nil
}

// relay publishes msgs to a fresh exchange and queue while an in-process ingest.Consumer
// (real Redis, one account) consumes them: the rate is n / (first publish to the moment
// the account log holds n entries, as the consumer's Stored counter says). With -prefill
// the queue is filled first and the span runs from the consumer's start.
func (b *bench) relay(ctx context.Context, exchange, account string, msgs []message, profile bool) (phase, error) {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.timeout)
	defer cancel()
	queue := exchange
	topology := ingest.Topology{
		Exchange: exchange, Queue: queue, RoutingKeys: routingKeys,
		QuarantineExchange: queue + ".quarantine", QuarantineQueue: queue + ".quarantine",
	}
	// Declared up front by the consumer's own code, so no publish can go unrouted.
	if err := ingest.Declare(b.cfg.amqpURL, topology); err != nil {
		return phase{}, err
	}
	p, err := newPublisher(b.cfg.amqpURL)
	if err != nil {
		return phase{}, err
	}
	defer p.close()
	if b.cfg.prefill {
		t0 := time.Now()
		if err := p.send(ctx, exchange, msgs, b.cfg.window); err != nil {
			return phase{}, fmt.Errorf("relay prefill: %w", err)
		}
		b.logf("relay: prefilled %d events at %.0f/s (publish with confirms alone)", len(msgs), float64(len(msgs))/time.Since(t0).Seconds())
	}
	metrics := ingest.NewMetrics(nil)
	consumer := ingest.New(ingest.Options{
		URLs:         []string{b.cfg.amqpURL},
		Topology:     topology,
		Prefetch:     b.cfg.prefetch,
		Verifier:     signature.Verifier{Keys: [][]byte{b.key}, MaxAge: 72 * time.Hour, MaxFuture: 5 * time.Minute},
		Store:        b.st,
		Router:       oneTenant{tenant: tenant, account: account},
		DedupWindow:  168 * time.Hour,
		LogRetention: 168 * time.Hour,
		Logger:       slog.New(slog.NewTextHandler(b.stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Metrics:      metrics,
	})
	runCtx, stopConsumer := context.WithCancel(ctx)
	ran := make(chan error, 1)
	startConsumer := func() { go func() { ran <- consumer.Run(runCtx) }() }
	defer func() { stopConsumer(); <-ran }()
	if !b.cfg.prefill {
		startConsumer()
		if err := waitUntil(ctx, consumer.Connected); err != nil {
			return phase{}, fmt.Errorf("relay consumer never connected: %w", err)
		}
	}

	n := float64(len(msgs))
	if profile {
		f, err := os.Create(b.cfg.cpuProfile)
		if err != nil {
			return phase{}, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return phase{}, err
		}
		defer pprof.StopCPUProfile() // idempotent; the normal stop is right after the span
	}
	b.trips.N.Store(0)
	b.trips.Cmds.Store(0)
	start := b.sample()
	published := make(chan error, 1)
	if b.cfg.prefill {
		startConsumer()
		published <- nil
	} else {
		go func() { published <- p.send(ctx, exchange, msgs, b.cfg.window) }()
	}
	if err := waitUntil(ctx, func() bool { return testutil.ToFloat64(metrics.Stored) >= n }); err != nil {
		return phase{}, fmt.Errorf("relay stored %.0f of %.0f events (duplicates %.0f, quarantined %.0f, unrouted %.0f): %w",
			testutil.ToFloat64(metrics.Stored), n, testutil.ToFloat64(metrics.Duplicates),
			quarantined(metrics), testutil.ToFloat64(metrics.Unrouted), err)
	}
	end := time.Now()
	stop := b.sample()
	trips, cmds := b.trips.N.Load(), b.trips.Cmds.Load()
	if profile {
		pprof.StopCPUProfile()
		b.logf("run 1: CPU profile of the relay phase in %s", b.cfg.cpuProfile)
	}
	if err := <-published; err != nil {
		return phase{}, fmt.Errorf("relay publish: %w", err)
	}
	// Not timed: every message acked, every event in the log exactly once.
	if err := waitUntil(ctx, func() bool { return testutil.ToFloat64(metrics.Acked) >= n }); err != nil {
		return phase{}, fmt.Errorf("relay acked %.0f of %.0f: %w", testutil.ToFloat64(metrics.Acked), n, err)
	}
	logLen, err := b.st.Client().XLen(ctx, storetest.LogKey(account)).Result()
	if err != nil {
		return phase{}, fmt.Errorf("XLEN: %w", err)
	}
	if dups, q := testutil.ToFloat64(metrics.Duplicates), quarantined(metrics); logLen != int64(len(msgs)) || dups != 0 || q != 0 {
		return phase{}, fmt.Errorf("account log holds %d events, want %d (duplicates %.0f, quarantined %.0f)", logLen, len(msgs), dups, q)
	}
	ph := stop.since(start, end, len(msgs))
	ph.batch = float64(cmds) / float64(max(trips, 1))
	return ph, nil
}

// quarantined is what ingest acked without storing, counting as duplicate or unrouted.
func quarantined(m *ingest.Metrics) float64 {
	return testutil.ToFloat64(m.Acked) - testutil.ToFloat64(m.Stored) -
		testutil.ToFloat64(m.Duplicates) - testutil.ToFloat64(m.Unrouted)
}

// cleanup deletes the run's queues, exchanges and Redis keys.
func (b *bench) cleanup(name, account string) {
	conn, err := amqp.Dial(b.cfg.amqpURL)
	if err == nil {
		if ch, err := conn.Channel(); err == nil {
			relay := name + ".relay"
			for _, q := range []string{name + ".bare", relay, relay + ".quarantine"} {
				_, _ = ch.QueueDelete(q, false, false, false)
			}
			for _, x := range []string{name + ".bare", relay, relay + ".quarantine"} {
				_ = ch.ExchangeDelete(x, false, false)
			}
		}
		conn.Close()
	} else {
		b.logf("cleanup: broker: %v", err)
	}
	ctx := context.Background()
	rdb := b.st.Client()
	if c, ok := rdb.(*redis.ClusterClient); ok && b.cfg.flushDB { // every master's keys, not one node's
		if err := c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return m.FlushDB(ctx).Err() }); err != nil {
			b.logf("cleanup: FLUSHDB: %v", err)
		}
		return
	}
	if b.cfg.flushDB {
		if err := rdb.FlushDB(ctx).Err(); err != nil {
			b.logf("cleanup: FLUSHDB: %v", err)
		}
		return
	}
	iter := rdb.Scan(ctx, 0, storetest.AccountPattern(account), 1000).Iterator()
	var keys []string
	flush := func() {
		if len(keys) > 0 {
			if err := rdb.Unlink(ctx, keys...).Err(); err != nil {
				b.logf("cleanup: UNLINK: %v", err)
			}
			keys = keys[:0]
		}
	}
	for iter.Next(ctx) {
		if keys = append(keys, iter.Val()); len(keys) == 1000 {
			flush()
		}
	}
	flush()
	if err := iter.Err(); err != nil {
		b.logf("cleanup: SCAN: %v", err)
	}
}

// oneTenant routes the events of one tenant to one account.
type oneTenant struct{ tenant, account string }

func (o oneTenant) AccountsFor(tenant, _ string) []string {
	if tenant == o.tenant {
		return []string{o.account}
	}
	return nil
}

var routingKeys = []string{"job.completed", "job.failed"}

// message is one pre-built, pre-signed publish.
type message struct {
	routingKey string
	pub        amqp.Publishing
}

// buildMessages signs n events as the Fetcher Worker would, each for its own job, with
// the body's metadata padded so the body is size bytes. One in ten is a job.failed.
func buildMessages(n, size int, exchange string, key []byte, prefix string, run int) ([]message, error) {
	now := time.Now()
	msgs := make([]message, n)
	for i := range msgs {
		j := jobevent.Job{
			ID:     fmt.Sprintf("%s-%04x-7000-8000-%012x", prefix, run&0xffff, i),
			Status: "completed",
			Tenant: tenant,
		}
		if i%10 == 9 {
			j.Status = "failed"
		}
		body, err := jobevent.Pad(j.DefaultBody(now), size)
		if err != nil {
			return nil, err
		}
		j.Body = body
		msgs[i] = message{j.RoutingKey(), jobevent.Build(j, exchange, key, now)}
	}
	return msgs, nil
}

// sample is the CPU used so far by this process and by each peer, at one instant.
type sample struct {
	at    time.Time
	cpu   time.Duration
	peers map[string]time.Duration
}

func (b *bench) sample() sample {
	s := sample{at: time.Now(), peers: map[string]time.Duration{}}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err == nil {
		s.cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	for _, p := range b.cfg.peerPIDs {
		if d, err := benchkit.ProcCPU(p.pid); err == nil {
			s.peers[p.name] = d
		}
	}
	return s
}

// since is the phase between start and s, timed from start to end (the event that
// ends the span, which the caller saw just before taking s).
func (s sample) since(start sample, end time.Time, events int) phase {
	p := phase{events: events, elapsed: end.Sub(start.at), cpu: s.cpu - start.cpu, peers: map[string]time.Duration{}}
	for name, d := range s.peers {
		if d0, ok := start.peers[name]; ok {
			p.peers[name] = d - d0
		}
	}
	return p
}

// waitUntil polls cond every millisecond until it holds or ctx ends.
func waitUntil(ctx context.Context, cond func() bool) error {
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}
