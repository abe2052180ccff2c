package api_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/mercamap/relay/internal/api/apitest"
	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/failures"
)

func TestCardShowsTheLagOfAStalledDestinationAndZeroOnceDrained(t *testing.T) {
	r := startWithOrdersBusThrottled(t, apitest.Options{})
	lag := func(connector, id string) map[string]any {
		a := call(t, "GET", r.URL+fmt.Sprintf(dests, connector)+"/"+id, apitest.Acct1Token, "")
		l, ok := a.json(t)["lag"].(map[string]any)
		if a.status != 200 || !ok {
			t.Fatalf("card %s: %d %s", id, a.status, a.body)
		}
		return l
	}
	if l := lag("eventbridge", "orders-bus"); l["events"] != 0.0 || l["oldest_undelivered_at"] != nil || l["oldest_undelivered_age_seconds"] != 0.0 {
		t.Fatalf("lag before any event: %v", l)
	}
	ids := r.Publish(apitest.Acct1, 4)
	apitest.WaitFor(t, 10*time.Second, "the stream to take every event", func() bool {
		return slices.Equal(r.Sink.Delivered("orders-stream"), ids)
	})
	// The cursor is committed behind the write: the lag is 0 within commit_wait.
	apitest.WaitFor(t, 10*time.Second, "the stream's lag at 0", func() bool { return lag("kinesis", "orders-stream")["events"] == 0.0 })
	l := lag("eventbridge", "orders-bus")
	at, _ := l["oldest_undelivered_at"].(string)
	if l["events"] != 4.0 || l["events_at_least"] != false || at == "" {
		t.Fatalf("stalled destination's lag: %v", l)
	}
	apitest.WaitFor(t, 10*time.Second, "the oldest event's age to grow", func() bool {
		return lag("eventbridge", "orders-bus")["oldest_undelivered_age_seconds"].(float64) > l["oldest_undelivered_age_seconds"].(float64)
	})

	r.Sink.SetBehave(nil) // the bus takes events again
	apitest.WaitFor(t, 10*time.Second, "the lag to drain", func() bool {
		l := lag("eventbridge", "orders-bus")
		return l["events"] == 0.0 && l["oldest_undelivered_at"] == nil
	})
}

// startWithOrdersBusThrottled starts a rig whose orders-bus never takes an event (a
// throttling bus: not taken, retried, never counted), once its four leases are held.
func startWithOrdersBusThrottled(t *testing.T, opts apitest.Options) *apitest.Rig {
	t.Helper()
	r := apitest.New(t, opts)
	r.Sink.SetBehave(func(dest string, _ destination.Message) error {
		if dest == "orders-bus" {
			return failures.NewNotTaken("did not take the event: throttled", nil)
		}
		return nil
	})
	r.Start()
	apitest.WaitFor(t, 10*time.Second, "leases taken", func() bool { return len(r.Dispatcher.Held()) == 4 })
	return r
}
