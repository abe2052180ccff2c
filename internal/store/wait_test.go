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

func TestWaitLogsNamesOnlyTheLogsThatGrewWithTheirNewestID(t *testing.T) {
	onEachRedis(t, testWaitLogsNamesOnlyTheLogsThatGrewWithTheirNewestID)
}

func testWaitLogsNamesOnlyTheLogsThatGrewWithTheirNewestID(t *testing.T, st *Store) {
	ctx := context.Background()
	after := map[string]string{}
	// Two accounts one blocking read may follow together: on Redis Cluster, in one slot.
	quiet := sameSlotAs("acct_busy", "acct_quiet_")
	if g := st.LogGroups([]string{"acct_busy", quiet}); len(g) != 1 {
		t.Fatalf("LogGroups = %v, want one group", g)
	}
	var err error
	for _, acct := range []string{"acct_busy", quiet} {
		if after[acct], err = st.LastLogID(ctx, acct); err != nil {
			t.Fatal(err)
		}
	}
	began := time.Now()
	if news, err := st.WaitLogs(ctx, after, 50*time.Millisecond); err != nil || len(news) != 0 {
		t.Fatalf("nothing appended: WaitLogs = %v, %v", news, err)
	}
	if waited := time.Since(began); waited < 50*time.Millisecond {
		t.Fatalf("nothing appended, yet WaitLogs returned after %s instead of blocking 50ms", waited)
	}

	// A backlog of more entries than any one read takes: the newest id comes back.
	var batch []Append
	for i := range 1100 {
		batch = append(batch, Append{Entry: Entry{EventID: fmt.Sprintf("fetcher.job.completed.%d", i), Type: "job.completed",
			Data: []byte(`{}`)}, Accounts: []string{"acct_busy"}})
	}
	if _, err := st.AppendBatch(ctx, batch, time.Hour, time.Hour); err != nil {
		t.Fatal(err)
	}
	newest, err := st.LastLogID(ctx, "acct_busy")
	if err != nil {
		t.Fatal(err)
	}
	news, err := st.WaitLogs(ctx, after, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(news) != 1 || news["acct_busy"] != newest {
		t.Fatalf("WaitLogs = %v, want only acct_busy at %s", news, newest)
	}

	// Waiting from the newest id again blocks (Redis lists the XREAD as blocked) until
	// the next append.
	after["acct_busy"] = newest
	got := make(chan map[string]string, 1)
	go func() {
		news, _ := st.WaitLogs(ctx, after, 10*time.Second)
		got <- news
	}()
	deadline := time.Now().Add(5 * time.Second)
	for !blockedInXRead(t, st) {
		if time.Now().After(deadline) {
			t.Fatal("WaitLogs never blocked in XREAD")
		}
		time.Sleep(time.Millisecond)
	}
	select {
	case news := <-got:
		t.Fatalf("WaitLogs returned %v before anything was appended", news)
	default:
	}
	if _, err := st.AppendBatch(ctx, []Append{{Entry: Entry{EventID: "fetcher.job.completed.last", Type: "job.completed",
		Data: []byte(`{}`)}, Accounts: []string{quiet}}}, time.Hour, time.Hour); err != nil {
		t.Fatal(err)
	}
	quietID, _ := st.LastLogID(ctx, quiet)
	if news := <-got; len(news) != 1 || news[quiet] != quietID {
		t.Fatalf("after one append to %s: WaitLogs = %v, want it at %s", quiet, news, quietID)
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
		// Each group can be waited on in one read, and names the account that grew.
		for _, g := range groups {
			after := map[string]string{}
			for _, acct := range g {
				after[acct] = "0-0"
			}
			if _, err := st.AppendBatch(ctx, []Append{{Entry: Entry{EventID: "ev-" + g[0], Data: []byte(`{}`)}, Accounts: g[:1]}}, time.Hour, time.Hour); err != nil {
				t.Fatal(err)
			}
			news, err := st.WaitLogs(ctx, after, time.Second)
			if err != nil || len(news) != 1 || news[g[0]] == "" {
				t.Fatalf("WaitLogs(%v) = %v, %v; want %s", g, news, err, g[0])
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
