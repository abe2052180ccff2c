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

// A destination deleted and made again with the same id while its counter lives
// numbers its events on from it, past every one the old one gave; once the counter
// expired (from state format 2, SetDeletedCounterLife's life after the delete) it
// starts its channel at 1, as any new destination. Either way the account channel's
// pointers to the old one's events ask for a new snapshot and never serve the new
// one's events in their place (its born, when it started at 1: a pointer the account's
// trimming has not reached yet may outlive channel_retention); the new one's events
// come once, after. While the counter lives, a follower's cursor from the old channel
// reads none of the new one's events as if it had seen them; after, such a cursor is
// older than channel_retention and its follower must load a snapshot (docs/api.md).
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
		// The counter's life on: it is gone (the account's pointers to the old one's
		// events may still be there, the account channel trimmed every 32nd event only).
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
	for _, id := range []string{"other-0", "other-1", "other-2"} {
		if seen[id] != 1 {
			t.Errorf("the other destination's %s is on the account channel %d times, want once", id, seen[id])
		}
	}
	dest, err := st.ReadChannel(ctx, r.Account, DestinationChannel(r.ID), 0, 1000)
	if err != nil || len(dest.Events) == 0 {
		t.Fatalf("the new destination's channel: %v, %v", sequences(dest.Events), err)
	}
	if expired {
		// Its channel numbered from 1, gap-free, as a new destination's.
		for i, ev := range dest.Events {
			if ev.Sequence != int64(i+1) {
				t.Fatalf("the destination made again after its counter expired: channel %v; want 1, 2, 3 …", sequences(dest.Events))
			}
		}
		return
	}
	if dest.Events[0].Sequence <= oldLast {
		t.Fatalf("the new destination's channel: %v; want it to number on past the old one's %d", sequences(dest.Events), oldLast)
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

// TestANewDestinationsChannelStartsAt1: a destination first stored in an account whose
// channel has events already numbers its own channel 1, 2, 3 … (a channel's sequence
// counts its own events, whatever the account's), under either state format; its
// events are served on the account channel as themselves. Under format 1 it records no
// born (a field 0.2.0 does not know, and needs none: its counters never start over).
func TestANewDestinationsChannelStartsAt1(t *testing.T) {
	for _, format := range []int{1, CounterLifetime} {
		t.Run("format-"+strconv.Itoa(format), func(t *testing.T) {
			onEachRedis(t, func(t *testing.T, st *Store) {
				ctx := context.Background()
				st.SetStateFormat(func() int { return format })
				acct := "acct_fresh_" + strconv.FormatInt(time.Now().UnixNano(), 36)
				ref := func(id string) Ref { return Ref{Account: acct, ID: id, Connector: "eventbridge"} }
				commit := func(r Ref, token int64, id string) {
					t.Helper()
					if _, err := st.Commit(ctx, Commit{Ref: r, Token: token, Kind: KindDelivered, EventID: id, Message: "m",
						DisableAfter: 20, ChannelRetention: time.Hour, AttemptsRetention: time.Hour}); err != nil {
						t.Fatal(err)
					}
				}
				early, _ := activeWithLease(t, st, ref("early"))
				for i := range 5 {
					commit(ref("early"), early, "early-"+strconv.Itoa(i))
				}
				if n, _ := st.ChannelSequence(ctx, acct, AccountChannel(acct)); n < 5 {
					t.Fatalf("the account channel is at %d: the case is not tested", n)
				}
				fresh := ref("fresh")
				if _, err := st.Ensure(ctx, fresh, "ext-2", "fp", time.Hour); err != nil {
					t.Fatal(err)
				}
				if n, err := st.ChannelSequence(ctx, acct, DestinationChannel(fresh.ID)); err != nil || n != 0 {
					t.Fatalf("the new destination's channel before its first event is at %d, %v; want 0", n, err)
				}
				born := st.rdb.HExists(ctx, destKey(acct, fresh.ID), "born").Val()
				if format < CounterLifetime && born {
					t.Error("under format 1 the new destination records a born")
				}
				if format >= CounterLifetime && !born {
					t.Error("under format 2 the new destination records no born: the case is not tested")
				}
				token, _ := activeWithLease(t, st, fresh)
				for i := range 3 {
					commit(fresh, token, "fresh-"+strconv.Itoa(i))
				}
				dest, err := st.ReadChannel(ctx, acct, DestinationChannel(fresh.ID), 0, 1000)
				if err != nil || len(dest.Events) < 4 {
					t.Fatalf("the new destination's channel: %v, %v", sequences(dest.Events), err)
				}
				for i, ev := range dest.Events {
					if ev.Sequence != int64(i+1) {
						t.Fatalf("the new destination's channel: %v; want 1, 2, 3 …", sequences(dest.Events))
					}
				}
				p, err := st.ReadChannel(ctx, acct, AccountChannel(acct), 0, 1000)
				if err != nil {
					t.Fatal(err)
				}
				seen := map[string]int{}
				for _, ev := range p.Events {
					var d struct {
						EventID string `json:"event_id"`
					}
					_ = json.Unmarshal(ev.Data, &d)
					if ev.Type == "resync.required" {
						t.Errorf("account event %d is resync.required %s: the new destination's events are not served", ev.Sequence, ev.Data)
					}
					seen[d.EventID]++
				}
				for i := range 3 {
					if id := "fresh-" + strconv.Itoa(i); seen[id] != 1 {
						t.Errorf("the new destination's %s is on the account channel %d times, want once", id, seen[id])
					}
				}
			})
		})
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

// TestADeletedDestinationsCounterLivesItsLifeFromFormat2: under state format 1 a delete
// keeps the destination channel's counter for good, as every release before 0.3.0
// does and counts on; from format 2 it lives SetDeletedCounterLife's life, never less
// than a day (forgottenTTL, also unset), so a channel_retention of an hour leaves it a
// day and one of 48 hours leaves it 48 hours; the lease fields live their day whatever
// it is. The id made again keeps the counter for good again, numbering on.
func TestADeletedDestinationsCounterLivesItsLifeFromFormat2(t *testing.T) {
	onEachRedis(t, func(t *testing.T, st *Store) {
		ctx := context.Background()
		r := Ref{Account: "acct_counter_" + strconv.FormatInt(time.Now().UnixNano(), 36), ID: "orders", Connector: "eventbridge"}
		key := chanSeqKey(r.Account, DestinationChannel(r.ID))
		ttl := func(key string) time.Duration { return st.rdb.PTTL(ctx, key).Val() }
		activeWithLease(t, st, r)
		if err := st.Forget(ctx, r); err != nil {
			t.Fatal(err)
		}
		if d := ttl(key); d != -1 {
			t.Fatalf("under format 1 a deleted destination's counter lives %s; want it kept for good", d)
		}
		st.SetStateFormat(func() int { return CounterLifetime })
		for _, c := range []struct {
			name      string
			set, want time.Duration
		}{
			{"unset", 0, forgottenTTL},
			{"channel_retention 1h", max(24*time.Hour, time.Hour), 24 * time.Hour},
			{"below the day", time.Hour, forgottenTTL},
			{"channel_retention 48h", max(24*time.Hour, 48*time.Hour), 48 * time.Hour},
		} {
			st.SetDeletedCounterLife(c.set)
			activeWithLease(t, st, r)
			if d := ttl(key); d != -1 {
				t.Fatalf("%s: the id made again: its counter lives %s; want it kept for good", c.name, d)
			}
			seq, _ := st.ChannelSequence(ctx, r.Account, DestinationChannel(r.ID))
			if seq < 2 {
				t.Fatalf("%s: the id made again is at sequence %d, want it numbering on", c.name, seq)
			}
			if err := st.Forget(ctx, r); err != nil {
				t.Fatal(err)
			}
			if d := ttl(key); d <= c.want-time.Minute || d > c.want {
				t.Errorf("%s: a deleted destination's counter lives %s; want %s", c.name, d, c.want)
			}
			if d := ttl(destKey(r.Account, r.ID)); d <= forgottenTTL-time.Minute || d > forgottenTTL {
				t.Errorf("%s: a deleted destination's lease fields live %s; want %s", c.name, d, forgottenTTL)
			}
			if again, _ := st.ChannelSequence(ctx, r.Account, DestinationChannel(r.ID)); again != seq {
				t.Errorf("%s: the delete moved the counter from %d to %d", c.name, seq, again)
			}
		}
	})
}
