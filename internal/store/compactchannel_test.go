package store

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"
)

// A delivery's channel events carry only the card fields it changed, and the account
// channel holds a pointer to the destination's event, not a copy: a replay of the
// account channel serves the same events as the destination's, and both together cost
// a small part of what one full copy of the card per event did.
func TestChannelEventsCarryTheChangesAndTheAccountChannelPointsAtThem(t *testing.T) {
	onEachRedis(t, func(t *testing.T, st *Store) {
		ctx := context.Background()
		r := Ref{Account: "acct_compact_" + strconv.FormatInt(time.Now().UnixNano(), 36), ID: "orders", Connector: "eventbridge"}
		token, ids := activeWithLease(t, st, r)
		commit := func(kind, cursor, msg string) {
			t.Helper()
			if _, err := st.Commit(ctx, Commit{Ref: r, Token: token, Kind: kind, Cursor: cursor, EventID: "ev-" + cursor,
				MessageID: "msg-" + cursor, Message: msg, DisableAfter: 20, ChannelRetention: time.Hour, AttemptsRetention: time.Hour}); err != nil {
				t.Fatal(err)
			}
		}
		before, err := st.ChannelSequence(ctx, r.Account, DestinationChannel(r.ID))
		if err != nil {
			t.Fatal(err)
		}
		acctBefore, err := st.ChannelSequence(ctx, r.Account, AccountChannel(r.Account))
		if err != nil {
			t.Fatal(err)
		}
		commit(KindRejected, "", "AccessDeniedException: the role refused the write")
		commit(KindDelivered, ids[0], "")
		commit(KindDelivered, ids[1], "")

		dest, err := st.ReadChannel(ctx, r.Account, DestinationChannel(r.ID), before, 10)
		if err != nil || len(dest.Events) != 3 {
			t.Fatalf("destination channel: %+v, %v", dest, err)
		}
		acct, err := st.ReadChannel(ctx, r.Account, AccountChannel(r.Account), acctBefore, 10)
		if err != nil || len(acct.Events) != 3 {
			t.Fatalf("account channel: %+v, %v", acct, err)
		}
		for i := range dest.Events {
			d, a := dest.Events[i], acct.Events[i]
			if d.Type != a.Type || string(d.Data) != string(a.Data) || !d.Time.Equal(a.Time) {
				t.Fatalf("event %d: the account channel serves %s %s, the destination's %s %s", i, a.Type, a.Data, d.Type, d.Data)
			}
		}
		state := func(ev ChannelEvent) map[string]json.RawMessage {
			var d struct {
				State map[string]json.RawMessage `json:"state"`
			}
			if err := json.Unmarshal(ev.Data, &d); err != nil {
				t.Fatal(err)
			}
			return d.State
		}
		want := []map[string]bool{
			{"last_failure": true, "consecutive_failures": true},  // the rejection: its failure, the count climbs
			{"last_delivery": true, "consecutive_failures": true}, // the delivery ends the run
			{"last_delivery": true},                               // the next changes only the last delivery
		}
		for i, ev := range dest.Events {
			got := state(ev)
			if len(got) != len(want[i]) {
				t.Fatalf("event %d (%s) names %v, want only %v", i, ev.Type, got, want[i])
			}
			for k := range want[i] {
				if _, ok := got[k]; !ok {
					t.Fatalf("event %d (%s) names %v, want %v", i, ev.Type, got, want[i])
				}
			}
		}

		// The account channel's entries are pointers: no data of their own.
		m, err := st.masterFor(ctx, chanKey(r.Account, AccountChannel(r.Account)))
		if err != nil {
			t.Fatal(err)
		}
		last, err := m.XRevRangeN(ctx, chanKey(r.Account, AccountChannel(r.Account)), "+", "-", 1).Result()
		if err != nil || len(last) != 1 {
			t.Fatal(last, err)
		}
		if _, copied := last[0].Values["data"]; copied || last[0].Values["d"] != r.ID {
			t.Fatalf("the account channel's last entry is %v, want a pointer to %s", last[0].Values, r.ID)
		}

		// A pointer to an event its channel no longer holds asks for a new snapshot.
		if err := m.Del(ctx, chanKey(r.Account, DestinationChannel(r.ID))).Err(); err != nil {
			t.Fatal(err)
		}
		acct, err = st.ReadChannel(ctx, r.Account, AccountChannel(r.Account), acctBefore, 10)
		if err != nil || len(acct.Events) != 3 || acct.Events[2].Type != "resync.required" {
			t.Fatalf("after the destination's channel went: %+v, %v", acct, err)
		}
	})
}
