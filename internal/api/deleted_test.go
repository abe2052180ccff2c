package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mercamap/relay/internal/api/apitest"
	"github.com/mercamap/relay/internal/config"
	"github.com/mercamap/relay/internal/store"
	"github.com/mercamap/relay/internal/store/storetest"
)

// forgottenFor is how long docs/api.md says what a deleted destination leaves in Redis
// lives with the rig's delivery.channel_retention (an hour): its channel counter
// max(a day, channel_retention), its lease's fields a day.
const forgottenFor = 24 * time.Hour

// counterLife is what relay serve gives the store (Store.SetDeletedCounterLife) for a
// channel_retention.
func counterLife(channelRetention time.Duration) time.Duration {
	return max(24*time.Hour, channelRetention)
}

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
	r.Store.SetDeletedCounterLife(counterLife(apitest.Delivery().ChannelRetention))
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

// createBody is an EventBridge destination's definition for the API, with id when set.
func createBody(id string) string {
	body := `{"bus_arn":"arn:aws:events:us-east-1:111122223333:event-bus/api","role_arn":"arn:aws:iam::111122223333:role/api-role"`
	if id != "" {
		body += `,"id":"` + id + `"`
	}
	return body + "}"
}

// TestADeletedDestinationsCounterLivesADayOrChannelRetention: a destination deleted
// through the API leaves its channel counter for max(a day, delivery.channel_retention)
// (docs/api.md, Delete): a day with a retention of an hour, 48 hours with one of 48
// hours (a follower's cursor of the deleted channel may rightly be that old); its
// lease's fields a day either way.
func TestADeletedDestinationsCounterLivesADayOrChannelRetention(t *testing.T) {
	for _, retention := range []time.Duration{time.Hour, 48 * time.Hour} {
		t.Run(retention.String(), func(t *testing.T) {
			r := apitest.New(t, apitest.Options{Made: true, Config: func(c *config.Config) {
				c.Delivery.ChannelRetention, c.Delivery.AttemptsRetention = retention, 2*retention
			}})
			r.Store.SetStateFormat(func() int { return store.CounterLifetime })
			r.Store.SetDeletedCounterLife(counterLife(retention)) // as relay serve does
			base := r.URL + fmt.Sprintf(dests, "eventbridge")
			if a := call(t, "POST", base, apitest.Acct1Token, createBody("short-lived")); a.status != 201 {
				t.Fatalf("create: %d %s", a.status, a.body)
			}
			if d := call(t, "DELETE", base+"/short-lived", apitest.Acct1Token, ""); d.status != 200 {
				t.Fatalf("delete: %d %s", d.status, d.body)
			}
			ctx, rdb := context.Background(), r.Store.Client()
			want := max(24*time.Hour, retention)
			counter := storetest.ChanSeqKey(apitest.Acct1, "destination:short-lived")
			if ttl := rdb.PTTL(ctx, counter).Val(); ttl <= want-time.Minute || ttl > want {
				t.Errorf("with channel_retention %s the deleted destination's counter lives %s; want %s", retention, ttl, want)
			}
			lease := storetest.DestKey(apitest.Acct1, "short-lived")
			if ttl := rdb.PTTL(ctx, lease).Val(); ttl <= 24*time.Hour-time.Minute || ttl > 24*time.Hour {
				t.Errorf("with channel_retention %s the deleted destination's lease fields live %s; want a day", retention, ttl)
			}
		})
	}
}

// TestANewDestinationsChannelNumbersFrom1InAnAccountWithEvents: a destination created
// through the API in an account whose channel has events already gets sequence 1 for
// its first channel event, and 2, 3 … after (the contract: each channel has its own
// sequence); its snapshot says so, and the account channel serves its events as
// themselves.
func TestANewDestinationsChannelNumbersFrom1InAnAccountWithEvents(t *testing.T) {
	r := apitest.New(t, apitest.Options{Made: true, Config: func(c *config.Config) {
		c.API.DestinationChangesPerAccount = config.Rate{Count: 1000, Per: time.Minute}
	}})
	r.Store.SetStateFormat(func() int { return store.CounterLifetime })
	base := r.URL + fmt.Sprintf(dests, "eventbridge")
	ctx := context.Background()
	for i := range 3 { // account channel events: each create announces its destination
		id := fmt.Sprintf("earlier-%d", i)
		if a := call(t, "POST", base, apitest.Acct1Token, createBody(id)); a.status != 201 {
			t.Fatalf("create %s: %d %s", id, a.status, a.body)
		}
		if i == 0 {
			if d := call(t, "DELETE", base+"/"+id, apitest.Acct1Token, ""); d.status != 200 {
				t.Fatalf("delete %s: %d %s", id, d.status, d.body)
			}
		}
	}
	account, err := r.Store.ChannelSequence(ctx, apitest.Acct1, store.AccountChannel(apitest.Acct1))
	if err != nil || account < 3 {
		t.Fatalf("the account channel is at %d, %v: the case is not tested", account, err)
	}
	if a := call(t, "POST", base, apitest.Acct1Token, createBody("brand-new")); a.status != 201 {
		t.Fatalf("create: %d %s", a.status, a.body)
	}
	// Its setup check passes, as the dispatcher's would: one more event on its channel.
	if _, err := r.Store.SetupChecked(ctx, store.Ref{Account: apitest.Acct1, ID: "brand-new", Connector: "eventbridge"},
		true, store.PendingCheck{}, time.Hour); err != nil {
		t.Fatal(err)
	}
	page := call(t, "GET", r.URL+"/v1/streams/destination:brand-new/events?after=0", apitest.Acct1Token, "")
	if page.status != 200 {
		t.Fatalf("events: %d %s", page.status, page.body)
	}
	var got struct {
		Events []struct {
			Sequence int64  `json:"sequence"`
			Type     string `json:"type"`
		} `json:"events"`
	}
	if err := json.Unmarshal(page.body, &got); err != nil {
		t.Fatal(err)
	}
	var seqs []int64
	for _, ev := range got.Events {
		seqs = append(seqs, ev.Sequence)
	}
	if len(seqs) < 2 {
		t.Fatalf("the new destination's channel holds %v %s; want its events", seqs, page.body)
	}
	for i, seq := range seqs {
		if seq != int64(i+1) {
			t.Fatalf("the new destination's channel numbers %v in an account channel at %d; want 1, 2, 3 …", seqs, account)
		}
	}
	snap := call(t, "GET", r.URL+"/v1/streams/destination:brand-new/snapshot", apitest.Acct1Token, "")
	if seq, _ := snap.json(t)["sequence"].(float64); snap.status != 200 || int64(seq) != seqs[len(seqs)-1] {
		t.Errorf("the new destination's snapshot: %d %s; want sequence %d", snap.status, snap.body, seqs[len(seqs)-1])
	}
	acct := call(t, "GET", r.URL+"/v1/streams/account:"+apitest.Acct1+"/events?after="+strconv.FormatInt(account, 10),
		apitest.Acct1Token, "")
	var mine []string
	var events struct {
		Events []struct {
			Type string          `json:"type"`
			Data json.RawMessage `json:"data"`
		} `json:"events"`
	}
	if err := json.Unmarshal(acct.body, &events); err != nil || acct.status != 200 {
		t.Fatalf("the account channel: %d %s, %v", acct.status, acct.body, err)
	}
	for _, ev := range events.Events {
		var d struct {
			Destination string `json:"destination"`
			Reason      string `json:"reason"`
		}
		_ = json.Unmarshal(ev.Data, &d)
		if d.Destination == "brand-new" {
			mine = append(mine, ev.Type)
			if strings.Contains(d.Reason, "no longer kept") {
				t.Errorf("the account channel serves the new destination's event as gone: %s %s", ev.Type, ev.Data)
			}
		}
	}
	if len(mine) != len(seqs) {
		t.Errorf("the account channel after %d holds the new destination's %v; want its %d events", account, mine, len(seqs))
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
