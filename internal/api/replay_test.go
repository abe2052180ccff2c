package api_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mercamap/relay/internal/api/apitest"
	"github.com/mercamap/relay/internal/store/storetest"
)

func TestReplayRouteRedeliversInOrderAndRefusesAPointOlderThanTheLog(t *testing.T) {
	r := apitest.New(t, apitest.Options{})
	r.Start()
	bus := r.URL + fmt.Sprintf(dests, "eventbridge") + "/orders-bus"
	ids := r.Publish(apitest.Acct1, 5)
	apitest.WaitFor(t, 20*time.Second, "5 deliveries", func() bool { return len(r.Sink.Delivered("orders-bus")) == 5 })

	card := call(t, "GET", bus, apitest.Acct1Token, "").json(t)
	from, err := time.Parse(time.RFC3339, fmt.Sprint(card["replayable_from"]))
	if err != nil || from.Before(time.Now().Add(-apitest.LogRetention)) || from.After(time.Now().Add(-apitest.LogRetention+time.Minute)) {
		t.Fatalf("card replayable_from = %v, want about %s back", card["replayable_from"], apitest.LogRetention)
	}

	// Too old: 400 naming the oldest point still replayable.
	old := time.Now().Add(-apitest.LogRetention - time.Hour).UTC().Format(time.RFC3339)
	a := call(t, "POST", bus+"/replay", apitest.Acct1Token, `{"from":"`+old+`"}`)
	if a.status != 400 || a.errorCode(t) != "INVALID_ARGUMENT" || !strings.Contains(string(a.body), from.Format("2006-01-02T15")) {
		t.Fatalf("replay older than the log: %d %s", a.status, a.body)
	}
	// Another account's destination answers like a missing one.
	if a := call(t, "POST", bus+"/replay", apitest.Acct2Token, `{"after_event":"`+ids[0]+`"}`); a.status != 404 {
		t.Fatalf("another account's replay: %d %s", a.status, a.body)
	}
	if a := call(t, "POST", bus+"/replay", apitest.Acct1Token, `{}`); a.status != 400 {
		t.Fatalf("replay without a point: %d %s", a.status, a.body)
	}

	out := call(t, "POST", bus+"/replay", apitest.Acct1Token, `{"after_event":"`+ids[1]+`"}`).json(t)
	if out["status"] != "active" || out["replay"].(map[string]any)["pending"] != false {
		t.Fatalf("replay answered %v", out)
	}
	want := slices.Concat(ids, ids[2:])
	apitest.WaitFor(t, 20*time.Second, "the replay", func() bool { return len(r.Sink.Delivered("orders-bus")) >= len(want) })
	if got := r.Sink.Delivered("orders-bus"); !slices.Equal(got, want) {
		t.Fatalf("delivered %v, want %v", got, want)
	}

	// An activation naming a status the destination does not have is refused.
	call(t, "POST", bus+"/pause", apitest.Acct1Token, "")
	if a := call(t, "POST", bus+"/activate", apitest.Acct1Token, `{"replay":"since_disabled"}`); a.status != 400 {
		t.Fatalf("since_disabled on a paused destination: %d %s", a.status, a.body)
	}
	if a := call(t, "POST", bus+"/activate", apitest.Acct1Token, `{"replay":"since_paused"}`).json(t); a["status"] != "active" {
		t.Fatalf("since_paused: %v", a)
	}
}

// Events every destination delivered go from the log once they are older than the replay
// window; a replay after one of them is refused with 400 naming replayable_from, and a
// replay after an event still in the window resends exactly what followed it, in order.
func TestAReplayIntoTheTrimmedPartIsRefusedAndOneInTheWindowIsExact(t *testing.T) {
	const window = 2 * time.Second
	r := apitest.New(t, apitest.Options{ReplayWindow: window, TrimEvery: 50 * time.Millisecond})
	r.Start()
	bus := r.URL + fmt.Sprintf(dests, "eventbridge") + "/orders-bus"
	old := r.Publish(apitest.Acct1, 3)
	apitest.WaitFor(t, 20*time.Second, "3 deliveries", func() bool { return len(r.Sink.Delivered("orders-bus")) == 3 })
	// Every destination of acct_1 has delivered them: once past the window they go.
	apitest.WaitFor(t, 20*time.Second, "the delivered events trimmed from the log", func() bool {
		n, err := r.Store.Client().XLen(context.Background(), storetest.LogKey(apitest.Acct1)).Result()
		return err == nil && n == 0
	})
	a := call(t, "POST", bus+"/replay", apitest.Acct1Token, `{"after_event":"`+old[1]+`"}`)
	if a.status != 400 || a.errorCode(t) != "INVALID_ARGUMENT" || !strings.Contains(string(a.body), "replayable_from") {
		t.Fatalf("replay after a trimmed event: %d %s", a.status, a.body)
	}

	fresh := r.Publish(apitest.Acct1, 4)
	apitest.WaitFor(t, 20*time.Second, "7 deliveries", func() bool { return len(r.Sink.Delivered("orders-bus")) == 7 })
	if a := call(t, "POST", bus+"/replay", apitest.Acct1Token, `{"after_event":"`+fresh[0]+`"}`); a.status != 200 {
		t.Fatalf("replay within the window: %d %s", a.status, a.body)
	}
	want := slices.Concat(old, fresh, fresh[1:])
	apitest.WaitFor(t, 20*time.Second, "the replay", func() bool { return len(r.Sink.Delivered("orders-bus")) >= len(want) })
	if got := r.Sink.Delivered("orders-bus"); !slices.Equal(got, want) {
		t.Fatalf("delivered %v, want %v", got, want)
	}
}
