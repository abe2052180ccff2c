package store

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestFollowLogsReadsEachLogOnceInOrderAndBlocksWhenNothingIsNew: one read of a group
// of accounts (one slot on Redis Cluster) returns what each log holds past where the
// follower stands, in log order and a bounded count at a time, carries the follower's
// points on, names only the logs that grew, and blocks while nothing is new.
func TestFollowLogsReadsEachLogOnceInOrderAndBlocksWhenNothingIsNew(t *testing.T) {
	onEachRedis(t, testFollowLogs)
}

func testFollowLogs(t *testing.T, st *Store) {
	ctx := context.Background()
	at := map[string]FollowPoint{}
	// Two accounts one blocking read may follow together: on Redis Cluster, in one slot.
	quiet := sameSlotAs("acct_busy", "acct_quiet_")
	if g := st.LogGroups([]string{"acct_busy", quiet}); len(g) != 1 {
		t.Fatalf("LogGroups = %v, want one group", g)
	}
	for _, acct := range []string{"acct_busy", quiet} {
		p, err := st.FollowStart(ctx, acct)
		if err != nil {
			t.Fatal(err)
		}
		at[acct] = p
	}
	began := time.Now()
	if got, err := st.FollowLogs(ctx, at, 50*time.Millisecond, 16); err != nil || len(got.Entries) != 0 || len(got.Controls) != 0 {
		t.Fatalf("nothing appended: FollowLogs = %+v, %v", got, err)
	}
	if waited := time.Since(began); waited < 50*time.Millisecond {
		t.Fatalf("nothing appended, yet FollowLogs returned after %s instead of blocking 50ms", waited)
	}

	// A backlog of more entries than one read takes: read in order, 256 at a time.
	var batch []Append
	for i := range 1100 {
		batch = append(batch, Append{Entry: Entry{EventID: fmt.Sprintf("fetcher.job.completed.%d", i), Type: "job.completed",
			Data: []byte(`{}`)}, Accounts: []string{"acct_busy"}})
	}
	if _, err := st.AppendBatch(ctx, batch, time.Hour, time.Hour); err != nil {
		t.Fatal(err)
	}
	var read []string
	for len(read) < 1100 {
		got, err := st.FollowLogs(ctx, at, time.Second, 256)
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Entries) != 1 || len(got.Entries["acct_busy"]) == 0 || len(got.Entries["acct_busy"]) > 256 {
			t.Fatalf("FollowLogs named %d logs, %d entries of acct_busy; want only acct_busy, at most 256", len(got.Entries), len(got.Entries["acct_busy"]))
		}
		for _, e := range got.Entries["acct_busy"] {
			read = append(read, e.EventID)
		}
	}
	for i, id := range read {
		if want := fmt.Sprintf("fetcher.job.completed.%d", i); id != want {
			t.Fatalf("entry %d read is %s, want %s: every entry once, in log order", i, id, want)
		}
	}
	newest, _ := st.LastLogID(ctx, "acct_busy")
	if at["acct_busy"].Log != newest {
		t.Fatalf("the follower stands at %s, want the newest entry %s", at["acct_busy"].Log, newest)
	}

	// Following from the newest again blocks (Redis lists the XREAD as blocked) until
	// the next append.
	done := make(chan Followed, 1)
	go func() {
		got, _ := st.FollowLogs(ctx, at, 10*time.Second, 256)
		done <- got
	}()
	deadline := time.Now().Add(5 * time.Second)
	for !blockedInXRead(t, st) {
		if time.Now().After(deadline) {
			t.Fatal("FollowLogs never blocked in XREAD")
		}
		time.Sleep(time.Millisecond)
	}
	select {
	case got := <-done:
		t.Fatalf("FollowLogs returned %+v before anything was appended", got)
	default:
	}
	if _, err := st.AppendBatch(ctx, []Append{{Entry: Entry{EventID: "fetcher.job.completed.last", Type: "job.completed",
		Data: []byte(`{}`)}, Accounts: []string{quiet}}}, time.Hour, time.Hour); err != nil {
		t.Fatal(err)
	}
	if got := <-done; len(got.Entries) != 1 || len(got.Entries[quiet]) != 1 || got.Entries[quiet][0].EventID != "fetcher.job.completed.last" {
		t.Fatalf("after one append to %s: FollowLogs = %+v", quiet, got)
	}
}

func TestLogGroupsSplitAccountsOnlyWhereABlockingReadCannotSpanThem(t *testing.T) {
	onEachRedis(t, func(t *testing.T, st *Store) {
		ctx := context.Background()
		accts := []string{"acct_a", "acct_b", "acct_c", sameSlotAs("acct_a", "acct_a_")}
		groups := st.LogGroups(accts)
		_, cluster := st.Client().(*redis.ClusterClient)
		if !cluster && len(groups) != 1 {
			t.Fatalf("one server: LogGroups = %v, want all accounts in one group", groups)
		}
		if cluster && len(groups) != 3 {
			t.Fatalf("cluster: LogGroups = %v, want one group per slot (3)", groups)
		}
		// Each group can be followed in one read, and names the account that grew.
		for _, g := range groups {
			at := map[string]FollowPoint{}
			for _, acct := range g {
				at[acct] = FollowPoint{Log: "0-0", Ctl: "0-0"}
			}
			if _, err := st.AppendBatch(ctx, []Append{{Entry: Entry{EventID: "ev-" + g[0], Data: []byte(`{}`)}, Accounts: g[:1]}}, time.Hour, time.Hour); err != nil {
				t.Fatal(err)
			}
			got, err := st.FollowLogs(ctx, at, time.Second, 16)
			if err != nil || len(got.Entries) != 1 || len(got.Entries[g[0]]) == 0 {
				t.Fatalf("FollowLogs(%v) = %+v, %v; want %s", g, got, err, g[0])
			}
		}
	})
}

// blockedInXRead reports whether a client of a Redis master waits in a blocking XREAD.
func blockedInXRead(t *testing.T, st *Store) bool {
	var blocked atomic.Bool // the masters answer in parallel
	err := st.forEachMaster(context.Background(), func(ctx context.Context, m redis.UniversalClient) error {
		list, err := m.ClientList(ctx).Result()
		for _, line := range strings.Split(list, "\n") {
			if strings.Contains(line, " cmd=xread") && strings.Contains(line, " flags=b") {
				blocked.Store(true)
			}
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return blocked.Load()
}
