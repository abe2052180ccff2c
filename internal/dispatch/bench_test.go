package dispatch

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/store"
	"github.com/mercamap/relay/internal/testpeer"
)

// gapSink records, per destination, the time between the end of one Send and the start
// of the next: with a backlog waiting, that gap is the relay's own work per delivery
// (commit, read, build), whatever the bus's round trip is.
type gapSink struct {
	delay time.Duration
	mu    sync.Mutex
	first time.Time     // the first Send: the clock starts there, after leases are taken
	busy  time.Duration // total time inside the bus's round trips
	last  map[string]time.Time
	gaps  []time.Duration
	n     int
	done  chan struct{}
	want  int
}

func (s *gapSink) Send(_ context.Context, d destination.Destination, _ destination.Message) error {
	start := time.Now()
	s.mu.Lock()
	if s.first.IsZero() {
		s.first = start
	}
	if t, ok := s.last[d.ID]; ok {
		s.gaps = append(s.gaps, start.Sub(t))
	}
	s.mu.Unlock()
	if s.delay > 0 {
		time.Sleep(s.delay) // the bus's fixed round trip
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last[d.ID] = time.Now()
	s.busy += s.last[d.ID].Sub(start)
	s.n++
	if s.n == s.want {
		close(s.done)
	}
	return nil
}

func (s *gapSink) percentile(p float64) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := slices.Clone(s.gaps)
	slices.Sort(g)
	if len(g) == 0 {
		return 0
	}
	return g[int(float64(len(g)-1)*p)]
}

// runDeliveries puts events in the logs of accounts, each with destsPerAccount
// destinations, then runs one Dispatcher until the sink has taken every delivery.
func runDeliveries(b *testing.B, accounts, destsPerAccount, eventsPerAccount int, delay time.Duration) (time.Duration, *gapSink) {
	st := benchStore(b)
	defer st.Close()
	ctx := context.Background()
	dests := benchDestinations(accounts, destsPerAccount)
	sink := &gapSink{delay: delay, last: map[string]time.Time{}, done: make(chan struct{}), want: len(dests) * eventsPerAccount}
	cfg := delivery()
	cfg.LeaseTTL = 3 * time.Second
	d := New(Options{Store: st, Delivery: cfg, Sinks: map[destination.Connector]Sink{destination.Kinesis: sink}})
	if err := d.SetDestinations(ctx, dests); err != nil {
		b.Fatal(err)
	}
	appendBenchEvents(b, ctx, st, accounts, eventsPerAccount)
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { _ = d.Run(runCtx) }()
	select {
	case <-sink.done:
	case <-time.After(5 * time.Minute):
		b.Fatalf("only %d of %d deliveries", sink.n, sink.want)
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	return time.Since(sink.first), sink
}

// BenchmarkThousandDestinations: 1,000 destinations (100 accounts × 10), 20 events
// each, through a zero-latency sink. Aim: 10,000 deliveries/s on 2 cores.
func BenchmarkThousandDestinations(b *testing.B) {
	for b.Loop() {
		elapsed, sink := runDeliveries(b, 100, 10, 20, 0)
		b.ReportMetric(float64(sink.want)/elapsed.Seconds(), "deliveries/s")
		b.ReportMetric(float64(sink.percentile(0.5).Microseconds()), "p50-added-µs")
		b.ReportMetric(float64(sink.percentile(0.99).Microseconds()), "p99-added-µs")
	}
}

// BenchmarkOneDestinationTwentyMillis: one ordered destination behind a bus with a
// fixed 20 ms round trip. Ideal: 50 deliveries/s; aim: 95% of it.
func BenchmarkOneDestinationTwentyMillis(b *testing.B) {
	for b.Loop() {
		elapsed, sink := runDeliveries(b, 1, 1, 100, 20*time.Millisecond)
		rate := float64(sink.want) / elapsed.Seconds()
		b.ReportMetric(rate, "deliveries/s")
		b.ReportMetric(rate/50*100, "%-of-50/s")
		b.ReportMetric(sink.busy.Seconds()/elapsed.Seconds()*100, "%-of-bus-time")
		b.ReportMetric(float64(sink.percentile(0.5).Microseconds()), "p50-added-µs")
		b.ReportMetric(float64(sink.percentile(0.99).Microseconds()), "p99-added-µs")
	}
}

// benchStore opens a store on a Redis of the benchmark's own.
func benchStore(b *testing.B) *store.Store {
	st, err := store.Open(testpeer.RedisURL(b))
	if err != nil {
		b.Fatal(err)
	}
	return st
}

// benchDestinations is destsPerAccount Kinesis destinations in each of accounts accounts
// (acct_0, acct_1, …).
func benchDestinations(accounts, destsPerAccount int) []destination.Destination {
	var dests []destination.Destination
	for a := 0; a < accounts; a++ {
		for i := 0; i < destsPerAccount; i++ {
			dests = append(dests, destination.Destination{ID: fmt.Sprintf("d%d-%d", a, i), Account: fmt.Sprintf("acct_%d", a),
				Connector: destination.Kinesis})
		}
	}
	return dests
}

// appendBenchEvents appends eventsPerAccount events to each account's log, one batch per
// account.
func appendBenchEvents(b *testing.B, ctx context.Context, st *store.Store, accounts, eventsPerAccount int) {
	b.Helper()
	for a := 0; a < accounts; a++ {
		batch := make([]store.Append, eventsPerAccount)
		for i := range batch {
			batch[i] = store.Append{Accounts: []string{fmt.Sprintf("acct_%d", a)}, Entry: store.Entry{
				EventID: fmt.Sprintf("ev-%d-%d", a, i), Type: "job.completed", Time: time.Now().UTC().Format(time.RFC3339Nano),
				Data: []byte(`{"jobId":"j","metadata":{"store_id":"st_1"},"status":"completed"}`)}}
		}
		if _, err := st.AppendBatch(ctx, batch, time.Hour, time.Hour); err != nil {
			b.Fatal(err)
		}
	}
}
