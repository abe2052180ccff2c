package store

import (
	"context"
	"strconv"
	"testing"
	"time"
)

// The log keeps the replay window, and beyond it what the slowest destination has not
// delivered: entries older than the window go only once every destination passed them,
// the ordinal index with them, and one replica's trim stands for every replica a while.
func TestTheLogIsTrimmedByTheSlowestCursorBeyondTheReplayWindow(t *testing.T) {
	onEachRedis(t, func(t *testing.T, st *Store) {
		ctx := context.Background()
		acct := "acct_trim_" + strconv.FormatInt(time.Now().UnixNano(), 36)
		var ids []string
		for i := range 10 {
			got, err := st.AppendBatch(ctx, []Append{{Accounts: []string{acct},
				Entry: Entry{EventID: "ev-" + strconv.Itoa(i), Data: []byte(`{}`)}}}, time.Hour, time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, got[0][0])
		}
		fast, slow := Ref{Account: acct, ID: "fast"}, Ref{Account: acct, ID: "slow"}
		for _, r := range []Ref{fast, slow} {
			if _, err := st.Ensure(ctx, r, "ext-"+r.ID, "fp", time.Hour); err != nil {
				t.Fatal(err)
			}
		}
		setCursor := func(r Ref, id string) {
			t.Helper()
			if err := st.rdb.HSet(ctx, destKey(acct, r.ID), "cursor", id).Err(); err != nil {
				t.Fatal(err)
			}
		}
		setCursor(fast, ids[8])
		setCursor(slow, ids[3])
		logIDs := func() []string {
			t.Helper()
			es, err := st.ReadLog(ctx, acct, "0", 100)
			if err != nil {
				t.Fatal(err)
			}
			var out []string
			for _, e := range es {
				out = append(out, e.ID)
			}
			return out
		}
		trim := func(window time.Duration) int64 {
			t.Helper()
			n, err := st.TrimLog(ctx, acct, []string{"fast", "slow"}, window, time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}

		// Within the window nothing goes, whatever the cursors.
		if n := trim(time.Hour); n != 0 || len(logIDs()) != 10 {
			t.Fatalf("within the window: %d dropped, %d kept", n, len(logIDs()))
		}
		// Two days on, the window is behind every entry; but a trim made within the
		// mark's time (an hour), by this replica or another, stands: nothing goes yet.
		st.now = func() time.Time { return time.Now().Add(48 * time.Hour) }
		if n := trim(24 * time.Hour); n != 0 || len(logIDs()) != 10 {
			t.Fatalf("within the mark's time: %d dropped, %d kept", n, len(logIDs()))
		}
		nextRound := func() { st.rdb.Del(ctx, trimKey(acct)) } // the mark's time is over
		// The next round: what slow has not delivered stays.
		nextRound()
		trim(24 * time.Hour)
		if got := logIDs(); len(got) != 6 || got[0] != ids[4] {
			t.Fatalf("log after the trim: %v, want from %s (after slow's cursor)", got, ids[4])
		}
		if n := st.rdb.XLen(ctx, ordKey(acct)).Val(); n != 6 {
			t.Fatalf("index holds %d entries, the log 6", n)
		}
		// Once slow catches up, everything delivered goes.
		setCursor(slow, ids[9])
		setCursor(fast, ids[9])
		nextRound()
		trim(24 * time.Hour)
		if got := logIDs(); len(got) != 0 {
			t.Fatalf("log after both delivered everything: %v", got)
		}
	})
}
