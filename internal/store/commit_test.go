package store

import (
	"context"
	"errors"
	"testing"
	"time"
)

// activeWithLease makes r an active destination with two events in its log, and takes
// its lease: the token and the two log ids.
func activeWithLease(t *testing.T, st *Store, r Ref) (int64, [2]string) {
	t.Helper()
	ctx := context.Background()
	if _, err := st.Ensure(ctx, r, "ext-1", "fp", time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := st.SetupChecked(ctx, r, true, PendingCheck{}, time.Hour); err != nil {
		t.Fatal(err)
	}
	token, err := st.AcquireLease(ctx, r, "replica", time.Minute)
	if err != nil || token == 0 {
		t.Fatalf("lease: %d, %v", token, err)
	}
	var ids [2]string
	for i := range ids {
		got, err := st.AppendBatch(ctx, []Append{{Accounts: []string{r.Account},
			Entry: Entry{EventID: r.ID + "-" + string(rune('a'+i)), Type: "job.completed", Data: []byte(`{}`)}}}, time.Hour, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = got[0][0]
	}
	return token, ids
}

// TestACommitThatBeginsTheNextWriteHoldsTheWriteFence: the commit of one write that also
// begins the next (Commit.Next, one script) gives the same answers as BeginWrite after
// the commit would: it marks the next write in flight, so a pause right after it says a
// write may still land; after a pause, or when the commit itself disables the
// destination, it starts nothing; a stale token neither commits nor begins.
func TestACommitThatBeginsTheNextWriteHoldsTheWriteFence(t *testing.T) {
	onEachRedis(t, func(t *testing.T, st *Store) {
		ctx := context.Background()
		commit := func(r Ref, token int64, kind, cursor, next string, disableAfter int) (Committed, error) {
			return st.Commit(ctx, Commit{Ref: r, Token: token, Kind: kind, Cursor: cursor, Wrote: cursor, Next: next,
				EventID: "ev", DisableAfter: disableAfter, ChannelRetention: time.Hour, AttemptsRetention: time.Hour})
		}
		pause := func(r Ref) StatusResult {
			t.Helper()
			res, err := st.ChangeStatus(ctx, StatusChange{Ref: r, Status: Paused, ChannelRetention: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			return res
		}

		// Active: the commit ends write 1 and begins write 2.
		r := Ref{Account: "acct_fence", ID: "orders", Connector: "eventbridge"}
		token, ids := activeWithLease(t, st, r)
		if began, err := st.BeginWrite(ctx, r, token, ids[0], ""); err != nil || began != "ok" {
			t.Fatalf("begin write 1: %q, %v", began, err)
		}
		res, err := commit(r, token, KindDelivered, ids[0], ids[1], 20)
		if err != nil || res.Began != "ok" || res.Cursor != ids[0] || res.Status != Active {
			t.Fatalf("commit 1 beginning 2: %+v, %v; want began ok, cursor at 1", res, err)
		}
		if p := pause(r); !p.Changed || !p.WriteInFlight {
			t.Fatalf("pause after write 2 began: %+v, want changed with a write in flight", p)
		}
		// Write 2 ends after the pause: committed, and nothing more begins.
		res, err = commit(r, token, KindDelivered, ids[1], "", 20)
		if err != nil || res.Began != "" || res.Cursor != ids[1] {
			t.Fatalf("commit 2: %+v, %v", res, err)
		}
		if p := pause(r); p.WriteInFlight {
			t.Fatalf("after write 2's commit: %+v, want no write in flight", p)
		}

		// Paused first: the commit is recorded, the next write does not start.
		r2 := Ref{Account: "acct_fence", ID: "audit", Connector: "eventbridge"}
		token, ids = activeWithLease(t, st, r2)
		if _, err := st.BeginWrite(ctx, r2, token, ids[0], ""); err != nil {
			t.Fatal(err)
		}
		if p := pause(r2); !p.WriteInFlight {
			t.Fatalf("pause during write 1: %+v, want a write in flight", p)
		}
		res, err = commit(r2, token, KindDelivered, ids[0], ids[1], 20)
		if err != nil || res.Began != Paused || res.Cursor != ids[0] {
			t.Fatalf("commit 1 beginning 2 while paused: %+v, %v; want began paused, cursor at 1", res, err)
		}
		if p := pause(r2); p.WriteInFlight {
			t.Fatalf("after the refused begin: %+v, want no write in flight", p)
		}

		// The commit's own rejection disables the destination: the next write is refused.
		r3 := Ref{Account: "acct_fence", ID: "billing", Connector: "eventbridge"}
		token, ids = activeWithLease(t, st, r3)
		res, err = commit(r3, token, KindRejected, ids[0], ids[1], 1)
		if err != nil || !res.Disabled || res.Began != Disabled {
			t.Fatalf("a disabling commit beginning 2: %+v, %v; want disabled, began disabled", res, err)
		}

		// A stale token: nothing is committed, nothing begins.
		r4 := Ref{Account: "acct_fence", ID: "crm", Connector: "eventbridge"}
		token, ids = activeWithLease(t, st, r4)
		if _, err := commit(r4, token+1, KindDelivered, ids[0], ids[1], 20); !errors.Is(err, ErrStaleLease) {
			t.Fatalf("stale token: %v, want ErrStaleLease", err)
		}
		if p := pause(r4); p.WriteInFlight {
			t.Fatalf("after a stale commit: %+v, want no write in flight", p)
		}
		if s, _ := st.LoadState(ctx, r4); s.Cursor == ids[0] {
			t.Fatalf("a stale commit moved the cursor to %s", s.Cursor)
		}
	})
}
