package store

import (
	"context"
	"path"
	"strconv"
	"testing"
	"time"
)

// TestTheRewriteExpiresTheCountersOfDeletedDestinationsOnly: once format 2 is in force
// the background rewrite gives the counter of a destination deleted before the switch
// (kept for good then) the life a delete leaves it now (SetDeletedCounterLife, here 48
// hours: a channel_retention past the day); a living destination's counter, one that
// expires already and any other key are left as they are, however often it runs.
func TestTheRewriteExpiresTheCountersOfDeletedDestinationsOnly(t *testing.T) {
	onEachRedis(t, func(t *testing.T, st *Store) {
		ctx := context.Background()
		acct := "acct_rewrite_" + strconv.FormatInt(time.Now().UnixNano(), 36)
		ref := func(id string) Ref { return Ref{Account: acct, ID: id, Connector: "eventbridge"} }
		counter := func(id string) string { return chanSeqKey(acct, DestinationChannel(id)) }
		ttl := func(key string) time.Duration { return st.rdb.PTTL(ctx, key).Val() }
		for _, id := range []string{"living", "deleted-before", "deleted-after"} {
			activeWithLease(t, st, ref(id))
		}
		if err := st.Forget(ctx, ref("deleted-before")); err != nil { // format 1: kept for good
			t.Fatal(err)
		}
		st.SetStateFormat(func() int { return CounterLifetime })
		if err := st.Forget(ctx, ref("deleted-after")); err != nil {
			t.Fatal(err)
		}
		if err := st.rdb.PExpire(ctx, counter("deleted-after"), time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
		account := chanSeqKey(acct, AccountChannel(acct))
		keys := []string{counter("living"), counter("deleted-before"), counter("deleted-after"), account}
		for _, k := range keys[:3] {
			if ok, _ := path.Match(CounterPattern, k); !ok {
				t.Fatalf("CounterPattern %q does not match the counter %q", CounterPattern, k)
			}
		}
		if ok, _ := path.Match(CounterPattern, account); ok {
			t.Fatalf("CounterPattern %q matches the account channel's counter %q", CounterPattern, account)
		}
		if ttl(counter("deleted-before")) != -1 {
			t.Fatal("the counter deleted under format 1 expires: the case is not tested")
		}
		const life = 48 * time.Hour
		st.SetDeletedCounterLife(life)
		for range 2 {
			for _, k := range keys {
				if err := st.ExpireDeletedCounter(ctx, st.rdb, k); err != nil {
					t.Fatal(err)
				}
			}
		}
		if d := ttl(counter("living")); d != -1 {
			t.Errorf("a living destination's counter lives %s, want it kept", d)
		}
		if d := ttl(counter("deleted-before")); d <= life-time.Minute || d > life {
			t.Errorf("the counter of a destination deleted before the switch lives %s, want %s", d, life)
		}
		if d := ttl(counter("deleted-after")); d <= 0 || d > time.Hour {
			t.Errorf("a counter that expired already lives %s, want its hour left as it was", d)
		}
		if d := ttl(account); d != -1 {
			t.Errorf("the account channel's counter lives %s, want it kept", d)
		}
	})
}

func TestCounterOfReadsOnlyADestinationChannelsCounter(t *testing.T) {
	for key, want := range map[string][2]string{
		chanSeqKey("acct_1", DestinationChannel("orders-bus")): {"acct_1", "orders-bus"},
		chanSeqKey("acct_1", DestinationChannel("a.b@c+d=e")):  {"acct_1", "a.b@c+d=e"},
		chanSeqKey("acct_1", AccountChannel("acct_1")):         {},
		chanKey("acct_1", DestinationChannel("orders-bus")):    {},
		"relay:{acct_1}:chan:destination::seq":                 {},
		"relay:{a}b}:chan:destination:x:seq":                   {},
		"relay:{acct_1}:chan:destination:x:y:seq":              {},
	} {
		acct, id, ok := counterOf(key)
		if ok != (want[0] != "") || acct != want[0] || id != want[1] {
			t.Errorf("counterOf(%q) = %q, %q, %v; want %q", key, acct, id, ok, want)
		}
	}
}
