package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestChannelsAndAttemptLogsKeepTheirNewestByCount: 2,000 replays of a paused
// destination, each an attempt line and an event on each of its two channels, all
// within the age bounds: the channels and the attempt log keep about their newest 500
// (the count bound), gap-free; a cursor older than what a channel keeps is expired,
// one just before it is not.
func TestChannelsAndAttemptLogsKeepTheirNewestByCount(t *testing.T) {
	onEachRedis(t, func(t *testing.T, st *Store) {
		ctx := context.Background()
		st.bounds = Bounds{ChannelEvents: 500, Attempts: 500}
		r := Ref{Account: "acct_bounds", ID: "orders", Connector: "eventbridge"}
		if _, err := st.Ensure(ctx, r, "ext-1", "fp", time.Hour); err != nil {
			t.Fatal(err)
		}
		const asks = 2000
		for i := range asks {
			if _, err := st.Replay(ctx, Replay{Ref: r, Point: ReplayPoint{From: time.Now().Add(-time.Minute)},
				Oldest: time.Now().Add(-time.Hour), ChannelRetention: time.Hour, AttemptsRetention: time.Hour}); err != nil {
				t.Fatalf("replay %d: %v", i, err)
			}
		}
		// MAXLEN ~ drops whole nodes of 100 entries: at least the bound, at most a node more.
		for _, key := range []string{chanKey(r.Account, DestinationChannel(r.ID)), chanKey(r.Account, AccountChannel(r.Account)),
			attemptsKey(r.Account, r.ID)} {
			if n := st.rdb.XLen(ctx, key).Val(); n < 500 || n > 600 {
				t.Errorf("%s keeps %d entries after %d appends; want about 500", key, n, asks)
			}
		}
		channel := DestinationChannel(r.ID)
		page, err := st.ReadChannel(ctx, r.Account, channel, 0, 1000)
		if err != nil || page.Last != asks || len(page.Events) == 0 || page.Events[len(page.Events)-1].Sequence != asks {
			t.Fatalf("after=0: %d events, last %d, %v", len(page.Events), page.Last, err)
		}
		first := page.Events[0].Sequence
		for i, ev := range page.Events {
			if ev.Sequence != first+int64(i) {
				t.Fatalf("event %d has sequence %d: the kept events have a gap", i, ev.Sequence)
			}
		}
		if p, err := st.ReadChannel(ctx, r.Account, channel, first-2, 10); err != nil || !p.Expired {
			t.Errorf("cursor %d, before what the channel keeps: expired=%v, %v; want expired", first-2, p.Expired, err)
		}
		if p, err := st.ReadChannel(ctx, r.Account, channel, first-1, 10); err != nil || p.Expired || p.Events[0].Sequence != first {
			t.Errorf("cursor %d, just before what the channel keeps: %+v, %v; want its events from %d", first-1, p, err, first)
		}
		lines, err := st.Attempts(ctx, r, 0, 1000)
		if err != nil || len(lines) < 500 || lines[0].N != asks || lines[len(lines)-1].N != asks-int64(len(lines))+1 {
			t.Errorf("attempt log: %d lines from %d, %v; want the newest, gap-free", len(lines), lines[0].N, err)
		}
	})
}

// TestAReplayAskedWhileOneRunsReplacesItInsteadOfStartingOver walks a replay of ten
// events through what a customer may ask while it runs; each answer is the point
// delivery goes on after, and only a point before the running replay's moves it back.
func TestAReplayAskedWhileOneRunsReplacesItInsteadOfStartingOver(t *testing.T) {
	onEachRedis(t, func(t *testing.T, st *Store) {
		ctx := context.Background()
		r := Ref{Account: "acct_inflight", ID: "orders", Connector: "eventbridge"}
		if _, err := st.Ensure(ctx, r, "ext-1", "fp", time.Hour); err != nil {
			t.Fatal(err)
		}
		if _, err := st.SetupChecked(ctx, r, true, PendingCheck{}, time.Hour); err != nil {
			t.Fatal(err)
		}
		token, err := st.AcquireLease(ctx, r, "replica", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		var ids, logIDs []string
		for i := range 10 {
			id := fmt.Sprintf("ev-%d", i)
			got, err := st.AppendBatch(ctx, []Append{{Accounts: []string{r.Account},
				Entry: Entry{EventID: id, Type: "job.completed", Data: []byte(`{}`)}}}, time.Hour, time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			ids, logIDs = append(ids, id), append(logIDs, got[0][0])
		}
		deliveredTo := func(i int) { // the lease holder's commits move the cursor to log entry i
			t.Helper()
			if _, err := st.Commit(ctx, Commit{Ref: r, Token: token, Kind: KindDelivered, Cursor: logIDs[i], EventID: ids[i],
				DisableAfter: 20, ChannelRetention: time.Hour, AttemptsRetention: time.Hour}); err != nil {
				t.Fatal(err)
			}
		}
		state := func() State {
			t.Helper()
			s, err := st.LoadState(ctx, r)
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
		replay := func(after int, wantCursor int, wantRestart bool, say string) {
			t.Helper()
			before := state().Epoch
			res, err := st.Replay(ctx, Replay{Ref: r, Point: ReplayPoint{AfterEvent: ids[after]}, Oldest: time.Now().Add(-time.Hour),
				ChannelRetention: time.Hour, AttemptsRetention: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			s := state()
			if res.Cursor != logIDs[wantCursor] || s.Cursor != logIDs[wantCursor] || (s.Epoch != before) != wantRestart {
				t.Fatalf("replay after %s: answered %s, cursor %s, epoch %s→%s; want delivery after %s (restart: %v)",
					ids[after], res.Cursor, s.Cursor, before, s.Epoch, ids[wantCursor], wantRestart)
			}
			line, err := st.Attempts(ctx, r, 0, 1)
			if err != nil || !strings.Contains(line[0].Message, say) {
				t.Fatalf("replay after %s: attempt line %+v, %v; want it to say %q", ids[after], line, err, say)
			}
		}
		deliveredTo(9)
		replay(2, 2, true, "replay after event ev-2 asked for")
		deliveredTo(5) // the replay has resent ev-3..ev-5
		replay(2, 5, false, "it replaces the replay after "+logIDs[2]+" not yet done: delivery goes on after "+logIDs[5])
		replay(4, 5, false, "it replaces the replay")
		replay(7, 5, false, "it replaces the replay") // ev-8 on comes anyway
		replay(0, 0, true, "it replaces the replay after "+logIDs[2])
		deliveredTo(9) // done: the next replay starts over
		replay(3, 3, true, "replay after event ev-3 asked for")

		// Paused mid-replay, asked again, activated: the replay goes on where it was.
		deliveredTo(6)
		if _, err := st.ChangeStatus(ctx, StatusChange{Ref: r, Status: Paused, ChannelRetention: time.Hour}); err != nil {
			t.Fatal(err)
		}
		if res, err := st.Replay(ctx, Replay{Ref: r, Point: ReplayPoint{AfterEvent: ids[4]}, Oldest: time.Now().Add(-time.Hour),
			ChannelRetention: time.Hour}); err != nil || !res.Pending {
			t.Fatalf("replay while paused: %+v, %v", res, err)
		}
		if _, err := st.ChangeStatus(ctx, StatusChange{Ref: r, Status: Active, ChannelRetention: time.Hour}); err != nil {
			t.Fatal(err)
		}
		if s := state(); s.Cursor != logIDs[6] || s.Status != Active {
			t.Fatalf("activated after a replay asked while paused mid-replay: %s at %s; want active after %s", s.Status, s.Cursor, ids[6])
		}

		// Resuming an active destination is an error, not a no-op.
		for _, since := range []string{SincePaused, SinceDisabled} {
			_, err := st.ChangeStatus(ctx, StatusChange{Ref: r, Status: Active, Since: since, ChannelRetention: time.Hour})
			var mismatch ErrSinceMismatch
			if !errors.As(err, &mismatch) || mismatch.Status != Active {
				t.Errorf("activate %s of an active destination: %v; want ErrSinceMismatch{active}", since, err)
			}
		}
	})
}
