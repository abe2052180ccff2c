package api_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/mercamap/relay/internal/api/apitest"
	"github.com/mercamap/relay/internal/config"
	"github.com/mercamap/relay/internal/store"
)

// forgottenFor is how long docs/api.md says what a deleted destination leaves in Redis
// lives.
const forgottenFor = 24 * time.Hour

// TestACreateDeleteLoopLeavesNoKeyForGood: destinations made and deleted through the
// API, each id new or made again, leave Redis with the keys it had for good, and what
// each delete leaves expires within the day docs/api.md says (issue 52): a loop cannot
// grow Redis without bound. State format 2 is in force (no release that keeps a
// deleted destination's counter for good may run).
func TestACreateDeleteLoopLeavesNoKeyForGood(t *testing.T) {
	r := apitest.New(t, apitest.Options{Made: true, Config: func(c *config.Config) {
		c.API.DestinationChangesPerAccount = config.Rate{Count: 1000, Per: time.Minute}
	}})
	r.Store.SetStateFormat(func() int { return store.CounterLifetime })
	base := r.URL + fmt.Sprintf(dests, "eventbridge")
	cycle := func(id string) {
		t.Helper()
		body := `{"bus_arn":"arn:aws:events:us-east-1:111122223333:event-bus/api","role_arn":"arn:aws:iam::111122223333:role/api-role"`
		if id != "" {
			body += `,"id":"` + id + `"`
		}
		a := call(t, "POST", base, apitest.Acct1Token, body+"}")
		if a.status != 201 {
			t.Fatalf("create: %d %s", a.status, a.body)
		}
		id, _ = a.json(t)["id"].(string)
		if d := call(t, "DELETE", base+"/"+id, apitest.Acct1Token, ""); d.status != 200 {
			t.Fatalf("delete %s: %d %s", id, d.status, d.body)
		}
	}
	cycle("again") // what the account keeps of any destination (its channel, the registry's keys)
	before := kept(t, r)
	for i := range 20 {
		cycle("") // a new id each time, as the relay makes them
		if i%4 == 0 {
			cycle("again")
		}
	}
	if after := kept(t, r); !slices.Equal(after, before) {
		t.Errorf("the loop left keys for good: %v, were %v", after, before)
	}
	for _, k := range keysOf(t, r) {
		if ttl := r.Store.Client().PTTL(context.Background(), k).Val(); ttl > forgottenFor {
			t.Errorf("%s lives %s, more than the %s docs/api.md says", k, ttl, forgottenFor)
		}
	}
}

// kept lists the keys of the rig's Redis that never expire.
func kept(t *testing.T, r *apitest.Rig) []string {
	t.Helper()
	var out []string
	for _, k := range keysOf(t, r) {
		if r.Store.Client().PTTL(context.Background(), k).Val() < 0 {
			out = append(out, k)
		}
	}
	return out
}

// keysOf lists every key of the rig's Redis, sorted.
func keysOf(t *testing.T, r *apitest.Rig) []string {
	t.Helper()
	keys, err := r.Store.Client().Keys(context.Background(), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(keys)
	return keys
}
