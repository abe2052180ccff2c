package main

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/mercamap/relay/internal/jobevent"
	"github.com/mercamap/relay/internal/store/storetest"
)

// A timed repetition: a row's events published at its rate (publishAt) until the bus
// has them at every destination (timed) or, for the ingest row, the account's log holds
// them (timedIngest), with what each process spent meanwhile.

// timed is one repetition: evs published at the row's rate until every destination
// has them all, and what each process spent meanwhile.
func (e *benchEnv) timed(ctx context.Context, r benchRun, idx, relayPID int, pub *publisher, rdb redis.UniversalClient, evs []*event) (repResult, string) {
	var one repResult
	base := e.bus.count()
	s0, err := e.readSpans(ctx, rdb, relayPID)
	if err != nil {
		return one, "INFO cpu: " + err.Error()
	}
	assumed := e.stsCalls.Load()
	start := time.Now()
	publishAt(ctx, pub, evs, r.rate)
	want := r.dests * len(evs)
	const stall = time.Minute
	if !waitCount(ctx, e.bus, base, want, stall) {
		return one, fmt.Sprintf("%d of %d deliveries, then none for %s", e.bus.count()-base, want, stall)
	}
	s1, err := e.readSpans(ctx, rdb, relayPID)
	if err != nil {
		return one, "INFO cpu: " + err.Error()
	}
	s1.fill(s0, &one)
	one.assumeCalls = int(e.stsCalls.Load() - assumed)
	var last time.Time
	if one.lat, last, err = e.bus.latencies(evs, relayBusPrefix(idx)); err != nil {
		return one, err.Error()
	}
	one.perSec = float64(want) / last.Sub(start).Seconds()
	return one, ""
}

// timedIngest is one repetition of the ingest row: evs published as fast as confirms
// allow until the account's log holds them all, and what each process spent meanwhile.
// Nothing reads the log (no destination), so Redis's CPU is ingest's.
func (e *benchEnv) timedIngest(ctx context.Context, r benchRun, k, relayPID int, pub *publisher, rdb redis.UniversalClient, evs []*event) (repResult, string) {
	var one repResult
	mem0, err := usedMemory(ctx, rdb)
	if err != nil {
		return one, "INFO memory: " + err.Error()
	}
	s0, err := e.readSpans(ctx, rdb, relayPID)
	if err != nil {
		return one, "INFO cpu: " + err.Error()
	}
	start := time.Now()
	publishAt(ctx, pub, evs, r.rate)
	want := int64(1 + (k+1)*len(evs)) // the warm-up event, then every repetition's
	if !waitLogLen(ctx, rdb, want, time.Minute) {
		n, _ := rdb.XLen(ctx, benchLogKey).Result()
		return one, fmt.Sprintf("the account's log holds %d of %d events, then none more for a minute", n, want)
	}
	elapsed := time.Since(start)
	s1, err := e.readSpans(ctx, rdb, relayPID)
	if err != nil {
		return one, "INFO cpu: " + err.Error()
	}
	s1.fill(s0, &one)
	one.perSec = float64(len(evs)) / elapsed.Seconds()
	// Each event's log entry, dedup marker and index entry are one transaction: the
	// log's length says all three are in.
	mem1, err := usedMemory(ctx, rdb)
	if err != nil {
		return one, "INFO memory: " + err.Error()
	}
	one.memGrowth = mem1 - mem0
	// The markers' share: they are kept for the dedup window, the log for the replay window.
	if one.dedupSize, err = keysMemory(ctx, rdb, storetest.DedupKey("acct_bench")+"*"); err != nil {
		return one, "MEMORY USAGE: " + err.Error()
	}
	if one.logLen, err = rdb.XLen(ctx, benchLogKey).Result(); err != nil {
		return one, "XLEN: " + err.Error()
	}
	return one, ""
}

// waitLogLen waits until the bench account's log holds want entries, polling XLEN every
// 5 ms (a few µs of Redis each), and gives up when it grows by none for stall.
func waitLogLen(ctx context.Context, rdb redis.UniversalClient, want int64, stall time.Duration) bool {
	var seen int64
	deadline := time.Now().Add(stall)
	for {
		n, err := rdb.XLen(ctx, benchLogKey).Result()
		if err == nil && n >= want {
			return true
		}
		if n > seen {
			seen, deadline = n, time.Now().Add(stall)
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// publishAt publishes evs with confirms: at rate events/s, or as fast as confirms allow
// (256 at a time) when rate is 0.
func publishAt(ctx context.Context, pub *publisher, evs []*event, rate int) {
	if rate <= 0 {
		for i := 0; i < len(evs); i += 256 {
			pub.send(ctx, evs[i:min(i+256, len(evs))])
		}
		return
	}
	start := time.Now()
	sent := 0
	for sent < len(evs) && ctx.Err() == nil {
		due := min(int(time.Since(start).Seconds()*float64(rate))+1, len(evs))
		if due > sent {
			pub.send(ctx, evs[sent:due])
			sent = due
		}
		time.Sleep(time.Millisecond)
	}
}

// sizedEvent is a job.completed event whose body is padded to size bytes.
func sizedEvent(exchange string, key []byte, seq, size int) *event {
	now := time.Now()
	j := jobevent.Job{ID: uuid(), Status: "completed", StoreID: fmt.Sprintf("store-%d", seq%50)}
	j.Body, _ = jobevent.Pad(j.DefaultBody(now), size) // a default body always has metadata
	return &event{id: j.EventID(), key: j.RoutingKey(), msg: jobevent.Build(j, exchange, key, now)}
}

// waitCount waits until the bus has taken want entries more than base, and gives up
// when it takes none for stall: a slow machine slows a row, a stuck relay ends it.
func waitCount(ctx context.Context, bus *remoteBus, base, want int, stall time.Duration) bool {
	seen, deadline := bus.count(), time.Now().Add(stall)
	for seen-base < want {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		if n := bus.countAtLeast(base + want).N; n > seen { // answers within a second
			seen, deadline = n, time.Now().Add(stall)
		}
	}
	return true
}
