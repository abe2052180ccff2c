package store

import (
	"context"
	"strconv"
	"testing"
	"time"
)

func sum(v []int64) (n int64) {
	for _, x := range v {
		n += x
	}
	return n
}

// The chart's counts come from the commits of the ordered stream (tests left out), and
// a minute's slot written a day ago starts over rather than adding to the old count.
func TestCommitsCountPerMinuteAndADayOldSlotStartsOver(t *testing.T) {
	onEachRedis(t, func(t *testing.T, st *Store) {
		ctx := context.Background()
		r := Ref{Account: "minutes" + strconv.FormatInt(time.Now().UnixNano(), 36), ID: "orders", Connector: "eventbridge"}
		token, ids := activeWithLease(t, st, r)
		commit := func(kind string, test bool) {
			t.Helper()
			if _, err := st.Commit(ctx, Commit{Ref: r, Token: token, Kind: kind, Cursor: ids[0], EventID: "ev", Test: test,
				DisableAfter: 20, ChannelRetention: time.Hour, AttemptsRetention: time.Hour}); err != nil {
				t.Fatal(err)
			}
		}
		commit(KindDelivered, false)
		commit(KindDelivered, false)
		commit(KindRejected, false)
		commit(KindNotTaken, false)
		commit(KindDelivered, true) // a test: not counted
		// A minute may turn between the commits and the read: sum the whole day.
		m, err := st.Minutes(ctx, r, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Delivered) != MinuteSlots || sum(m.Delivered) != 2 || sum(m.Failed) != 2 {
			t.Fatalf("the day counts %d delivered, %d failed (%d minutes), want 2 and 2", sum(m.Delivered), sum(m.Failed), len(m.Delivered))
		}
		if got := m.From.Add(MinuteSlots * time.Minute); got.Before(time.Now().Add(-time.Minute)) || got.After(time.Now().Add(time.Minute)) {
			t.Errorf("the series ends at %s, not now", got)
		}

		// Yesterday's count in this minute's slot, the destination last counting then: the
		// reader skips it, the writer starts the slot over.
		minute := time.Now().UnixMilli() / 60000
		field := "d" + strconv.FormatInt(minute%MinuteSlots, 10)
		if err := st.Client().HSet(ctx, minutesKey(r.Account, r.ID), field, (minute-MinuteSlots)*minuteStamp+50).Err(); err != nil {
			t.Fatal(err)
		}
		if err := st.Client().HSet(ctx, destKey(r.Account, r.ID), "chart_minute", minute-MinuteSlots).Err(); err != nil {
			t.Fatal(err)
		}
		if m, _ := st.Minutes(ctx, r, time.Now()); sum(m.Delivered) > 2 {
			t.Fatalf("yesterday's slot counts: %d delivered", sum(m.Delivered))
		}
		commit(KindDelivered, false)
		m, _ = st.Minutes(ctx, r, time.Now())
		if last := m.Delivered[MinuteSlots-1]; last != 1 && time.Now().UnixMilli()/60000 == minute {
			t.Errorf("the slot written a day ago counts %d after one delivery, want 1", last)
		}
		if n, _ := st.Client().HLen(ctx, minutesKey(r.Account, r.ID)).Result(); n > 4 {
			t.Errorf("the hash holds %d fields after two minutes at most", n)
		}
		if ttl, _ := st.Client().PTTL(ctx, minutesKey(r.Account, r.ID)).Result(); ttl < 24*time.Hour || ttl > 26*time.Hour {
			t.Errorf("the hash expires in %s, want a day and an hour", ttl)
		}
	})
}
