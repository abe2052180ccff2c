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
// follow the feed's last entry, by the follower's read).
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
	if f.handoff("1-0", e("2-0")) {
		t.Fatal("a feed no follower fills took a run")
	}
	f.start(me, "1-0")
	if f.handoff("", e("2-0")) || f.handoff("0-5", e("2-0")) {
		t.Fatal("a run after an unknown or an older entry was taken")
	}
	if !f.handoff("1-0", e("2-0", "2-1")) || !f.handoff("2-1", e("3-0")) {
		t.Fatal("runs right after the feed's last entry were refused")
	}
	f.add(me, e("2-0", "2-1", "3-0", "3-1"))
	if f.handoff("3-0", e("4-0")) {
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
