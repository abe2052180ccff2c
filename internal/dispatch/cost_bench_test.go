package dispatch

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/store"
	"github.com/mercamap/relay/internal/store/storetest"
	"github.com/mercamap/relay/internal/testpeer"
)

// What one delivery costs Redis and the relay, measured on a private redis-server with
// a backlog waiting and a sink that answers at once: Redis's own CPU (INFO cpu), the
// relay's round trips to it (a client hook: a pipeline counts once) and the test
// process's CPU (getrusage: the dispatcher, the client and the sink), each from the
// first write to the last, divided by the deliveries.
//
//	go test -run '^$' -bench DeliveryCost -benchtime 3x ./internal/dispatch/

// BenchmarkDeliveryCostOneDestination: one destination, 2,000 events in its log.
func BenchmarkDeliveryCostOneDestination(b *testing.B) {
	for b.Loop() {
		reportCost(b, measureDeliveries(b, 1, 1, 2000))
	}
}

// BenchmarkDeliveryCostThousandDestinations: 100 accounts × 10 destinations, 20 events
// in each account's log (20,000 deliveries).
func BenchmarkDeliveryCostThousandDestinations(b *testing.B) {
	for b.Loop() {
		reportCost(b, measureDeliveries(b, 100, 10, 20))
	}
}

// deliveryCost is what a run of deliveries cost, from the first write to the last.
type deliveryCost struct {
	deliveries int
	elapsed    time.Duration
	redisCPU   time.Duration // used_cpu_sys + used_cpu_user of the redis-server
	relayCPU   time.Duration // user + system time of this process
	roundTrips int64         // commands and pipelines the store sent
	scripts    time.Duration // Redis's time in scripts (INFO commandstats: evalsha, eval)
	calls      int64         // script calls
}

func reportCost(b *testing.B, c deliveryCost) {
	n := float64(c.deliveries)
	b.ReportMetric(n/c.elapsed.Seconds(), "deliveries/s")
	b.ReportMetric(float64(c.redisCPU.Microseconds())/n, "redis-cpu-µs/delivery")
	b.ReportMetric(float64(c.relayCPU.Microseconds())/n, "relay-cpu-µs/delivery")
	b.ReportMetric(float64(c.roundTrips)/n, "round-trips/delivery")
	b.ReportMetric(float64(c.scripts.Microseconds())/n, "redis-script-µs/delivery")
	b.ReportMetric(float64(c.calls)/n, "scripts/delivery")
}

// countingSink answers every write at once; at the first it takes the starting
// readings (start), at the last the closing ones.
type countingSink struct {
	want  int
	n     atomic.Int64
	start sync.Once
	begin func()
	done  chan struct{}
}

func (s *countingSink) Send(context.Context, destination.Destination, destination.Message) error {
	s.start.Do(s.begin)
	if s.n.Add(1) == int64(s.want) {
		close(s.done)
	}
	return nil
}

func measureDeliveries(b *testing.B, accounts, destsPerAccount, eventsPerAccount int) deliveryCost {
	url := testpeer.RedisURL(b)
	st, err := store.Open(url)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	opts, err := redis.ParseURL(url)
	if err != nil {
		b.Fatal(err)
	}
	probe := redis.NewClient(opts) // INFO cpu, outside the counted client
	defer probe.Close()
	ctx := context.Background()
	dests := benchDestinations(accounts, destsPerAccount)
	var cost deliveryCost
	var t0 time.Time
	var redis0, relay0 time.Duration
	var trips0 int64
	counter := &testpeer.RoundTrips{}
	sink := &countingSink{want: len(dests) * eventsPerAccount, done: make(chan struct{})}
	sink.begin = func() {
		probe.ConfigResetStat(ctx)
		t0, redis0, relay0, trips0 = time.Now(), redisCPU(b, probe), processCPU(), counter.N.Load()
	}
	cfg := delivery()
	cfg.LeaseTTL = 3 * time.Second
	d := New(Options{Store: st, Delivery: cfg, Sinks: map[destination.Connector]Sink{destination.Kinesis: sink}})
	if err := d.SetDestinations(ctx, dests); err != nil {
		b.Fatal(err)
	}
	// After SetDestinations: a new destination's cursor starts at its log's end.
	appendBenchEvents(b, ctx, st, accounts, eventsPerAccount)
	st.Client().AddHook(counter)
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { _ = d.Run(runCtx) }()
	select {
	case <-sink.done:
	case <-time.After(5 * time.Minute):
		b.Fatalf("only %d of %d deliveries", sink.n.Load(), sink.want)
	}
	// The last commit follows the last write: wait until every cursor is at its log's end
	// (read through a store of its own, not counted).
	waiter, err := store.Open(url)
	if err != nil {
		b.Fatal(err)
	}
	defer waiter.Close()
	waitCommitted(b, waiter, dests)
	cost.elapsed = time.Since(t0)
	cost.redisCPU = redisCPU(b, probe) - redis0
	cost.relayCPU = processCPU() - relay0
	cost.roundTrips = counter.N.Load() - trips0
	cost.deliveries = sink.want
	cost.scripts, cost.calls = scriptTime(b, probe)
	return cost
}

// scriptTime is Redis's time in scripts since the stats were reset, and their calls.
func scriptTime(b *testing.B, c *redis.Client) (time.Duration, int64) {
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	var usec, calls int64
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || (k != "cmdstat_evalsha" && k != "cmdstat_eval") {
			continue
		}
		for _, f := range strings.Split(v, ",") {
			name, val, _ := strings.Cut(f, "=")
			n, _ := strconv.ParseInt(val, 10, 64)
			switch name {
			case "usec":
				usec += n
			case "calls":
				calls += n
			}
		}
	}
	return time.Duration(usec) * time.Microsecond, calls
}

// waitCommitted waits until every destination's cursor is at its account log's end.
func waitCommitted(b *testing.B, st *store.Store, dests []destination.Destination) {
	ctx := context.Background()
	deadline := time.Now().Add(time.Minute)
	for _, dest := range dests {
		last, err := storetest.LastLogID(ctx, st.Client(), dest.Account)
		if err != nil {
			b.Fatal(err)
		}
		for {
			s, err := st.LoadState(ctx, ref(dest))
			if err == nil && s.Cursor == last {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("destination %s: cursor %s, want %s (%v)", dest.ID, s.Cursor, last, err)
			}
			time.Sleep(time.Millisecond) // polling for the condition, with a deadline
		}
	}
}

// redisCPU is the redis-server's CPU time so far (INFO cpu: system + user).
func redisCPU(b *testing.B, c *redis.Client) time.Duration {
	info, err := c.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			f, _ := strconv.ParseFloat(v, 64)
			total += f
		}
	}
	return time.Duration(total * float64(time.Second))
}

// processCPU is this process's CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
