package store

import (
	"context"
	"errors"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/testpeer"
)

// TestReadCardReadsTheStateOnlyWhenItChangedAndItsLagAlways: ReadCard answers the
// destination channel's sequence and the lag (as DestinationLag reads it) every time,
// and the state (as LoadState reads it) only when the state the caller holds is not the
// stored one: after a pause, a delivery's commit, a rejection's; a pending destination's
// check, stored without moving the sequence, is read every time; a destination deleted
// (its lease fields left) is unknown, and one made again with the same id is read again
// though its channel's counter stayed.
func TestReadCardReadsTheStateOnlyWhenItChangedAndItsLagAlways(t *testing.T) {
	onEachRedis(t, func(t *testing.T, st *Store) {
		ctx := context.Background()
		r := Ref{Account: "acct_card_" + strconv.FormatInt(time.Now().UnixNano(), 36), ID: "orders", Connector: "eventbridge"}
		token, ids := activeWithLease(t, st, r)

		// read checks one ReadCard against LoadState and DestinationLag, and returns
		// the state the caller holds after it.
		read := func(what string, held *State, wantFresh bool) *State {
			t.Helper()
			got, err := st.ReadCard(ctx, r, held)
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			want, err := st.LoadState(ctx, r)
			if err != nil {
				t.Fatal(err)
			}
			lag, err := st.DestinationLag(ctx, r)
			if err != nil {
				t.Fatal(err)
			}
			if got.Sequence != want.Sequence || !reflect.DeepEqual(got.Lag, lag) {
				t.Fatalf("%s: sequence %d, lag %+v; want %d, %+v", what, got.Sequence, got.Lag, want.Sequence, lag)
			}
			if (got.State != nil) != wantFresh {
				t.Fatalf("%s: state read %v, want %v", what, got.State != nil, wantFresh)
			}
			if got.State == nil {
				return held
			}
			if !reflect.DeepEqual(*got.State, want) {
				t.Fatalf("%s: state\n%+v\nwant\n%+v", what, *got.State, want)
			}
			return got.State
		}
		held := read("first read", nil, true)
		held = read("nothing changed", held, false)

		if _, err := st.ChangeStatus(ctx, StatusChange{Ref: r, Status: Paused, ChannelRetention: time.Hour}); err != nil {
			t.Fatal(err)
		}
		held = read("after a pause", held, true)
		if held.Status != Paused {
			t.Fatalf("status %q after a pause", held.Status)
		}
		if _, err := st.ChangeStatus(ctx, StatusChange{Ref: r, Status: Active, Since: SincePaused, ChannelRetention: time.Hour}); err != nil {
			t.Fatal(err)
		}
		held = read("after an activation", held, true)
		commit := func(kind, cursor string) {
			t.Helper()
			if _, err := st.Commit(ctx, Commit{Ref: r, Token: token, Kind: kind, Cursor: cursor, EventID: "ev-" + kind,
				Message: "no", DisableAfter: 20, WarnAfter: []int{1}, ChannelRetention: time.Hour, AttemptsRetention: time.Hour}); err != nil {
				t.Fatal(err)
			}
		}
		commit(KindDelivered, ids[0])
		held = read("after a delivery", held, true)
		if held.LastDelivery == nil || held.LastDelivery.EventID != "ev-delivered" {
			t.Fatalf("last delivery %+v", held.LastDelivery)
		}
		held = read("nothing changed since the delivery", held, false)
		commit(KindRejected, "")
		held = read("after a rejection", held, true)
		if held.Failing == nil || held.ConsecutiveFailures != 1 {
			t.Fatalf("failing %+v, %d failures after a rejection at warn_after 1", held.Failing, held.ConsecutiveFailures)
		}
		commit(KindSkip, ids[1]) // moves the cursor alone: the lag changes, not the card
		held = read("after a skip", held, false)

		// Pending: a check that did not pass is stored with no channel event.
		if _, err := st.Repend(ctx, r, PendingCheck{Message: "first"}, time.Hour); err != nil {
			t.Fatal(err)
		}
		held = read("after repend", held, true)
		if _, err := st.SetupChecked(ctx, r, false, PendingCheck{Message: "the role is missing"}, time.Hour); err != nil {
			t.Fatal(err)
		}
		held = read("a pending destination's check", held, true)
		if held.Pending == nil || held.Pending.Message != "the role is missing" {
			t.Fatalf("pending %+v", held.Pending)
		}

		// Deleted, its lease fields left: unknown. Made again with the same id and no
		// event (a replica's first load): its new state is read.
		if err := st.Forget(ctx, r); err != nil {
			t.Fatal(err)
		}
		if n, _ := st.rdb.HLen(ctx, destKey(r.Account, r.ID)).Result(); n == 0 {
			t.Fatal("Forget left no lease field: the case is not tested")
		}
		if _, err := st.ReadCard(ctx, r, held); !errors.Is(err, destination.ErrNotFound) {
			t.Fatalf("deleted: %v, want destination.ErrNotFound", err)
		}
		time.Sleep(2 * time.Millisecond) // a new created_at
		if _, err := st.Ensure(ctx, r, "ext-2", "fp", time.Hour); err != nil {
			t.Fatal(err)
		}
		if seq, _ := st.ChannelSequence(ctx, r.Account, DestinationChannel(r.ID)); seq != held.Sequence {
			t.Fatalf("the channel's counter moved (%d, was %d): the case is not tested", seq, held.Sequence)
		}
		held = read("made again", held, true)
		if held.ExternalID != "ext-2" {
			t.Fatalf("external id %q made again", held.ExternalID)
		}
	})
}

// TestReadCardIsOneRoundTrip: a card's read, lag included, is one command sent to
// Redis (once the script is loaded), and runs one script there.
func TestReadCardIsOneRoundTrip(t *testing.T) {
	onEachRedis(t, func(t *testing.T, st *Store) {
		ctx := context.Background()
		r := Ref{Account: "acct_card_rt_" + strconv.FormatInt(time.Now().UnixNano(), 36), ID: "orders", Connector: "eventbridge"}
		activeWithLease(t, st, r)
		first, err := st.ReadCard(ctx, r, nil) // loads the script
		if err != nil {
			t.Fatal(err)
		}
		counter := &testpeer.RoundTrips{}
		st.rdb.AddHook(counter)
		var node redis.UniversalClient = st.rdb
		if c, ok := st.rdb.(*redis.ClusterClient); ok {
			m, err := c.MasterForKey(ctx, destKey(r.Account, r.ID))
			if err != nil {
				t.Fatal(err)
			}
			node = m
		}
		before := commandCalls(t, node)
		for _, held := range []*State{nil, first.State} {
			counter.N.Store(0)
			if _, err := st.ReadCard(ctx, r, held); err != nil {
				t.Fatal(err)
			}
			if n := counter.N.Load(); n != 1 {
				t.Fatalf("held %v: %d round trips, want 1", held != nil, n)
			}
		}
		after := commandCalls(t, node)
		if d := after["evalsha"] - before["evalsha"]; d != 2 {
			t.Fatalf("%d EVALSHA on the account's node for two reads, want 2", d)
		}
		// HGETALL runs inside the script (commandstats counts it) only for the read
		// that held no state.
		if d := after["hgetall"] - before["hgetall"]; d != 1 {
			t.Fatalf("%d HGETALL for a read with no state held and one with it, want 1", d)
		}
		for _, cmd := range []string{"eval", "multi", "exec"} {
			if d := after[cmd] - before[cmd]; d != 0 {
				t.Fatalf("%d %s besides the script", d, cmd)
			}
		}
	})
}
