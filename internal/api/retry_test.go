package api_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mercamap/relay/internal/api/apitest"
	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/failures"
	"github.com/mercamap/relay/internal/store"
	"github.com/mercamap/relay/internal/store/storetest"
)

// TestRetryRouteWritesOneEndedMessageAgainOutsideTheOrderedStream: the bus rejects the
// second of five events; its account retries that attempt by number while the bus still
// rejects it (the retry's own attempt says so, and counts nothing), then once fixed
// (the event arrives once more). The live stream goes on in order behind neither, its
// cursor where it was. Unknown attempts, lines that are no message, another account,
// and a paused destination are refused.
func TestRetryRouteWritesOneEndedMessageAgainOutsideTheOrderedStream(t *testing.T) {
	r := apitest.New(t, apitest.Options{})
	var rejecting atomic.Value // the event id the bus rejects, "" none
	rejecting.Store("")
	r.Sink.SetBehave(func(dest string, m destination.Message) error {
		if dest == "orders-bus" && m.EventID == rejecting.Load().(string) {
			return failures.NewRejected("MalformedDetail: the bus's schema refused the event", nil)
		}
		return nil
	})
	ids := r.Publish(apitest.Acct1, 5)
	rejecting.Store(ids[1])
	r.Start()
	bus := r.URL + fmt.Sprintf(dests, "eventbridge") + "/orders-bus"
	apitest.WaitFor(t, 20*time.Second, "5 attempts", func() bool { return len(attempts(t, bus)) == 5 })
	rejected := slices.IndexFunc(attempts(t, bus), func(a map[string]any) bool { return a["outcome"] == "rejected" })
	if rejected < 0 {
		t.Fatalf("no rejected attempt in %v", attempts(t, bus))
	}
	n := int(attempts(t, bus)[rejected]["n"].(float64))
	ref := store.Ref{Account: apitest.Acct1, ID: "orders-bus"}
	before, err := r.Store.LoadState(context.Background(), ref)
	if err != nil || before.ConsecutiveFailures != 0 {
		t.Fatalf("state before the retries: %+v %v, want 0 failures (the later deliveries ended the run)", before, err)
	}

	// Still rejected: the retry's attempt says so; the card's count is untouched.
	a := call(t, "POST", fmt.Sprintf("%s/attempts/%d/retry", bus, n), apitest.Acct1Token, "")
	if a.status != 202 {
		t.Fatalf("retry: %d %s", a.status, a.body)
	}
	queued := a.json(t)
	if queued["retry_of"] != float64(n) || queued["event_id"] != ids[1] {
		t.Fatalf("retry answered %s", a.body)
	}
	retryOutcome := func(request float64) map[string]any {
		for _, at := range attempts(t, bus) {
			if at["retry"] == request {
				return at
			}
		}
		return nil
	}
	apitest.WaitFor(t, 20*time.Second, "the first retry's outcome", func() bool { return retryOutcome(queued["attempt"].(float64)) != nil })
	first := retryOutcome(queued["attempt"].(float64))
	if first["outcome"] != "rejected" || first["retry_of"] != float64(n) || first["event_id"] != ids[1] ||
		!strings.Contains(fmt.Sprint(first["message"]), fmt.Sprintf("retry of attempt %d: MalformedDetail", n)) {
		t.Fatalf("the first retry's attempt = %v", first)
	}
	if st, _ := r.Store.LoadState(context.Background(), ref); st.ConsecutiveFailures != 0 || st.Cursor != before.Cursor {
		t.Fatalf("after a rejected retry: %d failures, cursor %s; want 0 and %s", st.ConsecutiveFailures, st.Cursor, before.Cursor)
	}

	// Fixed: the retry arrives, and live events go on in order after it.
	rejecting.Store("")
	a = call(t, "POST", fmt.Sprintf("%s/attempts/%d/retry", bus, n), apitest.Acct1Token, "")
	if a.status != 202 {
		t.Fatalf("second retry: %d %s", a.status, a.body)
	}
	second := a.json(t)["attempt"].(float64)
	live := r.Publish(apitest.Acct1, 3)
	apitest.WaitFor(t, 20*time.Second, "the retry and the live events", func() bool {
		return retryOutcome(second) != nil && len(r.Sink.Delivered("orders-bus")) == 8
	})
	if o := retryOutcome(second); o["outcome"] != "delivered" || o["retry_of"] != float64(n) {
		t.Fatalf("the second retry's attempt = %v", o)
	}
	got := r.Sink.Delivered("orders-bus")
	if ordered := slices.DeleteFunc(slices.Clone(got[1:]), func(id string) bool { return id == ids[1] }); !slices.Equal(got[:1], ids[:1]) ||
		!slices.Equal(ordered, slices.Concat(ids[2:], live)) || countOf(got, ids[1]) != 1 {
		t.Fatalf("delivered %v; want the ordered stream %v in order, and %s once (the retry)", got, slices.Concat(ids[:1], ids[2:], live), ids[1])
	}
	apitest.WaitFor(t, 20*time.Second, "the cursor at the last live event", func() bool {
		st, _ := r.Store.LoadState(context.Background(), ref)
		last, _ := storetest.LastLogID(context.Background(), r.Store.Client(), apitest.Acct1)
		return st.Cursor == last
	})

	// Refusals.
	for _, c := range []struct {
		path, token string
		status      int
		code, says  string
	}{
		{"/attempts/9999/retry", apitest.Acct1Token, 404, "NOT_FOUND", "no attempt 9999"},
		{fmt.Sprintf("/attempts/%d/retry", int(second)), apitest.Acct1Token, 400, "INVALID_ARGUMENT", "retry_queued line"},
		{"/attempts/x/retry", apitest.Acct1Token, 400, "INVALID_ARGUMENT", "whole number"},
		{fmt.Sprintf("/attempts/%d/retry", n), apitest.Acct2Token, 404, "NOT_FOUND", "no destination"},
	} {
		a := call(t, "POST", bus+c.path, c.token, "")
		if a.status != c.status || a.errorCode(t) != c.code || !strings.Contains(string(a.body), c.says) {
			t.Errorf("POST %s: %d %s, want %d %s saying %q", c.path, a.status, a.body, c.status, c.code, c.says)
		}
	}
	call(t, "POST", bus+"/pause", apitest.Acct1Token, "")
	a = call(t, "POST", fmt.Sprintf("%s/attempts/%d/retry", bus, n), apitest.AdminToken, "")
	if a.status != 409 || a.errorCode(t) != "FAILED_PRECONDITION" || !strings.Contains(string(a.body), "the destination is paused") {
		t.Fatalf("retry on a paused destination: %d %s, want 409 FAILED_PRECONDITION saying it is paused", a.status, a.body)
	}
}

// attempts is the destination's attempt log (url: its card's), newest first.
func attempts(t *testing.T, url string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, a := range call(t, "GET", url+"/attempts?limit=500", apitest.AdminToken, "").json(t)["attempts"].([]any) {
		out = append(out, a.(map[string]any))
	}
	return out
}

func countOf(list []string, v string) int {
	n := 0
	for _, s := range list {
		if s == v {
			n++
		}
	}
	return n
}

// TestAPauseDuringARetrysWriteSaysTheWriteIsInFlight: a retry goes through the write
// fence of ordered deliveries: while its write is held at the bus, a pause answers
// write_in_flight true; after it, the retry's outcome is recorded and nothing else is
// written.
func TestAPauseDuringARetrysWriteSaysTheWriteIsInFlight(t *testing.T) {
	r := apitest.New(t, apitest.Options{})
	var holding atomic.Bool
	started, release := make(chan struct{}, 1), make(chan struct{})
	r.Sink.SetBehave(func(dest string, _ destination.Message) error {
		if dest == "orders-bus" && holding.Load() {
			started <- struct{}{}
			<-release
		}
		return nil
	})
	r.Start()
	bus := r.URL + fmt.Sprintf(dests, "eventbridge") + "/orders-bus"
	ids := r.Publish(apitest.Acct1, 1)
	apitest.WaitFor(t, 20*time.Second, "the delivery committed", func() bool { return len(attempts(t, bus)) == 1 })
	holding.Store(true)
	if a := call(t, "POST", bus+"/attempts/1/retry", apitest.Acct1Token, ""); a.status != 202 {
		t.Fatalf("retry: %d %s", a.status, a.body)
	}
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("the retry's write did not start")
	}
	paused := call(t, "POST", bus+"/pause", apitest.Acct1Token, "").json(t)
	holding.Store(false)
	close(release)
	if paused["status"] != "paused" || paused["write_in_flight"] != true {
		t.Fatalf("pause during the retry's write: status %v write_in_flight %v, want paused and true", paused["status"], paused["write_in_flight"])
	}
	apitest.WaitFor(t, 20*time.Second, "the retry's outcome", func() bool {
		return slices.ContainsFunc(attempts(t, bus), func(a map[string]any) bool { return a["retry"] == float64(2) })
	})
	if got := r.Sink.Delivered("orders-bus"); !slices.Equal(got, []string{ids[0], ids[0]}) {
		t.Fatalf("delivered %v, want the event and its retry", got)
	}
}
