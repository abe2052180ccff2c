package store

import (
	"context"
	"testing"
	"time"
)

func TestChannelsKeepGapFreeSequencesAndExpireOldCursors(t *testing.T) {
	onEachRedis(t, testChannelsKeepGapFreeSequencesAndExpireOldCursors)
}

func testChannelsKeepGapFreeSequencesAndExpireOldCursors(t *testing.T, st *Store) {
	ctx := context.Background()
	r := Ref{Account: "acct_1", ID: "orders"}
	if _, err := st.Ensure(ctx, r, "ext-1", "fp", time.Hour); err != nil {
		t.Fatal(err)
	}
	token, err := st.AcquireLease(ctx, r, "replica", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	commit := func(i int, retention time.Duration) {
		t.Helper()
		if _, err := st.Commit(ctx, Commit{Ref: r, Token: token, Kind: KindDelivered, EventID: "ev", DisableAfter: 20,
			ChannelRetention: retention, AttemptsRetention: time.Hour}); err != nil {
			t.Fatalf("commit %d: %v", i, err)
		}
	}
	for i := 1; i <= 31; i++ {
		commit(i, time.Hour)
	}
	page, err := st.ReadChannel(ctx, "acct_1", DestinationChannel("orders"), 0, 1000)
	if err != nil || len(page.Events) != 31 || page.Last != 31 {
		t.Fatalf("page = %d events, last %d, %v; want 31", len(page.Events), page.Last, err)
	}
	for i, ev := range page.Events {
		if ev.Sequence != int64(i+1) || ev.Type != "delivery.succeeded" {
			t.Fatalf("event %d = %d %s", i, ev.Sequence, ev.Type)
		}
	}
	// The 32nd event trims what is older than its retention (here: everything before it).
	time.Sleep(2 * time.Millisecond) // let the clock pass the older events' millisecond
	commit(32, time.Millisecond)
	if page, err = st.ReadChannel(ctx, "acct_1", DestinationChannel("orders"), 5, 10); err != nil || !page.Expired {
		t.Fatalf("cursor 5 after trimming: expired=%v, %v; want expired", page.Expired, err)
	}
	page, err = st.ReadChannel(ctx, "acct_1", DestinationChannel("orders"), 0, 10)
	if err != nil || len(page.Events) != 1 || page.Events[0].Sequence != 32 {
		t.Fatalf("after=0 replays from the first retained: %+v, %v", page.Events, err)
	}
	if page, err = st.ReadChannel(ctx, "acct_1", DestinationChannel("orders"), 31, 10); err != nil || page.Expired || len(page.Events) != 1 {
		t.Fatalf("cursor 31 (just before the retained event) must replay: %+v, %v", page, err)
	}
}
