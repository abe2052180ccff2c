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

// TestABatchOfCommitsRecordsEachInOrderAndRefusesAStaleToken: the delivery engine's
// group commit (CommitBatch, one script) records several outcomes of one account in
// order, each seeing the one before (the cursor ends at the last, the count of
// rejections in a row climbs and resets), and a stale token refuses only its own commit.
func TestABatchOfCommitsRecordsEachInOrderAndRefusesAStaleToken(t *testing.T) {
	onEachRedis(t, func(t *testing.T, st *Store) {
		ctx := context.Background()
		r := Ref{Account: "acct_batch", ID: "orders", Connector: "eventbridge"}
		token, ids := activeWithLease(t, st, r)
		r2 := Ref{Account: "acct_batch", ID: "audit", Connector: "eventbridge"}
		token2, _ := activeWithLease(t, st, r2)
		c := func(r Ref, token int64, kind, cursor string) Commit {
			return Commit{Ref: r, Token: token, Kind: kind, Cursor: cursor, EventID: "ev-" + cursor, DisableAfter: 20,
				ChannelRetention: time.Hour, AttemptsRetention: time.Hour}
		}
		res, errs, err := st.CommitBatch(ctx, []Commit{
			c(r, token, KindRejected, ids[0]),
			c(r2, token2+1, KindDelivered, ids[0]), // stale: another replica's token
			c(r, token, KindDelivered, ids[1]),
		})
		if err != nil {
			t.Fatal(err)
		}
		if errs[0] != nil || errs[2] != nil || !errors.Is(errs[1], ErrStaleLease) {
			t.Fatalf("errors %v, want only the second stale", errs)
		}
		if res[0].Cursor != ids[0] || res[2].Cursor != ids[1] || res[2].Status != Active {
			t.Fatalf("answers %+v", res)
		}
		s, err := st.LoadState(ctx, r)
		if err != nil || s.Cursor != ids[1] || s.ConsecutiveFailures != 0 || s.LastDelivery == nil || s.LastFailure == nil {
			t.Fatalf("state after the batch: %+v, %v; want cursor at the second, count reset by the delivery", s, err)
		}
		if s2, _ := st.LoadState(ctx, r2); s2.Cursor == ids[0] {
			t.Fatalf("the stale commit moved the cursor")
		}
		attempts, _ := st.Client().XLen(ctx, attemptsKey(r.Account, r.ID)).Result()
		if attempts != 2 {
			t.Fatalf("%d attempt lines, want 2", attempts)
		}
	})
}

// TestAPauseNamesTheLeaseHolderAndReachesItOnTheControlStream: a pause of a destination
// whose lease is held returns the holder's token and an ack to wait on, and appends a
// control entry that a follower of the account reads with its log; the holder's
// answer (Ack) reaches the asker (WaitAck). The lease renewal returns the control
// version the pause raised. Without a holder, nothing is awaited.
func TestAPauseNamesTheLeaseHolderAndReachesItOnTheControlStream(t *testing.T) {
	onEachRedis(t, func(t *testing.T, st *Store) {
		ctx := context.Background()
		r := Ref{Account: "acct_ctl", ID: "orders", Connector: "eventbridge"}
		token, _ := activeWithLease(t, st, r)
		before, err := st.LoadState(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		at := map[string]FollowPoint{}
		if at[r.Account], err = st.FollowStart(ctx, r.Account); err != nil {
			t.Fatal(err)
		}
		res, err := st.ChangeStatus(ctx, StatusChange{Ref: r, Status: Paused, ChannelRetention: time.Hour})
		if err != nil || !res.Changed || res.Holder != token || res.Ack == "" {
			t.Fatalf("pause: %+v, %v; want the holder's token %d and an ack", res, err, token)
		}
		got, err := st.FollowLogs(ctx, at, time.Second, 16)
		if err != nil || len(got.Controls) != 1 {
			t.Fatalf("follow: %+v, %v; want one control entry", got, err)
		}
		ctl := got.Controls[0]
		if ctl.Destination != r.ID || ctl.Kind != ControlStatus || ctl.Ack != res.Ack || ctl.Version <= before.Control {
			t.Fatalf("control entry %+v", ctl)
		}
		leases, err := st.RenewLeases(ctx, []Ref{r}, "replica", time.Minute)
		if err != nil || leases[0].Token != token || leases[0].Control != ctl.Version {
			t.Fatalf("renewal: %+v, %v; want token %d and control version %d", leases, err, token, ctl.Version)
		}
		if err := st.Ack(ctx, r.Account, ctl.Ack, token, true); err != nil {
			t.Fatal(err)
		}
		tok, inFlight, err := st.WaitAck(ctx, r.Account, res.Ack, time.Second)
		if err != nil || tok != token || !inFlight {
			t.Fatalf("ack: %d %v %v", tok, inFlight, err)
		}
		if _, _, err := st.WaitAck(ctx, r.Account, "nobody", 100*time.Millisecond); !errors.Is(err, ErrNoAck) {
			t.Fatalf("no answer: %v, want ErrNoAck", err)
		}

		free := Ref{Account: "acct_ctl", ID: "unleased", Connector: "eventbridge"}
		if _, err := st.Ensure(ctx, free, "ext-1", "fp", time.Hour); err != nil {
			t.Fatal(err)
		}
		if _, err := st.SetupChecked(ctx, free, true, PendingCheck{}, time.Hour); err != nil {
			t.Fatal(err)
		}
		if res, err := st.ChangeStatus(ctx, StatusChange{Ref: free, Status: Paused, ChannelRetention: time.Hour}); err != nil || res.Holder != 0 || res.Ack != "" {
			t.Fatalf("pause without a holder: %+v, %v; want nothing to wait for", res, err)
		}
	})
}

// TestLeasesOfAnAccountAreTakenAndRenewedInFewScriptCalls: 600 leases of one account
// are taken, then renewed, 256 to a script call (three calls), each answering
// its own token; another owner gets none of them.
func TestLeasesOfAnAccountAreTakenAndRenewedInFewScriptCalls(t *testing.T) {
	onEachRedis(t, func(t *testing.T, st *Store) {
		ctx := context.Background()
		acct := "acct_leases" + strconv.FormatInt(time.Now().UnixNano(), 36)
		refs := make([]Ref, 600)
		for i := range refs {
			refs[i] = Ref{Account: acct, ID: fmt.Sprintf("d%03d", i), Connector: "eventbridge"}
		}
		calls := func() int64 {
			var n int64
			_ = st.forEachMaster(ctx, func(ctx context.Context, m redis.UniversalClient) error {
				info, err := m.Info(ctx, "commandstats").Result()
				for _, line := range strings.Split(info, "\n") {
					if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && (k == "cmdstat_evalsha" || k == "cmdstat_eval") {
						c, _ := strconv.ParseInt(strings.TrimPrefix(strings.Split(v, ",")[0], "calls="), 10, 64)
						n += c
					}
				}
				return err
			})
			return n
		}
		taken, err := st.RenewLeases(ctx, refs, "replica-a", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		before := calls() // the script is loaded by now
		renewed, err := st.RenewLeases(ctx, refs, "replica-a", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if n := calls() - before; n != 3 {
			t.Errorf("renewing 600 leases made %d script calls, want 3 (256 leases a call)", n)
		}
		for i := range refs {
			if taken[i].Token == 0 || renewed[i].Token != taken[i].Token {
				t.Fatalf("lease %d: taken %+v, renewed %+v", i, taken[i], renewed[i])
			}
		}
		other, err := st.RenewLeases(ctx, refs[:10], "replica-b", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		for i, l := range other {
			if l.Token != 0 {
				t.Fatalf("another owner got lease %d: %+v", i, l)
			}
		}
	})
}
