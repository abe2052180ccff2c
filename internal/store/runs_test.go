package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/mercamap/relay/internal/destination"
)

// Outcomes are kept once, in the attempt log, and the channels hold runs that stand
// for them: every event still reads back as it happened, from any cursor and in pages
// of any size, on the destination's channel and the account's, through pauses, a retry
// line of no event and two destinations writing in turn.
func TestChannelRunsServeEveryEventAsItHappened(t *testing.T) {
	onEachRedis(t, func(t *testing.T, st *Store) {
		ctx := context.Background()
		acct := "acct_runs_" + strconv.FormatInt(time.Now().UnixNano(), 36)
		orders := Ref{Account: acct, ID: "orders", Connector: "eventbridge"}
		billing := Ref{Account: acct, ID: "billing", Connector: "kinesis"}
		tokO, ids := activeWithLease(t, st, orders)
		tokB, _ := activeWithLease(t, st, billing)
		acctBefore, err := st.ChannelSequence(ctx, acct, AccountChannel(acct))
		if err != nil {
			t.Fatal(err)
		}

		// What happened, as the commits said it: destination, type, event id, message id.
		type happened struct{ dest, typ, eventID, messageID, message string }
		var want = map[string][]happened{}
		before := map[string]int64{}
		for _, r := range []Ref{orders, billing} {
			if before[r.ID], err = st.ChannelSequence(ctx, acct, DestinationChannel(r.ID)); err != nil {
				t.Fatal(err)
			}
		}
		i := 0
		commit := func(r Ref, token int64, kind, eventID, msg string) {
			t.Helper()
			i++
			mid := fmt.Sprintf("%08x-0000-4000-8000-%012x", i, i) // EventBridge's form: kept in 16 bytes
			if r.ID == "billing" {
				mid = "49651234567890123456789012345678901234567890123456" + strconv.Itoa(i) // Kinesis's
			}
			if _, err := st.Commit(ctx, Commit{Ref: r, Token: token, Kind: kind, EventID: eventID, MessageID: mid,
				Message: msg, DisableAfter: 20, ChannelRetention: time.Hour, AttemptsRetention: time.Hour}); err != nil {
				t.Fatal(err)
			}
			want[r.ID] = append(want[r.ID], happened{r.ID, outcomeType(kind), eventID, mid, msg})
		}
		state := func(r Ref, typ string) {
			t.Helper()
			want[r.ID] = append(want[r.ID], happened{dest: r.ID, typ: typ})
		}
		commit(orders, tokO, KindDelivered, orders.ID+"-a", "")
		commit(orders, tokO, KindDelivered, "fetcher.job.completed.7d444840-9dc0-11d1-b245-5ffdce74fad2", "")
		commit(billing, tokB, KindRejected, "ev-b1", "AccessDeniedException: the role refused the write")
		commit(orders, tokO, KindRejected, "ev-o3", "rejected")
		commit(billing, tokB, KindDelivered, "ev-b2", "")
		commit(billing, tokB, KindDelivered, "ev-b3", "")
		if _, err := st.AskRetry(ctx, orders, 1); err != nil { // a line of no event: the run ends
			t.Fatal(err)
		}
		commit(orders, tokO, KindNotTaken, "ev-o4", "ThrottlingException: slow down")
		commit(orders, tokO, KindDelivered, "ev-o5", "")
		if _, err := st.SetStatus(ctx, orders, Paused, "a pause", time.Hour); err != nil {
			t.Fatal(err)
		}
		state(orders, "destination.paused")
		commit(orders, tokO, KindDelivered, "ev-o6", "")
		commit(orders, tokO, KindDelivered, "ev-o7", "")
		// A commit batch of both destinations: the account's pointers go in one pack; one
		// of billing alone: a run.
		batch := func(rs ...Ref) {
			t.Helper()
			var cs []Commit
			for _, r := range rs {
				i++
				tok, id := tokO, fmt.Sprintf("ev-batch-%d", i)
				if r.ID == billing.ID {
					tok = tokB
				}
				cs = append(cs, Commit{Ref: r, Token: tok, Kind: KindDelivered, EventID: id, MessageID: destination.MessageID(r.ID, id),
					DisableAfter: 20, ChannelRetention: time.Hour, AttemptsRetention: time.Hour})
				want[r.ID] = append(want[r.ID], happened{r.ID, "delivery.succeeded", id, destination.MessageID(r.ID, id), ""})
			}
			if _, errs, err := st.CommitBatch(ctx, cs); err != nil || errors.Join(errs...) != nil {
				t.Fatal(err, errs)
			}
		}
		batch(orders, billing, orders, orders, billing)
		batch(billing, billing, billing)
		batch(orders)
		akey := chanKey(acct, AccountChannel(acct))
		am, err := st.masterFor(ctx, akey)
		if err != nil {
			t.Fatal(err)
		}
		packs, runs := 0, 0
		es, err := am.XRange(ctx, akey, "("+strconv.FormatInt(acctBefore, 10)+"-0", "+").Result()
		for _, e := range es {
			switch e.Values["type"] {
			case packType:
				packs++
			case runType:
				runs++
			}
		}
		if err != nil || packs != 1 {
			t.Fatalf("the account's channel holds %d packs and %d runs (%v), want the first batch's pack: %v", packs, runs, err, es)
		}
		_ = ids
		// Kept as runs: orders's eleven events in four entries (o1-o3, o4-o5 after the
		// retry's line, the pause, o6-o7 and the three of the batches).
		key := chanKey(acct, DestinationChannel(orders.ID))
		m, err := st.masterFor(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if es, err := m.XRange(ctx, key, "("+strconv.FormatInt(before[orders.ID], 10)+"-0", "+").Result(); err != nil || len(es) != 4 {
			t.Fatalf("orders's channel holds %d entries for its 11 events (%v), want 3 runs and the pause: %v", len(es), err, es)
		}

		read := func(channel string, after, limit int64) []ChannelEvent {
			t.Helper()
			var got []ChannelEvent
			for {
				p, err := st.ReadChannel(ctx, acct, channel, after, limit)
				if err != nil || p.Expired {
					t.Fatalf("%s after %d: %+v, %v", channel, after, p, err)
				}
				got = append(got, p.Events...)
				if !p.More {
					return got
				}
				after = p.Events[len(p.Events)-1].Sequence
			}
		}
		type fields struct {
			Destination string `json:"destination"`
			EventID     string `json:"event_id"`
			MessageID   string `json:"message_id"`
			Message     string `json:"message"`
		}
		bySeq := map[string]map[int64]ChannelEvent{}
		for _, r := range []Ref{orders, billing} {
			whole := read(DestinationChannel(r.ID), before[r.ID], 1000)
			if len(whole) != len(want[r.ID]) {
				t.Fatalf("%s: %d events, want %d: %+v", r.ID, len(whole), len(want[r.ID]), whole)
			}
			bySeq[r.ID] = map[int64]ChannelEvent{}
			for k, ev := range whole {
				w := want[r.ID][k]
				if ev.Sequence != before[r.ID]+int64(k)+1 || ev.Type != w.typ {
					t.Fatalf("%s event %d: %d %s, want %d %s", r.ID, k, ev.Sequence, ev.Type, before[r.ID]+int64(k)+1, w.typ)
				}
				var f fields
				if err := json.Unmarshal(ev.Data, &f); err != nil {
					t.Fatal(err)
				}
				if f.Destination != r.ID || (w.eventID != "" && (f.EventID != w.eventID || f.MessageID != w.messageID || f.Message != w.message)) {
					t.Fatalf("%s event %d says %s, want %+v", r.ID, k, ev.Data, w)
				}
				bySeq[r.ID][ev.Sequence] = ev
			}
			// Any page size, from any cursor, reads the same.
			for _, limit := range []int64{1, 2, 3} {
				for from := range int64(len(whole)) {
					got := read(DestinationChannel(r.ID), before[r.ID]+from, limit)
					for k, ev := range got {
						if w := whole[int(from)+k]; ev.Sequence != w.Sequence || string(ev.Data) != string(w.Data) || !ev.Time.Equal(w.Time) {
							t.Fatalf("%s after %d by %d: event %d is %d %s, want %d %s", r.ID, before[r.ID]+from, limit, k, ev.Sequence, ev.Data, w.Sequence, w.Data)
						}
					}
				}
			}
		}

		// The account's channel: every one of both destinations' events once, each as its
		// destination's channel serves it, in each destination's order.
		for _, limit := range []int64{1, 2, 5, 1000} {
			got := read(AccountChannel(acct), acctBefore, limit)
			if len(got) != len(want["orders"])+len(want["billing"]) {
				t.Fatalf("account channel by %d: %d events, want %d", limit, len(got), len(want["orders"])+len(want["billing"]))
			}
			next := map[string]int64{"orders": before["orders"] + 1, "billing": before["billing"] + 1}
			for k, ev := range got {
				var f fields
				if err := json.Unmarshal(ev.Data, &f); err != nil {
					t.Fatal(err)
				}
				d := bySeq[f.Destination][next[f.Destination]]
				if ev.Sequence != acctBefore+int64(k)+1 || ev.Type != d.Type || string(ev.Data) != string(d.Data) || !ev.Time.Equal(d.Time) {
					t.Fatalf("account event %d by %d: %d %s %s, want %s's %d %s %s", k, limit, ev.Sequence, ev.Type, ev.Data, f.Destination, d.Sequence, d.Type, d.Data)
				}
				next[f.Destination]++
			}
		}
	})
}

// A destination deleted and made again with the same id numbers its events past every
// one the old one gave: on from its counter, or, once that expired (a day after the
// delete, from state format 2), from the account channel's. The account channel's
// pointers to the old one's events point at nothing and ask for a new snapshot, and
// never serve the new one's events in their place; the new one's events come once,
// after; a follower's cursor from the old channel reads none of the new one's events
// as if it had seen them.
func TestADestinationMadeAgainNeverLendsItsEventsToTheOldOnesPointers(t *testing.T) {
	for _, expired := range []bool{false, true} {
		t.Run(map[bool]string{false: "counter-kept", true: "counter-expired"}[expired], func(t *testing.T) {
			onEachRedis(t, func(t *testing.T, st *Store) { madeAgain(t, st, expired) })
		})
	}
}

// madeAgain is TestADestinationMadeAgainNeverLendsItsEventsToTheOldOnesPointers, its
// counter gone before the id is made again when expired.
func madeAgain(t *testing.T, st *Store, expired bool) {
	ctx := context.Background()
	st.SetStateFormat(func() int { return CounterLifetime })
	r := Ref{Account: "acct_again_" + strconv.FormatInt(time.Now().UnixNano(), 36), ID: "orders", Connector: "eventbridge"}
	commit := func(token int64, id string, kind string) {
		t.Helper()
		if _, err := st.Commit(ctx, Commit{Ref: r, Token: token, Kind: kind, EventID: id, Message: "m",
			DisableAfter: 20, ChannelRetention: time.Hour, AttemptsRetention: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	other := Ref{Account: r.Account, ID: "other", Connector: "eventbridge"}
	otherToken, _ := activeWithLease(t, st, other)
	token, _ := activeWithLease(t, st, r)
	for i, id := range []string{"old-0", "old-1", "old-2"} {
		commit(token, id, KindDelivered)
		if _, err := st.Commit(ctx, Commit{Ref: other, Token: otherToken, Kind: KindDelivered, EventID: "other-" + strconv.Itoa(i),
			Message: "m", DisableAfter: 20, ChannelRetention: time.Hour, AttemptsRetention: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	oldLast, err := st.ChannelSequence(ctx, r.Account, DestinationChannel(r.ID))
	if err != nil {
		t.Fatal(err)
	}
	cut, err := st.ChannelSequence(ctx, r.Account, AccountChannel(r.Account))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Forget(ctx, r); err != nil {
		t.Fatal(err)
	}
	if expired {
		// A day on: the counter is gone.
		if err := st.rdb.Del(ctx, chanSeqKey(r.Account, DestinationChannel(r.ID))).Err(); err != nil {
			t.Fatal(err)
		}
	}
	token, _ = activeWithLease(t, st, r)
	for _, id := range []string{"new-0", "new-1", "new-2"} {
		commit(token, id, KindRejected)
	}
	p, err := st.ReadChannel(ctx, r.Account, AccountChannel(r.Account), 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, ev := range p.Events {
		var d struct {
			EventID string `json:"event_id"`
		}
		_ = json.Unmarshal(ev.Data, &d)
		if ev.Sequence <= cut && ev.Type != "resync.required" && d.EventID != "" && d.EventID[:4] == "new-" {
			t.Errorf("account event %d, a pointer to the deleted destination's, serves the new one's %s %s", ev.Sequence, ev.Type, ev.Data)
		}
		seen[d.EventID]++
	}
	for _, id := range []string{"new-0", "new-1", "new-2"} {
		if seen[id] != 1 {
			t.Errorf("the new destination's %s is on the account channel %d times, want once", id, seen[id])
		}
	}
	dest, err := st.ReadChannel(ctx, r.Account, DestinationChannel(r.ID), 0, 1000)
	if err != nil || len(dest.Events) == 0 || dest.Events[0].Sequence <= oldLast {
		t.Fatalf("the new destination's channel: %v, %v; want it to number on past the old one's %d", sequences(dest.Events), err, oldLast)
	}
	// A follower that read the old channel a little before its end is told to load a
	// snapshot; one that read all of it reads the new one's events from its first.
	behind, err := st.ReadChannel(ctx, r.Account, DestinationChannel(r.ID), oldLast-1, 1000)
	if err != nil || !behind.Expired {
		t.Errorf("a cursor %d of the old channel: %+v, %v; want it expired", oldLast-1, behind, err)
	}
	caught, err := st.ReadChannel(ctx, r.Account, DestinationChannel(r.ID), oldLast, 1000)
	if err != nil || caught.Expired == (dest.Events[0].Sequence == oldLast+1) ||
		!caught.Expired && (len(caught.Events) != len(dest.Events) || caught.Events[0].Sequence != dest.Events[0].Sequence) {
		t.Errorf("the old channel's last cursor %d: expired %v, %v, %v; want every event of the new one (%v), or expired",
			oldLast, caught.Expired, sequences(caught.Events), err, sequences(dest.Events))
	}
}

// sequences are the sequences of evs, in order.
func sequences(evs []ChannelEvent) []int64 {
	out := make([]int64, len(evs))
	for i, ev := range evs {
		out[i] = ev.Sequence
	}
	return out
}

// TestADeletedDestinationsCounterLivesADayFromFormat2: under state format 1 a delete
// keeps the destination channel's counter for good, as every release before 0.3.0
// does and counts on; from format 2 it lives a day (forgottenTTL), and the id made again
// keeps it for good again, numbering on.
func TestADeletedDestinationsCounterLivesADayFromFormat2(t *testing.T) {
	onEachRedis(t, func(t *testing.T, st *Store) {
		ctx := context.Background()
		r := Ref{Account: "acct_counter_" + strconv.FormatInt(time.Now().UnixNano(), 36), ID: "orders", Connector: "eventbridge"}
		key := chanSeqKey(r.Account, DestinationChannel(r.ID))
		ttl := func() time.Duration { return st.rdb.PTTL(ctx, key).Val() }
		activeWithLease(t, st, r)
		if err := st.Forget(ctx, r); err != nil {
			t.Fatal(err)
		}
		if d := ttl(); d != -1 {
			t.Fatalf("under format 1 a deleted destination's counter lives %s; want it kept for good", d)
		}
		activeWithLease(t, st, r)
		seq, _ := st.ChannelSequence(ctx, r.Account, DestinationChannel(r.ID))
		st.SetStateFormat(func() int { return CounterLifetime })
		if err := st.Forget(ctx, r); err != nil {
			t.Fatal(err)
		}
		if d := ttl(); d <= 0 || d > forgottenTTL {
			t.Fatalf("under format %d a deleted destination's counter lives %s; want at most %s", CounterLifetime, d, forgottenTTL)
		}
		activeWithLease(t, st, r)
		if d := ttl(); d != -1 {
			t.Fatalf("the id made again: its counter lives %s; want it kept for good", d)
		}
		if again, _ := st.ChannelSequence(ctx, r.Account, DestinationChannel(r.ID)); again <= seq {
			t.Fatalf("the id made again within the day is at sequence %d, want past %d", again, seq)
		}
	})
}
