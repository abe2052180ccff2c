package dispatch

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/store"
)

// What a delivery costs the relay when each of many destinations gets about one event
// per pass (issue 54: the 1,000-destination row of make bench, where every pass of a
// destination used to make a window and a goroutine per write for one event): 100
// accounts × 10 destinations, and each round appends one event to every account, as
// ingest does (its runs handed to the feeds), then waits until the sink took all
// 1,000 deliveries. Nothing is behind, so each pass has one event to write.
//
// An op is one delivered event: ns/op is the wall time a round took over its
// deliveries, cpu-ns/op this process's CPU (getrusage: dispatcher, store client, sink,
// and the appends, which are the same in every run) over them, allocs/op and B/op the
// heap allocations over them. Redis's own CPU is not in it.
//
// The sink answers at once ("at-once"), or after going 32 KB deep in its stack as a
// bus's SDK does ("deep-stack": a goroutine started for the write grows its stack for
// it, the pass's own goroutine has grown it already).
//
//	go test -run '^$' -bench OneEventPerPass -benchtime 30x -count 5 -cpu 2 ./internal/dispatch/
func BenchmarkOneEventPerPassThousandDestinations(b *testing.B) {
	b.Run("at-once", func(b *testing.B) { oneEventPerPass(b, 0) })
	b.Run("deep-stack", func(b *testing.B) { oneEventPerPass(b, 32) })
}

// oneEventPerPass runs the benchmark above with a sink that goes depth KB deep.
func oneEventPerPass(b *testing.B, depth int) {
	const accounts, destsPerAccount = 100, 10
	st := benchStore(b)
	defer st.Close()
	ctx := context.Background()
	dests := benchDestinations(accounts, destsPerAccount)
	sink := &roundSink{depth: depth, done: make(chan struct{}, 1)}
	cfg := delivery()
	cfg.LeaseTTL = 3 * time.Second
	cfg.CommitWait, cfg.UncommittedMax, cfg.InFlight = 5*time.Millisecond, 32, destination.DefaultInFlight // the defaults
	d := New(Options{Store: st, Delivery: cfg, Sinks: map[destination.Connector]Sink{destination.Kinesis: sink}})
	if err := d.SetDestinations(ctx, dests); err != nil {
		b.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	ran := make(chan struct{})
	go func() { defer close(ran); _ = d.Run(runCtx) }()
	defer func() { cancel(); <-ran }() // before the next run's figures start

	round := 0
	deliver := func() {
		round++
		batch := make([]store.Append, accounts)
		for a := range batch {
			batch[a] = store.Append{Accounts: []string{fmt.Sprintf("acct_%d", a)}, Entry: store.Entry{
				EventID: fmt.Sprintf("ev-%d-%d", a, round), Type: "job.completed", Time: time.Now().UTC().Format(time.RFC3339Nano),
				Data: []byte(`{"jobId":"j","metadata":{"store_id":"st_1"},"status":"completed"}`)}}
		}
		sink.want.Add(int64(len(dests)))
		_, runs, err := st.AppendBatchRuns(ctx, batch, time.Hour, time.Hour)
		if err != nil {
			b.Fatal(err)
		}
		d.Appended(runs)
		select {
		case <-sink.done:
		case <-time.After(time.Minute):
			b.Fatalf("round %d: %d of %d deliveries", round, sink.n.Load(), sink.want.Load())
		}
	}
	// Two rounds first: the leases taken, the logs followed, every state read.
	deliver()
	deliver()

	b.ReportAllocs() // shown as allocs/op and B/op: the figures reported below, per delivery
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	cpu0 := processCPU()
	rounds := 0
	for b.Loop() {
		deliver()
		rounds++
	}
	cpu := processCPU() - cpu0
	runtime.ReadMemStats(&m1)
	n := float64(rounds * len(dests))
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/n, "ns/op")
	b.ReportMetric(float64(cpu.Nanoseconds())/n, "cpu-ns/op")
	b.ReportMetric(float64(m1.Mallocs-m0.Mallocs)/n, "allocs/op")
	b.ReportMetric(float64(m1.TotalAlloc-m0.TotalAlloc)/n, "B/op")
}

// roundSink takes every write (depth KB deep in its stack first) and says when it has
// taken all it was told to expect so far (want).
type roundSink struct {
	depth   int
	want, n atomic.Int64
	done    chan struct{}
}

func (s *roundSink) Send(context.Context, destination.Destination, destination.Message) error {
	if s.depth > 0 {
		deep(s.depth)
	}
	if s.n.Add(1) == s.want.Load() {
		s.done <- struct{}{}
	}
	return nil
}

// deep goes n frames of a kilobyte each down the stack.
//
//go:noinline
func deep(n int) byte {
	var frame [1024]byte
	frame[n%len(frame)] = byte(n)
	if n <= 1 {
		return frame[0]
	}
	return deep(n-1) + frame[(7*n)%len(frame)]
}
