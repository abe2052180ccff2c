package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mercamap/relay/internal/store"
	"github.com/mercamap/relay/internal/store/storetest"
)

// floodWindow is how long each half of the replay loop runs (the 30 s, split).
const floodWindow = 7500 * time.Millisecond

// TestAnAccountLoopingReplaysActivationsAndRetriesGrowsRedisLittleAndSendsTheLogOnce
// is issue 22's attack 5 against `relay serve` with its default limits, real Redis,
// RabbitMQ and the EventBridge test server: acct_1's token loops replays, activations
// with a replay and retries on its active destination, then POST …/replay once it is
// paused, for 15 s in all. Redis grows by less than 5 MiB (used_memory, before and
// after, same run); the bus receives the log once more (the replays let through while
// the first still ran replace it) and the retries let through, no more; the loop sees
// 429 RESOURCE_EXHAUSTED with Retry-After.
func TestAnAccountLoopingReplaysActivationsAndRetriesGrowsRedisLittleAndSendsTheLogOnce(t *testing.T) {
	rs := startReplicas(t, 1)
	const logged = 300
	rs.publish(0, logged, 64)
	api := rs.apis[0]
	st, err := store.Open(rs.redisURL)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	settled := func() bool { // every event ended at the bus, no write in flight
		h, err := st.Client().HMGet(ctx, storetest.DestKey("acct_1", "orders-bus"), "cursor", "writing").Result()
		last, _ := storetest.LastLogID(ctx, st.Client(), "acct_1")
		return err == nil && h[0] == last && h[1] == nil
	}
	waitUntil(t, 60*time.Second, "the log at the bus", func() bool { return len(rs.bus.Entries()) >= logged && settled() })
	retried := attemptLog(t, api)[0].N // a delivered event's attempt
	before := usedMemory(t, st)
	atBus := len(rs.bus.Entries())

	from := `{"from":"` + time.Now().Add(-time.Hour).UTC().Format(time.RFC3339) + `"}`
	retry := fmt.Sprintf("/attempts/%d/retry", retried)
	active := loopActions(t, api, floodWindow, []string{"/replay", "/activate", retry}, []string{from, `{"replay":"since_paused"}`, ""})
	waitUntil(t, 60*time.Second, "the replay and retries written", func() bool {
		return len(rs.bus.Entries()) >= atBus+logged+active.let[retry] && settled()
	})
	if a := httpDo(t, "POST", api+busDest+"/pause", replicasAdminToken); a.status != 200 {
		t.Fatalf("pause: %d %s", a.status, a.body)
	}
	paused := loopActions(t, api, floodWindow, []string{"/replay"}, []string{from})
	if a := httpDo(t, "POST", api+busDest+"/activate", replicasAdminToken); a.status != 200 {
		t.Fatalf("activate: %d %s", a.status, a.body)
	}
	waitUntil(t, 60*time.Second, "what the activation starts written", settled)
	grown := usedMemory(t, st) - before
	sent := len(rs.bus.Entries()) - atBus
	retries := active.let[retry]
	t.Logf("active: %d requests, %v let through, %d refused; paused: %d requests, %v let through, %d refused; "+
		"redis grew %d bytes; the bus received %d events (the log is %d)",
		active.requests, active.let, active.refused+active.noWait, paused.requests, paused.let, paused.refused+paused.noWait, grown, sent, logged)
	if grown >= 5<<20 {
		t.Errorf("redis grew by %d bytes in the loop; want less than 5 MiB", grown)
	}
	if sent > logged+retries {
		t.Errorf("the bus received %d events during the loop; want at most one replay's %d and the %d retries let through", sent, logged, retries)
	}
	if paused.refused == 0 || active.refused == 0 || paused.noWait+active.noWait > 0 {
		t.Errorf("refused %d while paused, %d while active, %d without a Retry-After: want 429 RESOURCE_EXHAUSTED with Retry-After",
			paused.refused, active.refused, paused.noWait+active.noWait)
	}
	if got := len(firstArrivals(t, rs.bus.Entries()[atBus:])); got != logged {
		t.Errorf("the replay sent %d distinct events again; want the whole log of %d", got, logged)
	}
}

// flood is what a loop of actions got: answers by path that were let through (2xx),
// and how many were refused with 429.
type flood struct {
	requests, refused int
	noWait            int // 429s without a Retry-After of a second or more
	let               map[string]int
}

// loopActions posts acct_1's token to orders-bus's paths (with their bodies) in turn
// for window. Every answer must be 2xx, 400 (the activation of an active destination)
// or a 429.
func loopActions(t *testing.T, api string, window time.Duration, paths, bodies []string) flood {
	t.Helper()
	f := flood{let: map[string]int{}}
	for end := time.Now().Add(window); time.Now().Before(end); f.requests++ {
		i := f.requests % len(paths)
		req, _ := http.NewRequest(http.MethodPost, api+busDest+paths[i], strings.NewReader(bodies[i]))
		req.Header.Set("Authorization", "Bearer "+replicasAcctToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", paths[i], err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch secs, _ := strconv.Atoi(resp.Header.Get("Retry-After")); {
		case resp.StatusCode < 300:
			f.let[paths[i]]++
		case resp.StatusCode == http.StatusTooManyRequests && strings.Contains(string(body), "RESOURCE_EXHAUSTED") && secs >= 1:
			f.refused++
		case resp.StatusCode == http.StatusTooManyRequests:
			f.noWait++
		case resp.StatusCode == http.StatusBadRequest && paths[i] == "/activate":
		default:
			t.Fatalf("%s: %d (Retry-After %q) %s", paths[i], resp.StatusCode, resp.Header.Get("Retry-After"), body)
		}
	}
	return f
}

// usedMemory is Redis's used_memory, in bytes.
func usedMemory(t *testing.T, st *store.Store) int64 {
	t.Helper()
	info, err := st.Client().Info(context.Background(), "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("INFO memory has no used_memory:\n%s", info)
	return 0
}
