package api_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mercamap/relay/internal/api/apitest"
	"github.com/mercamap/relay/internal/config"
	"github.com/mercamap/relay/internal/store/storetest"
)

// Only what is carried out spends a limit (issue 52): a request refused for what it
// asks (400, 403, 404, 409) spends none of the account's buckets and leaves none in
// Redis, however many come, and the valid request after them goes through; the limits
// still hold for what is carried out.

// noBuckets fails the test when acct holds a rate limit bucket in Redis: what a
// refusal would have spent.
func noBuckets(t *testing.T, r *apitest.Rig, acct, after string) {
	t.Helper()
	keys, err := r.Store.Client().Keys(context.Background(), storetest.BucketPattern(acct)).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) > 0 {
		t.Fatalf("after %s, %s holds the buckets %v: a refusal spent the account's limits", after, acct, keys)
	}
}

// refuse sends the same refused request n times and checks each answer's status.
func refuse(t *testing.T, n int, what, url, token, body string, status int) {
	t.Helper()
	for i := range n {
		if a := call(t, "POST", url, token, body); a.status != status {
			t.Fatalf("%s %d of %d: %d %s, want %d", what, i+1, n, a.status, a.body, status)
		}
	}
}

// TestRefusedReplaysSpendNoLimit: five replays refused with 400 for a point older than
// the log keeps, and five after an event the log does not hold, and still the
// destination's five replays of ten minutes (the defaults) go through; the sixth is
// 429.
func TestRefusedReplaysSpendNoLimit(t *testing.T) {
	r := apitest.New(t, apitest.Options{Config: func(c *config.Config) {
		c.API.ReplaysPerDestination = config.Rate{Count: 5, Per: 10 * time.Minute}
		c.API.ActionsPerDestination = config.Rate{Count: 10, Per: time.Minute}
	}})
	bus := r.URL + fmt.Sprintf(dests, "eventbridge") + "/orders-bus"
	tooOld := `{"from":"` + time.Now().Add(-apitest.LogRetention-time.Hour).UTC().Format(time.RFC3339) + `"}`
	refuse(t, 5, "a replay older than the log", bus+"/replay", apitest.Acct1Token, tooOld, 400)
	refuse(t, 5, "a replay after an event the log does not hold", bus+"/replay", apitest.Acct1Token, `{"after_event":"never-received"}`, 400)
	noBuckets(t, r, apitest.Acct1, "ten refused replays")

	valid := `{"from":"` + time.Now().Add(-time.Minute).UTC().Format(time.RFC3339) + `"}`
	for i := range 5 {
		if a := call(t, "POST", bus+"/replay", apitest.Acct1Token, valid); a.status != 200 {
			t.Fatalf("valid replay %d after ten refused: %d %s", i+1, a.status, a.body)
		}
	}
	checkExhausted(t, "the sixth valid replay (5 per 10m)", call(t, "POST", bus+"/replay", apitest.Acct1Token, valid), time.Minute)
}

// TestRefusedActivationsWithAReplaySpendNoLimit: activations naming a status the
// destination does not have (400) spend neither its replay nor its actions; the pause
// and the activation with a replay after them go through, and the next activation with
// a replay is 429 (one an hour).
func TestRefusedActivationsWithAReplaySpendNoLimit(t *testing.T) {
	r := apitest.New(t, apitest.Options{Config: func(c *config.Config) {
		c.API.ReplaysPerDestination = config.Rate{Count: 1, Per: time.Hour}
		c.API.ActionsPerDestination = config.Rate{Count: 3, Per: time.Hour}
	}})
	bus := r.URL + fmt.Sprintf(dests, "eventbridge") + "/orders-bus"
	refuse(t, 5, "since_paused on an active destination", bus+"/activate", apitest.Acct1Token, `{"replay":"since_paused"}`, 400)
	refuse(t, 5, "since_disabled on an active destination", bus+"/activate", apitest.Acct1Token, `{"replay":"since_disabled"}`, 400)
	noBuckets(t, r, apitest.Acct1, "ten refused activations")

	if a := call(t, "POST", bus+"/pause", apitest.Acct1Token, ""); a.status != 200 {
		t.Fatalf("pause after ten refused activations: %d %s", a.status, a.body)
	}
	refuse(t, 5, "since_disabled on a paused destination", bus+"/activate", apitest.Acct1Token, `{"replay":"since_disabled"}`, 400)
	if a := call(t, "POST", bus+"/activate", apitest.Acct1Token, `{"replay":"since_paused"}`); a.status != 200 {
		t.Fatalf("the activation with a replay after fifteen refused: %d %s", a.status, a.body)
	}
	if a := call(t, "POST", bus+"/pause", apitest.Acct1Token, ""); a.status != 200 {
		t.Fatalf("the third action: %d %s", a.status, a.body)
	}
	checkExhausted(t, "a second activation with a replay (1 per hour)",
		call(t, "POST", bus+"/activate", apitest.Acct1Token, `{"replay":"since_paused"}`), 30*time.Minute)
}

// TestRefusedPausesAndRetriesSpendNoLimit: an account's pause of a destination our
// operators disabled (403) and a retry of an attempt the log does not hold (404) spend
// nothing; the one action an hour the destination has goes through after them.
func TestRefusedPausesAndRetriesSpendNoLimit(t *testing.T) {
	r := apitest.New(t, apitest.Options{Config: func(c *config.Config) {
		c.API.ActionsPerDestination = config.Rate{Count: 1, Per: time.Hour}
	}})
	bus := r.URL + fmt.Sprintf(dests, "eventbridge") + "/orders-bus"
	refuse(t, 5, "a retry of no attempt", bus+"/attempts/999/retry", apitest.Acct1Token, "", 404)
	if a := call(t, "POST", bus+"/disable", apitest.AdminToken, `{"reason":"an incident"}`); a.status != 200 {
		t.Fatalf("an admin's disable: %d %s", a.status, a.body)
	}
	refuse(t, 5, "a pause of what our operators disabled", bus+"/pause", apitest.Acct1Token, "", 403)
	refuse(t, 5, "an activation of what our operators disabled", bus+"/activate", apitest.Acct1Token, "", 403)
	noBuckets(t, r, apitest.Acct1, "fifteen refused actions")

	if a := call(t, "POST", bus+"/activate", apitest.AdminToken, ""); a.status != 200 {
		t.Fatalf("an admin's activation: %d %s", a.status, a.body)
	}
	if a := call(t, "POST", bus+"/pause", apitest.Acct1Token, ""); a.status != 200 {
		t.Fatalf("the account's pause after fifteen refused actions: %d %s", a.status, a.body)
	}
	checkExhausted(t, "a second action (1 per hour)", call(t, "POST", bus+"/activate", apitest.Acct1Token, ""), 30*time.Minute)
}

// TestRefusedDestinationCreatesSpendNoChange: creates refused for an id the file or
// the registry holds (409) and a retried create (its Idempotency-Key's first made the
// destination) spend none of the account's creates, changes and deletes; a patch and a
// delete go through after them, and the next change is 429.
func TestRefusedDestinationCreatesSpendNoChange(t *testing.T) {
	r := apitest.New(t, apitest.Options{Made: true, Config: func(c *config.Config) {
		c.API.DestinationChangesPerAccount = config.Rate{Count: 3, Per: time.Hour}
	}})
	base := r.URL + fmt.Sprintf(dests, "eventbridge")
	create := func(id, key string) answer {
		t.Helper()
		body := `{"id":"` + id + `","bus_arn":"arn:aws:events:us-east-1:111122223333:event-bus/api","role_arn":"arn:aws:iam::111122223333:role/api-role"}`
		req, err := http.NewRequest("POST", base, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+apitest.Acct1Token)
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		return send(t, req)
	}
	if a := create("api-bus", "create-1"); a.status != 201 {
		t.Fatalf("the create: %d %s", a.status, a.body)
	}
	for i := range 5 {
		if a := create("orders-bus", ""); a.status != 409 {
			t.Fatalf("a create of the file's id, %d of 5: %d %s", i+1, a.status, a.body)
		}
		if a := create("api-bus", ""); a.status != 409 {
			t.Fatalf("a create of the registry's id, %d of 5: %d %s", i+1, a.status, a.body)
		}
		if a := create("api-bus", "create-1"); a.status != 201 {
			t.Fatalf("a retried create, %d of 5: %d %s", i+1, a.status, a.body)
		}
	}
	if a := call(t, "PATCH", base+"/api-bus", apitest.Acct1Token, `{"events":["job.failed"]}`); a.status != 200 {
		t.Fatalf("a change after the refused creates: %d %s", a.status, a.body)
	}
	if a := call(t, "DELETE", base+"/api-bus", apitest.Acct1Token, ""); a.status != 200 {
		t.Fatalf("a delete after the refused creates: %d %s", a.status, a.body)
	}
	checkExhausted(t, "a fourth change (3 per hour)", create("api-bus-2", ""), 15*time.Minute)
}
