package store

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mercamap/relay/internal/testpeer"
)

func TestWaitLogsNamesOnlyTheLogsThatGrewWithTheirNewestID(t *testing.T) {
	st, err := Open(testpeer.RedisURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	after := map[string]string{}
	for _, acct := range []string{"acct_busy", "acct_quiet"} {
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
		Data: []byte(`{}`)}, Accounts: []string{"acct_quiet"}}}, time.Hour, time.Hour); err != nil {
		t.Fatal(err)
	}
	quiet, _ := st.LastLogID(ctx, "acct_quiet")
	if news := <-got; len(news) != 1 || news["acct_quiet"] != quiet {
		t.Fatalf("after one append to acct_quiet: WaitLogs = %v, want acct_quiet at %s", news, quiet)
	}
}

// blockedInXRead reports whether a client of Redis waits in a blocking XREAD.
func blockedInXRead(t *testing.T, st *Store) bool {
	list, err := st.Client().ClientList(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(list, "\n") {
		if strings.Contains(line, " cmd=xread") && strings.Contains(line, " flags=b") {
			return true
		}
	}
	return false
}
