package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/mercamap/relay/internal/testpeer"
)

func TestAnEventForTwoAccountsInDifferentSlotsIsStoredOnceInEach(t *testing.T) {
	onEachRedis(t, func(t *testing.T, st *Store) {
		ctx := context.Background()
		accts := []string{"acct_north", "acct_south"}
		if slot(logKey(accts[0])) == slot(logKey(accts[1])) {
			t.Fatal("the test needs accounts in two slots")
		}
		a, _ := st.masterFor(ctx, logKey(accts[0]))
		b, _ := st.masterFor(ctx, logKey(accts[1]))
		if _, cluster := st.rdb.(interface{ ReloadState(context.Context) }); cluster && a == b {
			t.Fatal("on the cluster the test needs accounts on two masters")
		}
		ev := Append{Entry: Entry{EventID: "fetcher.job.completed.1", Type: "job.completed", Data: []byte(`{"jobId":"1"}`)}, Accounts: accts}
		first, err := st.AppendBatch(ctx, []Append{ev}, time.Hour, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if len(first[0]) != 2 || first[0][0] == "" || first[0][1] == "" {
			t.Fatalf("first append: %v, want a log id in each account", first)
		}
		// The broker redelivers it (the ack was lost): each account has it once still.
		again, err := st.AppendBatch(ctx, []Append{ev}, time.Hour, time.Hour)
		if err != nil || !again[0].Duplicate() {
			t.Fatalf("second append: %v, %v; want a duplicate in both accounts", again, err)
		}
		for i, acct := range accts {
			got, err := st.ReadLog(ctx, acct, "0", 10)
			if err != nil || len(got) != 1 || got[0].ID != first[0][i] || got[0].EventID != ev.Entry.EventID {
				t.Fatalf("log of %s: %+v, %v; want the event once", acct, got, err)
			}
		}
	})
}

func TestAnAppendIsNotDoneUntilAReplicaHoldsIt(t *testing.T) {
	c := testpeer.StartRedisCluster(t)
	st := open(t, Options{URL: c.URL(), MinReplicas: 1})
	ctx := context.Background()
	ev := func(id string) []Append {
		return []Append{{Entry: Entry{EventID: id, Type: "job.completed", Data: []byte(`{}`)}, Accounts: []string{"acct_1"}}}
	}
	if _, err := st.AppendBatch(ctx, ev("ev-1"), time.Hour, time.Hour); err != nil {
		t.Fatalf("with its replica in sync: %v", err)
	}

	// The replica holds still: the master stores the event, but the append is not done.
	resume := c.Pause(t, c.ReplicaOf(t, logKey("acct_1")))
	_, err := st.AppendBatch(ctx, ev("ev-2"), time.Hour, time.Hour)
	var nr *NotReplicatedError
	if !errors.As(err, &nr) || nr.Acked != 0 || nr.Want != 1 {
		t.Fatalf("append while the replica is paused: %v, want NotReplicatedError 0 of 1", err)
	}
	// Redelivered once the replica is back: a duplicate, and done only now that the
	// replica has the first write too (the duplicate's marker write follows it).
	resume()
	deadline := time.Now().Add(20 * time.Second)
	for {
		got, err := st.AppendBatch(ctx, ev("ev-2"), time.Hour, time.Hour)
		if err == nil {
			if !got[0].Duplicate() {
				t.Fatalf("redelivered after the pause: %v, want the duplicate of the stored event", got)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("append after the replica came back: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestLeaseAndCommitFenceAcrossAFailover(t *testing.T) {
	c := testpeer.StartRedisCluster(t)
	st := open(t, Options{URL: c.URL(), MinReplicas: 1})
	ctx := context.Background()
	r := Ref{Account: "acct_1", ID: "orders", Connector: "eventbridge"}
	if _, err := st.Ensure(ctx, r, "ext-1", "fp", time.Hour); err != nil {
		t.Fatal(err)
	}
	tokA, err := st.AcquireLease(ctx, r, "replica-a", time.Minute)
	if err != nil || tokA == 0 {
		t.Fatalf("a acquires: %d, %v", tokA, err)
	}
	stored, err := st.AppendBatch(ctx, []Append{{Entry: Entry{EventID: "ev-1", Data: []byte(`{}`)}, Accounts: []string{r.Account}}}, time.Hour, time.Hour)
	if err != nil {
		t.Fatal(err)
	}

	killed := c.KillMasterOf(t, destKey(r.Account, r.ID))
	if now := c.MasterOf(t, destKey(r.Account, r.ID)); now == killed {
		t.Fatalf("the slot is still on the killed master %s", killed)
	}
	// The promoted replica has no replica of its own: no lease is handed out (nor any
	// append acked) until one holds it.
	var nr *NotReplicatedError
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := st.AcquireLease(ctx, r, "replica-a", time.Minute)
		if errors.As(err, &nr) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a renews on a master without a replica: %v, want NotReplicatedError", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.Restart(t, killed) // it comes back as the new master's replica

	// retry runs op until it stops failing on the failover (the client learns the new
	// master within a second or two).
	retry := func(op func() error) error {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			err := op()
			if err == nil || errors.Is(err, ErrStaleLease) || time.Now().After(deadline) {
				return err
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	// The acked append and a's lease and token survived on the promoted replica: b
	// cannot take the lease, and a still commits.
	var tokB int64
	if err := retry(func() (err error) { tokB, err = st.AcquireLease(ctx, r, "replica-b", time.Minute); return err }); err != nil || tokB != 0 {
		t.Fatalf("b acquires while a holds the lease: %d, %v; want 0", tokB, err)
	}
	if got, err := st.ReadLog(ctx, r.Account, "0", 10); err != nil || len(got) != 1 || got[0].ID != stored[0][0] {
		t.Fatalf("log after the failover: %+v, %v; want the acked event", got, err)
	}
	commit := func(token int64) error {
		_, err := st.Commit(ctx, Commit{Ref: r, Token: token, Kind: KindDelivered, Cursor: stored[0][0], EventID: "ev-1",
			DisableAfter: 20, ChannelRetention: time.Hour, AttemptsRetention: time.Hour})
		return err
	}
	if err := retry(func() error { return commit(tokA) }); err != nil {
		t.Fatalf("a commits after the failover: %v", err)
	}

	// a's lease ends (released here; it would run out the same way): b takes it with a
	// newer token, and a's commits are fenced off.
	held, err := st.AcquireLeases(ctx, []Ref{r}, "replica-a", time.Minute)
	if err != nil || held[0].Token != tokA {
		t.Fatalf("a takes its lease again: %+v, %v", held, err)
	}
	if err := st.ReleaseHolds(ctx, []Hold{{Account: r.Account, Gen: held[0].Gen}}, "replica-a"); err != nil {
		t.Fatal(err)
	}
	if tokB, err = st.AcquireLease(ctx, r, "replica-b", time.Minute); err != nil {
		t.Fatal(err)
	}
	if tokB <= tokA {
		t.Fatalf("b's token %d is not newer than a's %d", tokB, tokA)
	}
	if err := commit(tokA); !errors.Is(err, ErrStaleLease) {
		t.Fatalf("a commits with its old token: %v, want ErrStaleLease", err)
	}
	if err := commit(tokB); err != nil {
		t.Fatalf("b commits: %v", err)
	}
}
