package api_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mercamap/relay/internal/api/apitest"
	"github.com/mercamap/relay/internal/config"
)

// TestAccountTokensActionsAndReplaysAreRateLimitedPerDestinationAndPerAccount: an
// account token's pauses, activations, replays and retries each take from the actions
// buckets, its replays (an activation with one too) also from the tighter replays
// buckets; past any, 429 RESOURCE_EXHAUSTED with Retry-After, and the refused request
// writes nothing. Admin tokens and other accounts are not held back.
func TestAccountTokensActionsAndReplaysAreRateLimitedPerDestinationAndPerAccount(t *testing.T) {
	r := apitest.New(t, apitest.Options{Config: func(c *config.Config) {
		c.API.ActionsPerDestination = config.Rate{Count: 4, Per: time.Hour}
		c.API.ActionsPerAccount = config.Rate{Count: 6, Per: time.Hour}
		c.API.ReplaysPerDestination = config.Rate{Count: 2, Per: time.Hour}
		c.API.ReplaysPerAccount = config.Rate{Count: 3, Per: time.Hour}
	}})
	dest := func(connector, id string) string { return r.URL + fmt.Sprintf(dests, connector) + "/" + id }
	bus, stream, topic := dest("eventbridge", "orders-bus"), dest("kinesis", "orders-stream"), dest("pubsub", "orders-topic")
	from := `{"from":"` + time.Now().Add(-time.Minute).UTC().Format(time.RFC3339) + `"}`
	ok := func(what string, a answer) {
		t.Helper()
		if a.status != 200 && a.status != 202 {
			t.Fatalf("%s: %d %s", what, a.status, a.body)
		}
	}
	post := func(url, token, body string) answer { return call(t, "POST", url, token, body) }

	ok("replay 1 of orders-bus", post(bus+"/replay", apitest.Acct1Token, from))
	ok("replay 2 of orders-bus", post(bus+"/replay", apitest.Acct1Token, from))
	checkExhausted(t, "replay 3 of orders-bus (2 per hour)", post(bus+"/replay", apitest.Acct1Token, from), 20*time.Minute)
	ok("pause of orders-bus", post(bus+"/pause", apitest.Acct1Token, ""))
	checkExhausted(t, "activation with a replay of orders-bus (its replays spent)",
		post(bus+"/activate", apitest.Acct1Token, `{"replay":"since_paused"}`), 20*time.Minute)
	ok("activation of orders-bus", post(bus+"/activate", apitest.Acct1Token, ""))
	for _, a := range []struct{ what, url, body string }{
		{"pause", bus + "/pause", ""}, {"activation", bus + "/activate", ""}, {"retry", bus + "/attempts/1/retry", ""},
	} {
		checkExhausted(t, a.what+" of orders-bus (4 actions per hour)", post(a.url, apitest.Acct1Token, a.body), 10*time.Minute)
	}

	ok("replay of orders-stream", post(stream+"/replay", apitest.Acct1Token, from))
	checkExhausted(t, "replay of orders-topic (3 replays per hour for acct_1)", post(topic+"/replay", apitest.Acct1Token, from), 15*time.Minute)
	ok("pause of orders-topic", post(topic+"/pause", apitest.Acct1Token, ""))
	checkExhausted(t, "pause of orders-stream (6 actions per hour for acct_1)", post(stream+"/pause", apitest.Acct1Token, ""), 5*time.Minute)

	// Our operators and the other account are not held back by acct_1's loop.
	ok("an admin's replay of orders-bus", post(bus+"/replay", apitest.AdminToken, from))
	ok("an admin's pause of orders-bus", post(bus+"/pause", apitest.AdminToken, ""))
	ok("acct_2's replay", post(dest("eventbridge", "other-bus")+"/replay", apitest.Acct2Token, from))

	// Only what was let through is in the attempt log: 2 replays of acct_1, 1 of the admin.
	lines := call(t, "GET", bus+"/attempts", apitest.AdminToken, "").json(t)["attempts"].([]any)
	replays := 0
	for _, l := range lines {
		if l.(map[string]any)["outcome"] == "replayed" {
			replays++
		}
	}
	if replays != 3 {
		t.Errorf("orders-bus's attempt log has %d replays, want 3 (the refused ones write nothing): %v", replays, lines)
	}
}

// TestResumingAnActiveDestinationIsRefused: activate with since_paused or
// since_disabled on an active destination answers 400 INVALID_ARGUMENT, as docs/api.md
// says, and changes nothing (no channel event).
func TestResumingAnActiveDestinationIsRefused(t *testing.T) {
	r := apitest.New(t, apitest.Options{})
	bus := r.URL + fmt.Sprintf(dests, "eventbridge") + "/orders-bus"
	for _, since := range []string{"since_paused", "since_disabled"} {
		for _, token := range []string{apitest.Acct1Token, apitest.AdminToken} {
			a := call(t, "POST", bus+"/activate", token, `{"replay":"`+since+`"}`)
			if a.status != 400 || a.errorCode(t) != "INVALID_ARGUMENT" || !strings.Contains(string(a.body), "the destination is active") {
				t.Errorf("%s of an active destination: %d %s; want 400 INVALID_ARGUMENT", since, a.status, a.body)
			}
		}
	}
	if seq := r.Sequence(apitest.Acct1, "destination:orders-bus"); seq != 0 {
		t.Errorf("the refused activations wrote %d channel events", seq)
	}
}
