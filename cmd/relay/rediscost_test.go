package main

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/mercamap/relay/internal/benchkit"
)

// What a delivered event and a create through the API may cost Redis in its own count
// (MONITOR), in commands clients send and in all (scripts' own commands too). Issue 54
// aims at 3 and 15 an event, 10 and 30 a create: an event's commands sent are held to
// its aim (2.0 measured, 9.2 before the issue); the others, not met
// (docs/benchmarks.md, "Issue 54"), to a little over what they cost after it: 20.7 an
// event in all (34.2 before), 15.3 and 83.5 a create (21.3 and 85.6 before).
const (
	eventSentMost     = 3.0
	eventAllMost      = 22.0
	createSentMost    = 17.0
	createAllMost     = 90.0
	costEvents        = 1000
	costCreates       = 40
	costEventInterval = 10 * time.Millisecond // 100 events/s
)

// TestWhatAnEventAndACreateCostRedisInItsOwnCount: one replica, one EventBridge
// destination. Redis's MONITOR counts what 1,000 events at 100/s cost from publish to
// commit, then what 40 creates through the API cost, each less what the same time idle
// costs (lease renewals, heartbeats, the follower's timeouts), held to the bounds above.
func TestWhatAnEventAndACreateCostRedisInItsOwnCount(t *testing.T) {
	rs := startReplicasWith(t, 1, replicaOptions{setupCheck: "{initial: 1m, max: 15m}"})
	// One event through first: the destination is active and every script loaded.
	rs.publish(0, 1, 1)
	rs.checkArrivals(rs.confirmedIDs())

	mon, err := benchkit.StartMonitor(rs.redisURL)
	if err != nil {
		t.Fatal(err)
	}
	defer mon.Stop()
	// The idle rate: what the replica costs Redis with nothing to do.
	idleStart := time.Now()
	time.Sleep(3 * time.Second) // a stretch of idle time to count, not a wait for a condition
	idle, idleFor := mon.Take(), time.Since(idleStart)

	start := time.Now()
	tick := time.NewTicker(costEventInterval)
	for i := 1; i <= costEvents; i++ {
		<-tick.C
		rs.publish(i, i+1, 1)
	}
	tick.Stop()
	rs.checkArrivals(rs.confirmedIDs())
	waitCommitted(t, rs, costEvents+1)
	events, eventsFor := mon.Take(), time.Since(start)

	start = time.Now()
	for i := range costCreates {
		a := httpSend(t, http.MethodPost, rs.apis[0]+"/v1/connectors/eventbridge/destinations", replicasAcctToken,
			fmt.Sprintf(`{"id":"cost-%d","bus_arn":"arn:aws:events:us-east-1:111122223333:event-bus/cost","role_arn":"arn:aws:iam::111122223333:role/cost-%d"}`, i, i))
		if a.status != http.StatusCreated {
			t.Fatalf("create %d: %d %s", i, a.status, a.body)
		}
	}
	// Each create's first setup check (refused: the roles trust nobody) ends within a
	// second; what it costs is part of the create.
	waitUntil(t, 30*time.Second, "every create's first setup check", func() bool {
		return rs.counter(0, `relay_setup_refused_total{reason="setup_incomplete"}`) >= costCreates
	})
	creates, createsFor := mon.Take(), time.Since(start)

	net := func(c benchkit.Counts, took time.Duration) (sent, all float64) {
		s, in := c.Total()
		is, iin := idle.Total()
		scale := took.Seconds() / idleFor.Seconds()
		return float64(s) - scale*float64(is), float64(s+in) - scale*float64(is+iin)
	}
	is, iin := idle.Total()
	t.Logf("idle: %.1f sent/s + %.1f inside/s (%s)", float64(is)/idleFor.Seconds(), float64(iin)/idleFor.Seconds(), idle.Per(int(idleFor.Seconds())))
	sent, all := net(events, eventsFor)
	t.Logf("per delivered event, over %s: %s; less idle: %.2f sent, %.2f in all", eventsFor.Round(time.Millisecond), events.Per(costEvents), sent/costEvents, all/costEvents)
	if sent/costEvents > eventSentMost || all/costEvents > eventAllMost {
		t.Errorf("an event costs Redis %.2f commands sent and %.2f in all, want at most %.0f and %.0f", sent/costEvents, all/costEvents, eventSentMost, eventAllMost)
	}
	sent, all = net(creates, createsFor)
	t.Logf("per create, over %s: %s; less idle: %.2f sent, %.2f in all", createsFor.Round(time.Millisecond), creates.Per(costCreates), sent/costCreates, all/costCreates)
	if sent/costCreates > createSentMost || all/costCreates > createAllMost {
		t.Errorf("a create costs Redis %.2f commands sent and %.2f in all, want at most %.0f and %.0f", sent/costCreates, all/costCreates, createSentMost, createAllMost)
	}
}

// waitCommitted waits until orders-bus's stored cursor is acct_1's log's last entry and
// the log holds n entries: every event delivered and committed.
func waitCommitted(t *testing.T, rs *replicaSet, n int) {
	t.Helper()
	opts, err := redis.ParseURL(rs.redisURL)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	ctx := context.Background()
	waitUntil(t, 30*time.Second, "the cursor at the log's last entry", func() bool {
		last, err := rdb.XRevRangeN(ctx, "relay:{acct_1}:log", "+", "-", 1).Result()
		if err != nil || len(last) == 0 || rdb.XLen(ctx, "relay:{acct_1}:log").Val() != int64(n) {
			return false
		}
		return rdb.HGet(ctx, "relay:{acct_1}:dest:orders-bus", "cursor").Val() == last[0].ID
	})
}
