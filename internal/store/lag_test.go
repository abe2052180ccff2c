package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/mercamap/relay/internal/testpeer"
)

// lagRig is one destination of a fresh account, active with its lease, and the
// events appended to its account so far.
type lagRig struct {
	t     *testing.T
	st    *Store
	r     Ref
	token int64
	n     int // events appended by append
}

func newLagRig(t *testing.T, st *Store, prefix string) *lagRig {
	r := Ref{Account: prefix + strconv.FormatInt(time.Now().UnixNano(), 36), ID: "orders", Connector: "eventbridge"}
	token, _ := activeWithLease(t, st, r)
	return &lagRig{t: t, st: st, r: r, token: token}
}

func (g *lagRig) event(id string) Append {
	return Append{Accounts: []string{g.r.Account},
		Entry: Entry{EventID: id, Type: "job.completed", Data: []byte(`{"jobId":"` + id + `"}`)}}
}

// append appends n new events in one batch, each followed by a duplicate of itself
// and, but the first, by a duplicate of the event before: duplicates in one
// transaction, and (the first) of an event of an earlier one when there is one.
func (g *lagRig) append(n int, logMaxAge time.Duration) {
	g.t.Helper()
	var batch []Append
	for range n {
		if g.n > 0 {
			batch = append(batch, g.event(fmt.Sprintf("ev-%05d", g.n))) // seen already
		}
		g.n++
		batch = append(batch, g.event(fmt.Sprintf("ev-%05d", g.n)), g.event(fmt.Sprintf("ev-%05d", g.n)))
	}
	got, err := g.st.AppendBatch(context.Background(), batch, time.Hour, logMaxAge)
	if err != nil {
		g.t.Fatal(err)
	}
	stored := 0
	for _, a := range got {
		if !a.Duplicate() {
			stored++
		}
	}
	if stored != n {
		g.t.Fatalf("%d of %d new events stored", stored, n)
	}
}

func (g *lagRig) logIDs() []string {
	g.t.Helper()
	msgs, err := g.st.rdb.XRange(context.Background(), logKey(g.r.Account), "-", "+").Result()
	if err != nil {
		g.t.Fatal(err)
	}
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.ID
	}
	return ids
}

// check compares the lag script's reading with the truth counted from the log, and the
// index with the log: the same ids, ordinals one apart up to the head.
func (g *lagRig) check(what string) LagReading {
	g.t.Helper()
	ctx := context.Background()
	got, err := g.st.DestinationLag(ctx, g.r)
	if err != nil {
		g.t.Fatal(err)
	}
	cursor, err := g.st.rdb.HGet(ctx, destKey(g.r.Account, g.r.ID), "cursor").Result()
	if err != nil {
		g.t.Fatal(err)
	}
	after, err := g.st.rdb.XRange(ctx, logKey(g.r.Account), "("+cursor, "+").Result()
	if err != nil {
		g.t.Fatal(err)
	}
	next := ""
	if len(after) > 0 {
		next = after[0].ID
	}
	if !got.Known || got.Cursor != cursor || got.Events != int64(len(after)) || got.Next != next {
		g.t.Fatalf("%s: lag %+v; the log holds %d entries after cursor %s, the first %q", what, got, len(after), cursor, next)
	}
	index, err := g.st.rdb.XRange(ctx, ordKey(g.r.Account), "-", "+").Result()
	if err != nil {
		g.t.Fatal(err)
	}
	head, _ := g.st.rdb.HGet(ctx, posKey(g.r.Account), "n").Int64()
	logIDs := g.logIDs()
	if len(index) != len(logIDs) {
		g.t.Fatalf("%s: the index holds %d entries, the log %d", what, len(index), len(logIDs))
	}
	for i, e := range index {
		k, _ := strconv.ParseInt(fmt.Sprint(e.Values["k"]), 10, 64)
		if e.ID != logIDs[i] || k != head-int64(len(index)-1-i) {
			g.t.Fatalf("%s: index entry %d is %s k=%d; log entry %s, head %d", what, i, e.ID, k, logIDs[i], head)
		}
	}
	return got
}

func (g *lagRig) commit(cursor string) {
	g.t.Helper()
	_, err := g.st.Commit(context.Background(), Commit{Ref: g.r, Token: g.token, Kind: KindDelivered, Cursor: cursor,
		EventID: "ev", ChannelRetention: time.Hour, AttemptsRetention: time.Hour})
	if err != nil {
		g.t.Fatal(err)
	}
}

func (g *lagRig) replay(p ReplayPoint) {
	g.t.Helper()
	if _, err := g.st.Replay(context.Background(), Replay{Ref: g.r, Point: p, Oldest: time.Now().Add(-time.Hour),
		ChannelRetention: time.Hour, AttemptsRetention: time.Hour}); err != nil {
		g.t.Fatal(err)
	}
}

// The lag of a destination is read from positions (the head ordinal and the ordinal
// index), and stays exact, with the index entry of every log entry under the same id,
// through appends with duplicates within and across transactions, deliveries, replays
// (after an event and from a time) and trimming of the log.
func TestLagFromPositionsStaysExact(t *testing.T) {
	onEachRedis(t, func(t *testing.T, st *Store) {
		g := newLagRig(t, st, "acct_lagpos_")
		if r := g.check("no events"); r.Events != 2 {
			t.Fatalf("the two events of the rig: %+v", r)
		}
		g.append(5, time.Hour)
		g.check("7 waiting")
		ids := g.logIDs()
		g.commit(ids[3])
		g.check("3 waiting after 4 delivered")
		g.append(1, time.Hour)
		g.commit(ids[6])
		g.check("1 waiting")
		g.commit(g.logIDs()[7])
		if r := g.check("caught up"); r.Events != 0 || r.Next != "" {
			t.Fatalf("caught up: %+v", r)
		}
		g.replay(ReplayPoint{AfterEvent: "ev-00002"})
		if r := g.check("replayed after ev-00002"); r.Events != 4 {
			t.Fatalf("after ev-00002 four events follow: %+v", r)
		}
		g.replay(ReplayPoint{From: time.Now().Add(-30 * time.Minute)})
		if r := g.check("replayed from the start"); r.Events != 8 {
			t.Fatalf("the whole log of 8 waits again: %+v", r)
		}

		// Trimming: once the clock passed every entry, an append with a 1 ms age trims
		// the log (whole nodes: "~"), and the index to the log's length.
		g.append(300, time.Hour)
		last := g.logIDs()
		deadline := time.Now().Add(5 * time.Second)
		for !time.Now().After(IDTime(last[len(last)-1]).Add(5 * time.Millisecond)) {
			if time.Now().After(deadline) {
				t.Fatal("the clock did not pass the log's last entry")
			}
		}
		g.append(3, time.Millisecond)
		if n := len(g.logIDs()); n >= len(last)+3 {
			t.Fatalf("the log was not trimmed: %d entries", n)
		}
		if r := g.check("cursor before the trimmed log"); r.Events != int64(len(g.logIDs())) {
			t.Fatalf("a cursor before the log waits for the whole log: %+v", r)
		}
		g.commit(g.logIDs()[0])
		g.check("cursor at the trimmed log's first entry")
	})
}

// A log stored by an earlier version (entries and "1" markers, no index): the lag of a
// cursor among those entries is unknown rather than counted; once the cursor reaches the
// first entry indexed it is exact again; a replay after one of them still finds it (bounded).
func TestLagOfAnUpgradedLog(t *testing.T) {
	onEachRedis(t, func(t *testing.T, st *Store) {
		ctx := context.Background()
		g := newLagRig(t, st, "acct_lagold_")
		if err := st.rdb.Del(ctx, logKey(g.r.Account), posKey(g.r.Account), ordKey(g.r.Account)).Err(); err != nil {
			t.Fatal(err)
		}
		var legacy []string
		for i := range 3 {
			id := fmt.Sprintf("old-%d", i)
			xid, err := st.rdb.XAdd(ctx, &redis.XAddArgs{Stream: logKey(g.r.Account), Values: []any{"event_id", id, "data", "{}"}}).Result()
			if err != nil {
				t.Fatal(err)
			}
			st.rdb.Set(ctx, seenKey(g.r.Account, id), "1", time.Hour)
			legacy = append(legacy, xid)
		}
		if err := st.rdb.HSet(ctx, destKey(g.r.Account, g.r.ID), "cursor", legacy[0]).Err(); err != nil {
			t.Fatal(err)
		}
		unknown := func(what string) {
			t.Helper()
			if r, err := st.DestinationLag(ctx, g.r); err != nil || r.Known || r.Events != 0 {
				t.Fatalf("%s: %+v, %v; want the lag unknown", what, r, err)
			}
		}
		unknown("no index at all")
		g.append(4, time.Hour)
		unknown("a cursor among the old entries")
		g.commit(legacy[2])
		unknown("a cursor at the last old entry")
		newIDs := g.logIDs()[3:]
		g.commit(newIDs[0])
		if r, err := st.DestinationLag(ctx, g.r); err != nil || !r.Known || r.Events != 3 || r.Next != newIDs[1] {
			t.Fatalf("cursor at the first new entry: %+v, %v; want 3 known, next %s", r, err, newIDs[1])
		}
		g.replay(ReplayPoint{AfterEvent: "old-1"})
		if c, _ := st.rdb.HGet(ctx, destKey(g.r.Account, g.r.ID), "cursor").Result(); c != legacy[1] {
			t.Fatalf("replay after old-1: cursor %s, want %s", c, legacy[1])
		}
	})
}

// commandCalls reads the calls of each command so far (INFO commandstats).
func commandCalls(t *testing.T, rdb redis.UniversalClient) map[string]int64 {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimPrefix(strings.TrimSpace(line), "cmdstat_"), ":calls=")
		if ok {
			n, _ := strconv.ParseInt(strings.SplitN(rest, ",", 2)[0], 10, 64)
			out[name] = n
		}
	}
	return out
}

func netOutput(t *testing.T, rdb redis.UniversalClient) int64 {
	t.Helper()
	info, err := rdb.Info(context.Background(), "stats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "total_net_output_bytes:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	t.Fatal("no total_net_output_bytes")
	return 0
}

// Issue 22 §5: a replay after an event the log lacks, on a 20,000-event log (1 KB
// bodies, 20 MB: what the old lookup paged out of Redis), is answered from the dedup
// marker: no log read at all, a few hundred bytes out of Redis. A replay after an
// event it holds reads no log either. On one server, whose INFO counts every call.
func TestReplayAfterAMissingEventReadsNoLog(t *testing.T) {
	st := open(t, Options{URL: testpeer.RedisURL(t)})
	ctx := context.Background()
	g := newLagRig(t, st, "acct_replaymiss_")
	body := []byte(`{"jobId":"` + strings.Repeat("x", 1000) + `"}`)
	for b := range 20 {
		batch := make([]Append, 1000)
		for i := range batch {
			batch[i] = Append{Accounts: []string{g.r.Account}, Entry: Entry{EventID: fmt.Sprintf("big-%d-%d", b, i), Type: "job.completed", Data: body}}
		}
		if _, err := st.AppendBatch(ctx, batch, time.Hour, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	lastID, err := st.LastLogID(ctx, g.r.Account)
	if err != nil {
		t.Fatal(err)
	}
	g.commit(lastID) // caught up: a replay moves the cursor back
	calls, out := commandCalls(t, st.rdb), netOutput(t, st.rdb)
	_, err = st.Replay(ctx, Replay{Ref: g.r, Point: ReplayPoint{AfterEvent: "never-stored"}, Oldest: time.Now().Add(-time.Hour),
		ChannelRetention: time.Hour, AttemptsRetention: time.Hour})
	if !errors.Is(err, ErrNoSuchEvent) {
		t.Fatalf("replay after a missing event: %v, want ErrNoSuchEvent", err)
	}
	after, sent := commandCalls(t, st.rdb), netOutput(t, st.rdb)-out
	for _, cmd := range []string{"xrange", "xrevrange"} {
		if d := after[cmd] - calls[cmd]; d != 0 {
			t.Errorf("%d %s calls to look up a missing event", d, cmd)
		}
	}
	if sent > 4<<10 {
		t.Errorf("%d bytes out of Redis to look up a missing event (the log holds 20 MB)", sent)
	}
	// One it holds: one index entry read (the point's check), no log entry.
	out = netOutput(t, st.rdb)
	g.replay(ReplayPoint{AfterEvent: "big-3-7"})
	if sent := netOutput(t, st.rdb) - out; sent > 4<<10 {
		t.Errorf("%d bytes out of Redis for a replay after an event", sent)
	}
	r := g.check("replayed after big-3-7")
	if r.Events != 20000-3*1000-8 {
		t.Fatalf("after big-3-7: %+v", r)
	}
}
