package store

import (
	"context"
	"fmt"
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
	if news, err := st.WaitLogs(ctx, after, 20*time.Millisecond); err != nil || len(news) != 0 {
		t.Fatalf("nothing appended: WaitLogs = %v, %v", news, err)
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

	// Waiting from the newest id again blocks until the next append.
	after["acct_busy"] = newest
	got := make(chan map[string]string, 1)
	go func() {
		news, _ := st.WaitLogs(ctx, after, 10*time.Second)
		got <- news
	}()
	if _, err := st.AppendBatch(ctx, []Append{{Entry: Entry{EventID: "fetcher.job.completed.last", Type: "job.completed",
		Data: []byte(`{}`)}, Accounts: []string{"acct_quiet"}}}, time.Hour, time.Hour); err != nil {
		t.Fatal(err)
	}
	quiet, _ := st.LastLogID(ctx, "acct_quiet")
	if news := <-got; len(news) != 1 || news["acct_quiet"] != quiet {
		t.Fatalf("after one append to acct_quiet: WaitLogs = %v, want acct_quiet at %s", news, quiet)
	}
}
