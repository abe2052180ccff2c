package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mercamap/relay/internal/destination"
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
// answer (Ack) reaches the asker (WaitAck). The holder's renewal of the account says
// the control stream moved, and the destination's control version is the one the pause
// raised. Without a holder, nothing is awaited.
func TestAPauseNamesTheLeaseHolderAndReachesItOnTheControlStream(t *testing.T) {
	onEachRedis(t, func(t *testing.T, st *Store) {
		ctx := context.Background()
		r := Ref{Account: "acct_ctl", ID: "orders", Connector: "eventbridge"}
		token, _ := activeWithLease(t, st, r)
		before, err := st.LoadState(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		held, err := st.AcquireLeases(ctx, []Ref{r}, "replica", time.Minute)
		if err != nil || held[0].Token != token {
			t.Fatalf("the holder takes its lease again: %+v, %v; want token %d", held, err, token)
		}
		hold := []Hold{{Account: r.Account, Gen: held[0].Gen}}
		was, err := st.RenewHolds(ctx, hold, []string{""}, "replica", time.Minute)
		if err != nil || !was[0].Held {
			t.Fatalf("renewal before the pause: %+v, %v", was, err)
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
		now, err := st.RenewHolds(ctx, hold, []string{was[0].LastControl}, "replica", time.Minute)
		if err != nil || !now[0].Held || now[0].LastControl == was[0].LastControl || now[0].Every || !slices.Equal(now[0].Changed, []string{r.ID}) {
			t.Fatalf("renewal after the pause: %+v, %v; want held, the control stream past %q naming %s alone", now, err, was[0].LastControl, r.ID)
		}
		if v, err := st.ControlVersions(ctx, []Ref{r}); err != nil || v[0] != ctl.Version {
			t.Fatalf("control version: %v, %v; want %d", v, err, ctl.Version)
		}
		// More changes than a renewal names: it says every destination may have changed.
		for range 300 {
			if err := st.Notify(ctx, r, ControlCount); err != nil {
				t.Fatal(err)
			}
		}
		many, err := st.RenewHolds(ctx, hold, []string{now[0].LastControl}, "replica", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if !many[0].Every {
			t.Fatalf("renewal after 300 changes: %+v; want every destination named as changed", many[0])
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

// TestAReplicasLeasesOfAnAccountAreRenewedInOneScriptCall: 600 leases of one account
// are taken, 256 to a script call, each with its own token; renewing them is one call,
// however many there are; another owner gets none while the hold lives, and all of
// them, with newer tokens, once it is released or has lapsed. A lapsed hold's renewal
// says so, and its owner takes nothing back that another took.
func TestAReplicasLeasesOfAnAccountAreRenewedInOneScriptCall(t *testing.T) {
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
		tokens := func(ls []Lease) []int64 {
			out := make([]int64, len(ls))
			for i, l := range ls {
				out[i] = l.Token
			}
			return out
		}
		taken, err := st.AcquireLeases(ctx, refs, "replica-a", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		for i, l := range taken {
			if l.Token == 0 || l.Gen != taken[0].Gen {
				t.Fatalf("lease %d: %+v (the first: %+v)", i, l, taken[0])
			}
		}
		hold := []Hold{{Account: acct, Gen: taken[0].Gen}}
		if _, err := st.RenewHolds(ctx, hold, []string{""}, "replica-a", time.Minute); err != nil { // the script is loaded by now
			t.Fatal(err)
		}
		before := calls()
		renewed, err := st.RenewHolds(ctx, hold, []string{""}, "replica-a", time.Minute)
		if err != nil || !renewed[0].Held {
			t.Fatalf("renewal: %+v, %v", renewed, err)
		}
		if n := calls() - before; n != 1 {
			t.Errorf("renewing 600 leases of one account made %d script calls, want 1", n)
		}
		again, err := st.AcquireLeases(ctx, refs, "replica-a", time.Minute)
		if err != nil || !slices.Equal(tokens(again), tokens(taken)) {
			t.Fatalf("the holder taking its leases again changed tokens: %v", err)
		}
		if other, err := st.AcquireLeases(ctx, refs[:10], "replica-b", time.Minute); err != nil || slices.ContainsFunc(other, func(l Lease) bool { return l.Token != 0 }) {
			t.Fatalf("another owner got held leases: %+v, %v", other, err)
		}

		// Ten freed one by one: another owner takes those ten, and none of the rest.
		var ten []Held
		for _, r := range refs[:10] {
			ten = append(ten, Held{Ref: r, Gen: taken[0].Gen})
		}
		if err := st.ReleaseLeases(ctx, ten, "replica-a"); err != nil {
			t.Fatal(err)
		}
		if got, err := st.AcquireLeases(ctx, refs[:20], "replica-c", time.Minute); err != nil ||
			slices.ContainsFunc(got[:10], func(l Lease) bool { return l.Token == 0 }) || slices.ContainsFunc(got[10:], func(l Lease) bool { return l.Token != 0 }) {
			t.Fatalf("after freeing ten, another owner took %+v, %v; want exactly those ten", got, err)
		}

		// Released: another owner takes every one at once, each with a newer token.
		if err := st.ReleaseHolds(ctx, hold, "replica-a"); err != nil {
			t.Fatal(err)
		}
		b, err := st.AcquireLeases(ctx, refs, "replica-b", 50*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		for i := range refs {
			if i < 10 {
				continue // c holds those
			}
			if b[i].Token <= taken[i].Token {
				t.Fatalf("lease %d after the release: %+v, want a token after %d", i, b[i], taken[i].Token)
			}
		}
		// Lapsed: b's hold runs out; a takes them back, newer again, and b's renewal says lost.
		var a []Lease
		deadline := time.Now().Add(5 * time.Second)
		for a == nil || a[10].Token == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("b's hold did not lapse: d010 %+v", a[10])
			}
			time.Sleep(20 * time.Millisecond)
			if a, err = st.AcquireLeases(ctx, refs, "replica-a", time.Minute); err != nil {
				t.Fatal(err)
			}
		}
		for i := 10; i < len(refs); i++ {
			if a[i].Token <= b[i].Token {
				t.Fatalf("lease %d after b lapsed: %+v, want a token after %d", i, a[i], b[i].Token)
			}
		}
		lost, err := st.RenewHolds(ctx, []Hold{{Account: acct, Gen: b[0].Gen}}, []string{""}, "replica-b", time.Minute)
		if err != nil || lost[0].Held {
			t.Fatalf("b's renewal of its lapsed hold: %+v, %v; want not held", lost, err)
		}
		if back, err := st.AcquireLeases(ctx, refs[10:20], "replica-b", time.Minute); err != nil || slices.ContainsFunc(back, func(l Lease) bool { return l.Token != 0 }) {
			t.Fatalf("b took back leases a holds: %+v, %v", back, err)
		}
	})
}

// TestALeaseTakenBeforeACreatesForgetStaysItsHolders: a replica reads the registry's
// record of a new destination and takes its lease before the creating replica's
// Forget clears what an earlier destination of the id left. The lease stays the first
// replica's (no second replica takes it), its state reads as none until the create
// stores it, and a later holder's token is greater than every one given before: no two
// holders of the id share a token.
func TestALeaseTakenBeforeACreatesForgetStaysItsHolders(t *testing.T) {
	onEachRedis(t, func(t *testing.T, st *Store) {
		ctx := context.Background()
		r := Ref{Account: "acct_forget" + strconv.FormatInt(time.Now().UnixNano(), 36), ID: "api-bus", Connector: "eventbridge"}
		old, _ := activeWithLease(t, st, r) // an earlier destination of the id, held by "replica"
		if err := st.ReleaseLeases(ctx, []Held{{Ref: r, Gen: mustGen(t, st, r, "replica")}}, "replica"); err != nil {
			t.Fatal(err)
		}
		first, err := st.AcquireLeases(ctx, []Ref{r}, "replica-b", time.Minute)
		if err != nil || first[0].Token <= old {
			t.Fatalf("replica-b's lease: %+v, %v; want a token past %d", first, err, old)
		}
		if err := st.Forget(ctx, r); err != nil {
			t.Fatal(err)
		}
		if _, err := st.LoadState(ctx, r); !errors.Is(err, destination.ErrNotFound) {
			t.Fatalf("state after Forget: %v, want destination.ErrNotFound", err)
		}
		if owner, tok, err := st.LeaseHolder(ctx, r); err != nil || owner != "replica-b" || tok != first[0].Token+1 {
			t.Fatalf("holder after Forget: %q %d %v; want replica-b, its token moved on to %d", owner, tok, err, first[0].Token+1)
		}
		if ttl, err := st.rdb.PTTL(ctx, destKey(r.Account, r.ID)).Result(); err != nil || ttl <= 0 {
			t.Fatalf("a forgotten destination's lease fields live %v (%v), want them to expire", ttl, err)
		}
		second, err := st.AcquireLeases(ctx, []Ref{r}, "replica-c", time.Minute)
		if err != nil || second[0].Token != 0 {
			t.Fatalf("replica-c took the lease replica-b holds: %+v, %v", second, err)
		}
		if _, err := st.Ensure(ctx, r, "ext-2", "fp", time.Hour); err != nil {
			t.Fatal(err)
		}
		if s, err := st.LoadState(ctx, r); err != nil || s.Status != Pending || s.ExternalID != "ext-2" {
			t.Fatalf("state after the create's Ensure: %+v, %v; want pending with the new ExternalId", s, err)
		}
		if ttl, err := st.rdb.PTTL(ctx, destKey(r.Account, r.ID)).Result(); err != nil || ttl != -1 {
			t.Fatalf("the destination made again expires in %v (%v), want it kept", ttl, err)
		}
		// A holder from before the Forget commits nothing: not the deleted destination's
		// late commit, nor the early taker's (it stops and frees the lease).
		for _, tok := range []int64{old, first[0].Token} {
			if _, err := st.Commit(ctx, Commit{Ref: r, Token: tok, Kind: KindDelivered, EventID: "late", Message: "m",
				DisableAfter: 20, ChannelRetention: time.Hour, AttemptsRetention: time.Hour}); !errors.Is(err, ErrStaleLease) {
				t.Fatalf("a commit with token %d from before the Forget: %v, want ErrStaleLease", tok, err)
			}
		}
		if err := st.ReleaseLeases(ctx, []Held{{Ref: r, Gen: first[0].Gen}}, "replica-b"); err != nil {
			t.Fatal(err)
		}
		third, err := st.AcquireLeases(ctx, []Ref{r}, "replica-c", time.Minute)
		if err != nil || third[0].Token <= first[0].Token {
			t.Fatalf("replica-c's lease once freed: %+v, %v; want a token past %d", third, err, first[0].Token)
		}
	})
}

// mustGen is owner's gen of its hold of r's account, from the destination's holder field.
func mustGen(t *testing.T, st *Store, r Ref, owner string) string {
	t.Helper()
	h, err := st.rdb.HGet(context.Background(), destKey(r.Account, r.ID), "holder").Result()
	if err != nil || !strings.HasPrefix(h, owner+"|") {
		t.Fatalf("holder of %s: %q, %v; want %s's", r.ID, h, err, owner)
	}
	return strings.TrimPrefix(h, owner+"|")
}
