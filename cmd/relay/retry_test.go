package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mercamap/relay/internal/api/apitest"
	"github.com/mercamap/relay/internal/store"
	"github.com/mercamap/relay/internal/store/storetest"
)

// busDest is the replica set's one destination, as the API names it.
const busDest = "/v1/connectors/eventbridge/destinations/orders-bus"

// TestARejectedEventIsRetriedByAttemptNumberAndArrivesOutsideTheOrderedStream runs the
// relay binary against the STS and EventBridge test servers. The bus rejects the first
// of three events with a per-entry error; once that is fixed, `relay destinations retry`
// names the rejected attempt: the event arrives at the bus once more, the attempt log
// shows the retry and its outcome, and the live events published meanwhile arrive in
// order, the cursor at the last of them.
func TestARejectedEventIsRetriedByAttemptNumberAndArrivesOutsideTheOrderedStream(t *testing.T) {
	rs := startReplicas(t, 1)
	rs.bus.FailEntries(1, "MalformedDetail", "Detail does not match the bus's schema")
	rs.publish(0, 3, 16)
	ids := rs.confirmedIDs()
	api := rs.apis[0]
	waitUntil(t, 60*time.Second, "three attempts", func() bool { return len(attemptLog(t, api)) == 3 })
	log := attemptLog(t, api)
	i := slices.IndexFunc(log, func(a attemptLine) bool { return a.Outcome == "rejected" })
	if i < 0 || log[i].EventID != ids[0] || len(rs.bus.Entries()) != 2 {
		t.Fatalf("attempt log %+v, %d on the bus; want the first event rejected, the other two delivered", log, len(rs.bus.Entries()))
	}
	n := log[i].N

	var out, errOut bytes.Buffer
	env := getenv(map[string]string{"RELAY_TOKEN": replicasAdminToken})
	if err := run(context.Background(), []string{"destinations", "retry", "orders-bus", fmt.Sprint(n), "--api", api}, env, nil, &out, &errOut); err != nil {
		t.Fatalf("retry: %v\n%s", err, errOut.String())
	}
	if want := fmt.Sprintf("orders-bus: retry of attempt %d (event %s) queued as attempt", n, ids[0]); !strings.Contains(out.String(), want) {
		t.Fatalf("retry printed %q, want %q", out.String(), want)
	}
	rs.publish(3, 6, 16)
	live := rs.confirmedIDs()[3:]
	waitUntil(t, 60*time.Second, "the retry and three live events at the bus", func() bool { return len(rs.bus.Entries()) == 6 })

	got := firstArrivals(t, rs.bus.Entries())
	ordered := slices.DeleteFunc(slices.Clone(got), func(id string) bool { return id == ids[0] })
	if !slices.Equal(ordered, slices.Concat(ids[1:], live)) || len(got) != 6 {
		t.Fatalf("arrived %v; want %v in order and %s once, retried", got, slices.Concat(ids[1:], live), ids[0])
	}
	waitUntil(t, 30*time.Second, "the retry's outcome in the attempt log", func() bool {
		return slices.ContainsFunc(attemptLog(t, api), func(a attemptLine) bool { return a.RetryOf == n && a.Outcome == "delivered" })
	})
	for _, a := range attemptLog(t, api) {
		if a.RetryOf == n && (a.EventID != ids[0] || !strings.HasPrefix(a.Message, fmt.Sprintf("retry of attempt %d", n))) {
			t.Errorf("retry line %+v", a)
		}
	}
	st, err := store.Open(rs.redisURL)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	waitUntil(t, 30*time.Second, "the cursor at the last live event", func() bool {
		s, err := st.LoadState(context.Background(), store.Ref{Account: "acct_1", ID: "orders-bus"})
		last, _ := storetest.LastLogID(context.Background(), st.Client(), "acct_1")
		return err == nil && s.Cursor == last && s.ConsecutiveFailures == 0
	})
}

// TestAReplayAskedOfTheReplicaWithoutTheLeaseIsCarriedOutOnceByTheHolder: two relay
// processes; the replay goes to the API of the one that does not deliver for the
// destination. The bus receives the replayed range once, in order, then live events.
func TestAReplayAskedOfTheReplicaWithoutTheLeaseIsCarriedOutOnceByTheHolder(t *testing.T) {
	rs := startReplicas(t, 2)
	rs.publish(0, 20, 16)
	first := rs.confirmedIDs()
	waitUntil(t, 60*time.Second, "20 events at the bus", func() bool { return len(rs.bus.Entries()) == 20 })
	st, err := store.Open(rs.redisURL)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	lease, err := leaseOf(st, "acct_1", "orders-bus")
	if err != nil || lease == "" {
		t.Fatalf("the lease holder: %q, %v", lease, err)
	}
	pid := leasePID(t, lease)
	holder := slices.IndexFunc(rs.procs, func(c *exec.Cmd) bool { return c.Process.Pid == pid })
	if holder < 0 {
		t.Fatalf("lease holder %q is neither replica", lease)
	}
	from := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	if a := httpPost(t, rs.apis[1-holder]+busDest+"/replay", replicasAdminToken, `{"from":"`+from+`"}`); a.status != 200 {
		t.Fatalf("replay on the replica without the lease: %d %s", a.status, a.body)
	}
	waitUntil(t, 60*time.Second, "the replayed 20 at the bus", func() bool { return len(rs.bus.Entries()) >= 40 })
	rs.publish(20, 25, 16)
	live := rs.confirmedIDs()[20:]
	// Every event ended (the cursor at the last one, no write in flight): nothing more comes.
	waitUntil(t, 60*time.Second, "the live events delivered and committed", func() bool {
		h, err := st.Client().HMGet(ctx, storetest.DestKey("acct_1", "orders-bus"), "cursor", "writing").Result()
		last, _ := storetest.LastLogID(ctx, st.Client(), "acct_1")
		return err == nil && h[0] == last && h[1] == nil && len(rs.bus.Entries()) >= 45
	})
	var got []string
	for _, e := range rs.bus.Entries() {
		var body struct {
			EventID string `json:"event_id"`
		}
		_ = json.Unmarshal([]byte(e.Detail), &body)
		got = append(got, body.EventID)
	}
	if want := slices.Concat(first, first, live); !slices.Equal(got, want) {
		t.Fatalf("the bus received %d events; want the 20, the 20 again once and in order, then the 5 live ones:\n got %v\nwant %v\n%s",
			len(got), got, want, rs.logTails())
	}
}

// TestWatchPrintsReplaysAndRetriesInWords: `relay watch` on a destination's channel
// prints a replay and a retry, each with what it is in words.
func TestWatchPrintsReplaysAndRetriesInWords(t *testing.T) {
	r := apitest.New(t, apitest.Options{})
	r.Start()
	ids := r.Publish(apitest.Acct1, 2)
	apitest.WaitFor(t, 20*time.Second, "2 deliveries", func() bool { return len(r.Sink.Delivered("orders-bus")) == 2 })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out, done := watchOrdersBus(ctx, r.URL)
	waitUntil(t, 30*time.Second, "the snapshot printed", func() bool { return strings.Contains(out.String(), "snapshot destination:orders-bus") })

	if a := httpPost(t, r.URL+busDest+"/replay", apitest.Acct1Token, `{"after_event":"`+ids[0]+`"}`); a.status != 200 {
		t.Fatalf("replay: %d %s", a.status, a.body)
	}
	env := getenv(map[string]string{"RELAY_TOKEN": apitest.Acct1Token})
	if err := run(ctx, []string{"destinations", "retry", "orders-bus", "1", "--api", r.URL}, env, nil, io.Discard, io.Discard); err != nil {
		t.Fatalf("retry: %v", err)
	}
	waitUntil(t, 30*time.Second, "the replay and the retry printed", func() bool {
		s := out.String()
		return strings.Contains(s, "destination.replayed  orders-bus → active, 0 failures  — replay after event "+ids[0]+" asked for") &&
			strings.Contains(s, "delivery.retried  orders-bus → active, 0 failures  event "+ids[0]+"  — retry of attempt 1: delivered")
	})
	cancel()
	if err := <-done; err != nil {
		t.Errorf("watch ended with %v", err)
	}
}

// attemptLine is one line of a destination's attempt log, as the API serves it.
type attemptLine struct {
	N       int64  `json:"n"`
	EventID string `json:"event_id"`
	Outcome string `json:"outcome"`
	Message string `json:"message"`
	RetryOf int64  `json:"retry_of"`
	Retry   int64  `json:"retry"`
}

// attemptLog reads the replica set's destination's attempt log off api, newest first.
func attemptLog(t *testing.T, api string) []attemptLine {
	t.Helper()
	a := httpDo(t, "GET", api+busDest+"/attempts?limit=500", replicasAdminToken)
	var page struct {
		Attempts []attemptLine `json:"attempts"`
	}
	if a.status != 200 || json.Unmarshal([]byte(a.body), &page) != nil {
		t.Fatalf("attempts: %d %s", a.status, a.body)
	}
	return page.Attempts
}

// httpPost POSTs a JSON body with a bearer token.
func httpPost(t *testing.T, url, token, body string) httpAnswer {
	t.Helper()
	return httpSend(t, http.MethodPost, url, token, body)
}
