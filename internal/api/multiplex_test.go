package api_test

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/mercamap/relay/internal/api"
	"github.com/mercamap/relay/internal/api/apitest"
	"github.com/mercamap/relay/internal/config"
	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/failures"
	"github.com/mercamap/relay/internal/stream"
)

// multiplexURL is the multiplexed subscribe route for channels, each a name or
// "<name> <sequence>".
func multiplexURL(base string, channels ...string) string {
	q := url.Values{}
	for _, c := range channels {
		q.Add("channel", c)
	}
	return base + "/v1/streams/subscribe?" + q.Encode()
}

func TestOneMultiplexedSubscriptionCarriesEachChannelNamedWithPointersKeepAlivesAndResume(t *testing.T) {
	r := apitest.New(t, apitest.Options{Stream: stream.Options{BroadcastLimit: 2048, KeepAlive: 30 * time.Millisecond}})
	bus := r.URL + fmt.Sprintf(dests, "eventbridge") + "/orders-bus"
	topic := r.URL + fmt.Sprintf(dests, "pubsub") + "/orders-topic"
	call(t, "POST", bus+"/pause", apitest.AdminToken, "") // orders-bus 1, before the subscription

	s := subscribe(t, multiplexURL(r.URL, "destination:orders-bus", "destination:orders-topic"), apitest.Acct1Token, "")
	call(t, "POST", topic+"/pause", apitest.AdminToken, "")  // orders-topic 1
	call(t, "POST", bus+"/activate", apitest.AdminToken, "") // orders-bus 2
	big := "AccessDeniedException: " + strings.Repeat("the role may not publish to the topic; ", 100)
	r.Sink.SetBehave(func(string, destination.Message) error { return failures.NewRejected(big, nil) })
	call(t, "POST", topic+"/activate", apitest.AdminToken, "") // orders-topic 2
	call(t, "POST", topic+"/test", apitest.AdminToken, "")     // orders-topic 3: too large, a pointer

	want := []struct{ id, event string }{
		{"destination:orders-topic 1", "destination.paused"},
		{"destination:orders-bus 2", "destination.activated"},
		{"destination:orders-topic 2", "destination.activated"},
		{"destination:orders-topic 3", "relay-pointer/1"},
	}
	// Channels are independent streams: each one's order holds, not the order between them.
	got := map[string][]string{}
	for range want {
		f := s.nextEvent(t)
		name, _, _ := strings.Cut(f.id, " ")
		got[name] = append(got[name], f.id+" "+f.event)
		if f.event == "relay-pointer/1" {
			if f.data != `{"sequence":3}` {
				t.Errorf("pointer data %s, want {\"sequence\":3}", f.data)
			}
			continue
		}
		var ev stream.Event
		if err := json.Unmarshal([]byte(f.data), &ev); err != nil || ev.ID != strings.Replace(f.id, " ", ":", 1) || ev.Type != f.event {
			t.Errorf("frame %+v: its data is not the event replay shows (%v)", f, err)
		}
	}
	for _, w := range want {
		name, _, _ := strings.Cut(w.id, " ")
		if len(got[name]) == 0 || got[name][0] != w.id+" "+w.event {
			t.Fatalf("the frames of %s came as %v; want %s %s next", name, got[name], w.id, w.event)
		}
		got[name] = got[name][1:]
	}
	// Each channel has its keep-alive, naming the last sequence it passed.
	seen := map[string]bool{}
	for len(seen) < 2 {
		f, err := s.next()
		if err != nil {
			t.Fatal(err)
		}
		if f.comment == "keep-alive destination:orders-bus 2" || f.comment == "keep-alive destination:orders-topic 3" {
			seen[f.comment] = true
		}
	}

	// Resuming: orders-bus after 1 sends 2 again; orders-topic from now.
	again := subscribe(t, multiplexURL(r.URL, "destination:orders-bus 1", "destination:orders-topic"), apitest.Acct1Token, "")
	if f := again.nextEvent(t); f.id != "destination:orders-bus 2" {
		t.Fatalf("resumed frame %+v, want destination:orders-bus 2", f)
	}
	call(t, "POST", topic+"/pause", apitest.AdminToken, "") // orders-topic 4 (a pointer: it carries the long failure)
	if f := again.nextEvent(t); f.id != "destination:orders-topic 4" {
		t.Fatalf("frame %+v, want destination:orders-topic 4: a channel named without a sequence starts at its current one", f)
	}
}

func TestMultiplexedSubscribeChecksEachChannelAsTheSingleRouteDoes(t *testing.T) {
	r := apitest.New(t, apitest.Options{})
	single := call(t, "GET", r.URL+"/v1/streams/destination:orders-bus/subscribe", apitest.Acct2Token, "")
	theirs := call(t, "GET", multiplexURL(r.URL, "destination:other-bus", "destination:orders-bus"), apitest.Acct2Token, "")
	missing := call(t, "GET", multiplexURL(r.URL, "destination:other-bus", "destination:no-such-dest"), apitest.Acct2Token, "")
	if theirs.status != 403 || theirs.errorCode(t) != "ACCESS_REVOKED" {
		t.Errorf("another account's channel among its own: %d %s, want 403 ACCESS_REVOKED", theirs.status, theirs.body)
	}
	if string(theirs.body) != string(missing.body) || theirs.status != missing.status {
		t.Errorf("another account's destination answers %d %s; a missing one %d %s: an account token can tell which ids exist",
			theirs.status, theirs.body, missing.status, missing.body)
	}
	if string(theirs.body) != string(single.body) {
		t.Errorf("the multiplexed route answers %s, the single-channel one %s", theirs.body, single.body)
	}
	if a := call(t, "GET", multiplexURL(r.URL, "account:acct_1"), apitest.Acct2Token, ""); a.status != 403 || a.errorCode(t) != "ACCESS_REVOKED" {
		t.Errorf("another account's account channel: %d %s", a.status, a.body)
	}
	if a := call(t, "GET", multiplexURL(r.URL, "destination:orders-bus", "destination:no-such-dest"), apitest.AdminToken, ""); a.status != 404 || a.errorCode(t) != "NOT_FOUND" {
		t.Errorf("admin, a missing destination among others: %d %s, want 404 NOT_FOUND", a.status, a.body)
	}
	if a := call(t, "GET", multiplexURL(r.URL, "destination:orders-bus"), "nope", ""); a.status != 401 {
		t.Errorf("unknown token: %d", a.status)
	}
	for what, u := range map[string]string{
		"no channel":          r.URL + "/v1/streams/subscribe",
		"a channel twice":     multiplexURL(r.URL, "destination:orders-bus", "destination:orders-bus 3"),
		"a bad resume point":  multiplexURL(r.URL, "destination:orders-bus yesterday"),
		"a negative sequence": multiplexURL(r.URL, "destination:orders-bus -1"),
	} {
		if a := call(t, "GET", u, apitest.AdminToken, ""); a.status != 400 || a.errorCode(t) != "INVALID_ARGUMENT" {
			t.Errorf("%s: %d %s, want 400 INVALID_ARGUMENT", what, a.status, a.body)
		}
	}
}

func TestAMultiplexedSubscriptionCountsOnceAgainstTheCapsAndHoldsAtMostAHundredChannels(t *testing.T) {
	r := apitest.New(t, apitest.Options{Config: func(c *config.Config) {
		c.API.SubscriptionsPerToken, c.API.SubscriptionsPerAccount = 1, 1
	}})
	all := multiplexURL(r.URL, "destination:orders-bus", "destination:orders-stream", "destination:orders-topic", "account:acct_1")
	st, b, closeIt := tryToSubscribe(t, all, apitest.Acct1Token)
	if st != 200 {
		t.Fatalf("four channels on one subscription with subscriptions_per_token 1: %d %s", st, b)
	}
	st, b, _ = tryToSubscribe(t, r.URL+"/v1/streams/destination:orders-bus/subscribe", apitest.Acct1Token)
	if a := (answer{status: st, body: []byte(b)}); st != 429 || a.errorCode(t) != "RESOURCE_EXHAUSTED" {
		t.Fatalf("a second subscription of the token: %d %s, want 429 RESOURCE_EXHAUSTED", st, b)
	}
	closeIt()
	apitest.WaitFor(t, 10*time.Second, "the multiplexed subscription's place to come back", func() bool {
		st, _, closeIt := tryToSubscribe(t, all, apitest.Acct1Token)
		closeIt()
		return st == 200
	})

	var many []string
	for i := range api.MaxMultiplexChannels + 1 {
		many = append(many, fmt.Sprintf("destination:d%d", i))
	}
	if a := call(t, "GET", multiplexURL(r.URL, many...), apitest.AdminToken, ""); a.status != 400 || a.errorCode(t) != "INVALID_ARGUMENT" {
		t.Errorf("%d channels on one subscription: %d %s, want 400", len(many), a.status, a.body)
	}
}

func TestAReloadThatRemovesOneOfItsChannelsEndsTheMultiplexedSubscription(t *testing.T) {
	r := apitest.New(t, apitest.Options{})
	s := subscribe(t, multiplexURL(r.URL, "destination:orders-bus", "destination:orders-topic"), apitest.Acct1Token, "")
	cfg := apitest.Config()
	cfg.API.Tokens[1].Scope = "account:" + apitest.Acct2 // the token now speaks for another account
	r.API.Reload(cfg)
	ended := make(chan error, 1)
	go func() {
		for {
			if _, err := s.next(); err != nil {
				ended <- err
				return
			}
		}
	}()
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the subscription is still open after its token lost the account")
	}
}

// TestAMultiplexedSequenceFollowsTheNameAfterASpaceAndPercent2BIsPartOfTheName: docs/api.md
// writes channel=<name>[+<sequence>], the document a space; both say the same: the "+"
// is the query's space, and "%20" is too. "%2B" is a plus sign, which ids may hold
// (orders+eu), so it is part of the name; a refusal of a name ending "+<digits>" says to
// write a space instead.
func TestAMultiplexedSequenceFollowsTheNameAfterASpaceAndPercent2BIsPartOfTheName(t *testing.T) {
	r := apitest.New(t, apitest.Options{Config: func(c *config.Config) {
		eu := apitest.Destinations()[0]
		eu.ID, eu.BusARN = "orders+eu", "arn:aws:events:eu-west-1:111122223333:event-bus/orders"
		c.Destinations = append(c.Destinations, eu)
	}})
	bus := r.URL + fmt.Sprintf(dests, "eventbridge") + "/orders-bus"
	call(t, "POST", bus+"/pause", apitest.AdminToken, "")    // orders-bus 1
	call(t, "POST", bus+"/activate", apitest.AdminToken, "") // orders-bus 2
	for _, q := range []string{"channel=destination:orders-bus+1", "channel=destination:orders-bus%201", "channel=destination%3Aorders-bus+1"} {
		s := subscribe(t, r.URL+"/v1/streams/subscribe?"+q, apitest.Acct1Token, "")
		if f := s.nextEvent(t); f.id != "destination:orders-bus 2" {
			t.Errorf("?%s: first frame %s, want destination:orders-bus 2 (resumed after 1)", q, f.id)
		}
	}

	eu := r.URL + fmt.Sprintf(dests, "eventbridge") + "/orders+eu"
	if a := call(t, "POST", eu+"/pause", apitest.AdminToken, ""); a.status != 200 { // orders+eu 1
		t.Fatalf("pause orders+eu: %d %s", a.status, a.body)
	}
	for _, q := range []string{"channel=destination:orders%2Beu+0", "channel=destination:orders%2Beu%200", "channel=destination:orders%2Beu&channel=destination:orders-bus+1"} {
		s := subscribe(t, r.URL+"/v1/streams/subscribe?"+q, apitest.Acct1Token, "")
		want := "destination:orders+eu 1"
		if !strings.Contains(q, "+0") && !strings.Contains(q, "%200") {
			want = "destination:orders-bus 2" // orders+eu from now: nothing yet
		}
		if f := s.nextEvent(t); f.id != want {
			t.Errorf("?%s: first frame %s, want %s", q, f.id, want)
		}
	}

	for token, want := range map[string]struct {
		status int
		code   string
	}{apitest.AdminToken: {404, "NOT_FOUND"}, apitest.Acct1Token: {403, "ACCESS_REVOKED"}} {
		a := call(t, "GET", r.URL+"/v1/streams/subscribe?channel=destination:orders-bus%2B1", token, "")
		if a.status != want.status || a.errorCode(t) != want.code || !strings.Contains(a.errorMessage(t), `after a space, written "+" or "%20"`) {
			t.Errorf("a sequence written %%2B, to %s: %d %s; want %d %s saying to write a space", token, a.status, a.body, want.status, want.code)
		}
	}
	if a := call(t, "GET", r.URL+"/v1/streams/subscribe?channel=destination:orders-bus+x", apitest.Acct1Token, ""); a.status != 400 ||
		!strings.Contains(a.errorMessage(t), "a whole number") {
		t.Errorf("a sequence that is not a number: %d %s", a.status, a.body)
	}
}
