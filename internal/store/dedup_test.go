package store

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mercamap/relay/internal/testpeer"
)

// movedClock is a clock a test moves forward by hand; safe for concurrent use.
type movedClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *movedClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *movedClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// A re-emit storm across bucket edges: every day for twelve days, 300 new events (more
// than a bucket's first level holds) and a re-emit of events of one, three, six and
// eleven days before; a week's window keeps each re-emit within it a duplicate, and an
// event re-emitted more than a window and a bucket (a quarter window) later is new again. The log holds each event once per acceptance,
// in order, and a replay after an event from days before finds it.
func TestDedupHoldsThroughAReEmitStormAcrossBucketEdges(t *testing.T) {
	onEachRedis(t, func(t *testing.T, st *Store) {
		ctx := context.Background()
		acct := "acct_dd_" + strconv.FormatInt(time.Now().UnixNano(), 36)
		clock := &movedClock{t: time.Now()}
		st.now = clock.now
		const window, perDay, days = 168 * time.Hour, 300, 12
		ev := func(day, i int) Append {
			id := fmt.Sprintf("fetcher.job.completed.%d-%d", day, i)
			return Append{Entry: Entry{EventID: id, Type: "job.completed", Data: []byte(`{"jobId":"` + id + `"}`)}, Accounts: []string{acct}}
		}
		var want []string // the log's events, in order
		for day := range days {
			if day > 0 {
				clock.add(24*time.Hour + 7*time.Minute)
			}
			var batch []Append
			var dup []bool
			for i := range perDay {
				batch, dup = append(batch, ev(day, i)), append(dup, false)
				for _, back := range []int{1, 3, 6, 11} {
					if day-back >= 0 && i%back == 0 {
						// 11 days back is past the window and its bucket: new again.
						batch, dup = append(batch, ev(day-back, i)), append(dup, back <= 6)
					}
				}
			}
			for start := 0; start < len(batch); start += 250 { // batches as ingest sends them
				end := min(start+250, len(batch))
				got, err := st.AppendBatch(ctx, batch[start:end], window, 30*24*time.Hour)
				if err != nil {
					t.Fatal(err)
				}
				for k, a := range got {
					n := start + k
					if a.Duplicate() != dup[n] {
						t.Fatalf("day %d: %s duplicate %v, want %v", day, batch[n].Entry.EventID, a.Duplicate(), dup[n])
					}
					if !dup[n] {
						want = append(want, batch[n].Entry.EventID)
					}
				}
			}
		}
		log, err := st.ReadLog(ctx, acct, "0", int64(len(want)+10))
		if err != nil {
			t.Fatal(err)
		}
		if len(log) != len(want) {
			t.Fatalf("log holds %d entries, want %d", len(log), len(want))
		}
		for i, e := range log {
			if e.EventID != want[i] {
				t.Fatalf("log entry %d is %s, want %s", i, e.EventID, want[i])
			}
		}
		// A replay after an event from six days ago finds its entry.
		old := ev(days-7, 5).Entry.EventID
		id, err := st.findEvent(ctx, acct, old)
		if err != nil {
			t.Fatalf("find %s: %v", old, err)
		}
		if e, err := st.LogEntryAt(ctx, acct, id); err != nil || e.EventID != old {
			t.Fatalf("%s found at %s, which holds %q (%v)", old, id, e.EventID, err)
		}
		// Markers cost bytes, not a key each: a handful of shards for thousands of events.
		m, err := st.masterFor(ctx, dedupKey(acct))
		if err != nil {
			t.Fatal(err)
		}
		keys, err := m.Keys(ctx, dedupKey(acct)+"*").Result() // one slot, on one master
		if err != nil {
			t.Fatal(err)
		}
		if len(keys) == 0 || len(keys) > len(want)/100 {
			t.Fatalf("%d dedup keys for %d events", len(keys), len(want))
		}
		for _, k := range keys {
			if k == dedupKey(acct) {
				continue
			}
			if enc := m.ObjectEncoding(ctx, k).Val(); enc != "listpack" {
				t.Fatalf("shard %s is a %s, want a listpack", k, enc)
			}
		}
	})
}

// The markers survive a Redis that is killed and comes back from its AOF: every event
// re-emitted after the restart is a duplicate.
func TestDedupSurvivesARedisRestartFromItsAOF(t *testing.T) {
	r := testpeer.StartRedis(t, testpeer.WithAOF())
	st := open(t, Options{URL: r.URL()})
	ctx := context.Background()
	var batch []Append
	for i := range 600 {
		id := "fetcher.job.failed.aof-" + strconv.Itoa(i)
		batch = append(batch, Append{Entry: Entry{EventID: id, Data: []byte("{}")}, Accounts: []string{"acct_aof"}})
	}
	if _, err := st.AppendBatch(ctx, batch, time.Hour, time.Hour); err != nil {
		t.Fatal(err)
	}
	r.Kill(t)
	r.Start(t)
	got, err := st.AppendBatch(ctx, batch, time.Hour, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for i, a := range got {
		if !a.Duplicate() {
			t.Fatalf("%s was appended again after the restart", batch[i].Entry.EventID)
		}
	}
	if n := st.rdb.XLen(ctx, logKey("acct_aof")).Val(); n != 600 {
		t.Fatalf("log holds %d entries, want 600", n)
	}
}

// Markers stored by a version before the buckets (a key per event) keep counting for a
// window after the upgrade: such an event is a duplicate, and a replay finds it.
func TestMarkersOfTheFormBeforeStillCount(t *testing.T) {
	onEachRedis(t, func(t *testing.T, st *Store) {
		ctx := context.Background()
		acct := "acct_ddold_" + strconv.FormatInt(time.Now().UnixNano(), 36)
		if err := st.rdb.Set(ctx, seenKey(acct, "ev-old"), "1700000000000-0", time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
		got, err := st.AppendBatch(ctx, []Append{
			{Entry: Entry{EventID: "ev-old", Data: []byte("{}")}, Accounts: []string{acct}},
			{Entry: Entry{EventID: "ev-new", Data: []byte("{}")}, Accounts: []string{acct}},
		}, time.Hour, time.Hour)
		if err != nil || !got[0].Duplicate() || got[1].Duplicate() {
			t.Fatalf("%v, %v: want ev-old a duplicate, ev-new appended", got, err)
		}
		if id, err := st.findEvent(ctx, acct, "ev-old"); err != nil || id != "1700000000000-0" {
			t.Fatalf("ev-old found at %q (%v)", id, err)
		}
		if v, _ := st.rdb.Get(ctx, seenKey(acct, "ev-new")).Result(); v != "" || strings.Contains(v, "-") {
			t.Fatalf("ev-new has a key of the old form: %q", v)
		}
	})
}
