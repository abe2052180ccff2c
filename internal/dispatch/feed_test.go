package dispatch

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/mercamap/relay/internal/store"
)

// TestEntriesThisReplicaAppendsAreHandedToItsWorkersAndNoneIsLostToAnotherAppender:
// this replica's appends hand their entries to its workers as they are stored, while
// another replica appends to the same account log at the same time. The destination
// gets every event of the log once, in the log's order (read from Redis: the outside
// truth), and most of this replica's entries went by hand (the rest, whose run did not
// follow the feed's last entry, by the follower's read). So does one the other appends
// alone right after this replica's last append, while the follower leaves the log out.
func TestEntriesThisReplicaAppendsAreHandedToItsWorkersAndNoneIsLostToAnotherAppender(t *testing.T) {
	sink := newTestSink(nil)
	r := newRig(t, sink, bus("orders", "111122223333"))
	if _, err := r.d.opts.Store.SetupChecked(context.Background(), store.Ref{Account: acct, ID: "orders"}, true, store.PendingCheck{}, time.Hour); err != nil {
		t.Fatal(err)
	}
	r.start()
	waitFor(t, "the destination's lease and its account followed", func() bool {
		r.d.mu.Lock()
		defer r.d.mu.Unlock()
		f := r.d.feeds[acct]
		if f == nil {
			return false
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.owner != nil
	})
	const rounds = 200
	var wg sync.WaitGroup
	errs := make(chan error, 2*rounds)
	appendAs := func(own bool) {
		defer wg.Done()
		for i := range rounds {
			batch := []store.Append{{Accounts: []string{acct}, Entry: store.Entry{
				EventID: fmt.Sprintf("own-%t-%04d", own, i), Type: "job.completed", Data: []byte(`{"jobId":"j"}`)}}}
			_, runs, err := r.store.AppendBatchRuns(context.Background(), batch, time.Hour, time.Hour)
			if err != nil {
				errs <- err
				return
			}
			if own {
				r.d.Appended(runs)
			}
		}
	}
	wg.Add(2)
	go appendAs(true)
	go appendAs(false)
	wg.Wait()
	// Then the other replica alone, right after this one's last append (its follower
	// leaves the log out for ownQuiet): its event is read all the same.
	if _, err := r.store.AppendBatch(context.Background(), []store.Append{{Accounts: []string{acct}, Entry: store.Entry{
		EventID: "other-last", Type: "job.completed", Data: []byte(`{"jobId":"j"}`)}}}, time.Hour, time.Hour); err != nil {
		t.Fatal(err)
	}
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	log, err := r.store.ReadLog(context.Background(), acct, "0", 10*rounds)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, e := range log {
		want = append(want, e.EventID)
	}
	waitFor(t, "every event of the log at the destination", func() bool { return len(sink.got("orders")) >= len(want) })
	if got := sink.got("orders"); !slices.Equal(got, want) {
		t.Fatalf("the destination got %d events, the log holds %d: not each once in the log's order", len(got), len(want))
	}
	if n := testutil.ToFloat64(r.d.opts.Metrics.HandedOver); n < 1 || n > rounds {
		t.Fatalf("%v entries handed over, want some and at most this replica's %d", n, rounds)
	}
}

// TestAFeedTakesARunOnlyRightAfterItsLastEntry: a run that does not follow the feed's
// last entry is refused (the follower's read brings it); what a run put in is not
// added again when the follower reads it.
func TestAFeedTakesARunOnlyRightAfterItsLastEntry(t *testing.T) {
	me := &follower{}
	f := &feed{}
	e := func(ids ...string) []store.LogEntry {
		var out []store.LogEntry
		for _, id := range ids {
			out = append(out, store.LogEntry{ID: id})
		}
		return out
	}
	took := func(after string, es []store.LogEntry) bool {
		ok, _ := f.handoff(after, es, time.Now())
		return ok
	}
	if took("1-0", e("2-0")) {
		t.Fatal("a feed no follower fills took a run")
	}
	f.start(me, "1-0")
	if took("", e("2-0")) || took("0-5", e("2-0")) {
		t.Fatal("a run after an unknown or an older entry was taken")
	}
	if !took("1-0", e("2-0", "2-1")) || !took("2-1", e("3-0")) {
		t.Fatal("runs right after the feed's last entry were refused")
	}
	f.add(me, e("2-0", "2-1", "3-0", "3-1"))
	if took("3-0", e("4-0")) {
		t.Fatal("a run after an entry that is not the last was taken")
	}
	got, ok := f.after("1-0", 10)
	var ids []string
	for _, x := range got {
		ids = append(ids, x.ID)
	}
	if !ok || fmt.Sprint(ids) != "[2-0 2-1 3-0 3-1]" {
		t.Fatalf("the feed after 1-0: %v (%v), want each entry once in log order", ids, ok)
	}
	// Had a run been taken past an entry the feed never got, the follower's read shows
	// it: the feed starts over after the read, and a worker behind reads the log.
	f.put(e("5-0"))
	if !f.add(me, e("4-0", "5-0", "6-0")) {
		t.Fatal("the follower's read of a missed entry did not wake the workers")
	}
	if _, ok := f.after("3-1", 10); ok {
		t.Fatal("a worker behind a missed entry was served from the feed, which lacks it")
	}
	if got, ok := f.after("6-0", 10); !ok || len(got) != 0 {
		t.Fatalf("after the read's last entry: %v (%v), want nothing yet, from memory", got, ok)
	}
}

// TestAFollowerLeavesOutTheLogItsOwnAppendsHandOverAndReadsItAgainWhenTheyMissOrStop:
// while this replica's appends hand their entries over, the follower's read leaves the
// account's log out; a run that missed (another replica appended between) wakes it once
// and has it read on from the feed's last entry, as does ownQuiet with no append.
func TestAFollowerLeavesOutTheLogItsOwnAppendsHandOverAndReadsItAgainWhenTheyMissOrStop(t *testing.T) {
	me, other := &follower{}, &follower{}
	f := &feed{}
	f.start(me, "1-0")
	t0 := time.Now()
	p := f.plan(me, store.FollowPoint{Log: "1-0", Ctl: "0-0"}, t0)
	if p.SkipLog || p.Log != "1-0" {
		t.Fatalf("before any append of its own: %+v, want the log read from 1-0", p)
	}
	if took, wake := f.handoff("1-0", []store.LogEntry{{ID: "2-0"}}, t0); !took || wake {
		t.Fatalf("a run right after the last entry: took %v, wake %v", took, wake)
	}
	if p = f.plan(me, p, t0.Add(ownQuiet/2)); !p.SkipLog {
		t.Fatalf("right after its own append: %+v, want the log left out", p)
	}
	if p2 := f.plan(other, p, t0); p2.SkipLog {
		t.Fatal("a follower that does not fill the feed left the log out")
	}
	// Another replica appended 2-1; this one's next run follows it.
	took, wake := f.handoff("2-1", []store.LogEntry{{ID: "3-0"}}, t0.Add(ownQuiet/2))
	if took || !wake {
		t.Fatalf("a run after an entry the feed lacks: took %v, wake %v; want refused and a wake", took, wake)
	}
	if _, wake := f.handoff("3-0", []store.LogEntry{{ID: "4-0"}}, t0.Add(ownQuiet/2)); wake {
		t.Fatal("a second miss before the follower read woke it again")
	}
	if p = f.plan(me, p, t0.Add(ownQuiet/2)); p.SkipLog || p.Log != "2-0" {
		t.Fatalf("after a miss: %+v, want the log read from the feed's last entry 2-0", p)
	}
	f.add(me, []store.LogEntry{{ID: "2-1"}, {ID: "3-0"}, {ID: "4-0"}})
	p.Log = "4-0"
	if took, wake := f.handoff("3-0", []store.LogEntry{{ID: "4-0"}}, t0.Add(ownQuiet)); took || wake {
		t.Fatalf("a run the follower's read brought first: took %v, wake %v; want neither (nothing was missed)", took, wake)
	}
	if took, _ := f.handoff("4-0", []store.LogEntry{{ID: "5-0"}}, t0.Add(ownQuiet)); !took {
		t.Fatal("a run after the read's last entry was refused")
	}
	if p = f.plan(me, p, t0.Add(ownQuiet+ownQuiet/2)); !p.SkipLog {
		t.Fatalf("within ownQuiet of its last append: %+v, want the log left out", p)
	}
	if p = f.plan(me, p, t0.Add(3*ownQuiet)); p.SkipLog || p.Log != "5-0" {
		t.Fatalf("ownQuiet after its last append: %+v, want the log read from 5-0", p)
	}
}
