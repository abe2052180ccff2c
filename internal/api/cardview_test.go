package api_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"testing"

	"github.com/mercamap/relay/internal/api"
	"github.com/mercamap/relay/internal/api/apitest"
	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/dispatch"
	"github.com/mercamap/relay/internal/stream"
	"github.com/mercamap/relay/internal/testpeer"
)

// TestACardAnswerIsOneRedisRoundTripAndShowsAnotherReplicasChange: a destination's GET
// costs one Redis round trip, lag and replayable_from included, whether the card was
// built before or not; a list costs one per card. A pause made
// through another replica shows on this one's next answer, and both replicas answer
// the same bytes.
func TestACardAnswerIsOneRedisRoundTripAndShowsAnotherReplicasChange(t *testing.T) {
	r := apitest.New(t, apitest.Options{})
	counter := &testpeer.RoundTrips{}
	r.Store.Client().AddHook(counter)
	bus := fmt.Sprintf(dests, "eventbridge") + "/orders-bus"
	count := func(what, path string, want int64) answer {
		t.Helper()
		counter.N.Store(0)
		a := call(t, "GET", r.URL+path, apitest.Acct1Token, "")
		if a.status != 200 {
			t.Fatalf("%s: %d %s", what, a.status, a.body)
		}
		if n := counter.N.Load(); n != want {
			t.Fatalf("%s: %d Redis round trips, want %d", what, n, want)
		}
		return a
	}
	call(t, "GET", r.URL+"/v1/connectors", apitest.Acct1Token, "") // the token's first use, whatever it costs
	count("no card", "/v1/connectors", 0)
	call(t, "GET", r.URL+bus, apitest.Acct1Token, "") // loads the script
	card := count("a card built before", bus, 1).json(t)
	if _, ok := card["lag"]; !ok {
		t.Fatalf("the card has no lag: %v", card)
	}
	if _, ok := card["replayable_from"]; !ok {
		t.Fatalf("the card has no replayable_from: %v", card)
	}
	count("acct_1's eventbridge list (one card)", fmt.Sprintf(dests, "eventbridge"), 1)
	count("acct_1's pubsub list (one card)", fmt.Sprintf(dests, "pubsub"), 1)

	other := r.Replica()
	if a := call(t, "POST", other+bus+"/pause", apitest.AdminToken, ""); a.status != 200 {
		t.Fatalf("pause on the other replica: %d %s", a.status, a.body)
	}
	here := count("the card after another replica's pause", bus, 1)
	if got := here.json(t)["status"]; got != "paused" {
		t.Fatalf("status %v after the other replica's pause", got)
	}
	there := call(t, "GET", other+bus, apitest.Acct1Token, "")
	if !bytes.Equal(here.body, there.body) {
		t.Fatalf("the replicas answer differently:\n%s\n%s", here.body, there.body)
	}
}

// directorySpy is the rig's real dispatcher, counting which of its destinations the
// API and the channels asked for.
type directorySpy struct {
	*dispatch.Dispatcher
	mu       sync.Mutex
	all      int
	accounts []string
}

func (s *directorySpy) Destinations() []destination.Destination {
	s.mu.Lock()
	s.all++
	s.mu.Unlock()
	return s.Dispatcher.Destinations()
}

func (s *directorySpy) AccountDestinations(acct string) []destination.Destination {
	s.mu.Lock()
	s.accounts = append(s.accounts, acct)
	s.mu.Unlock()
	return s.Dispatcher.AccountDestinations(acct)
}

// TestAnAccountTokensRoutesReadOnlyItsAccountsDestinations: the connectors, the lists
// (also one naming another account), a card, the account's snapshot and replay, and a
// destination channel's snapshot, asked with acct_1's token, ask the dispatcher for
// acct_1's destinations alone, never for every one; and they answer acct_1's alone. An
// admin's list still reads every one.
func TestAnAccountTokensRoutesReadOnlyItsAccountsDestinations(t *testing.T) {
	r := apitest.New(t, apitest.Options{})
	spy := &directorySpy{Dispatcher: r.Dispatcher}
	streams := stream.New(stream.Options{Store: r.Store, Directory: spy, Identity: apitest.Identity})
	url := newServer(t, api.New(api.Options{Config: apitest.Config(), Destinations: spy, Store: r.Store, Streams: streams}))
	for _, path := range []string{
		"/v1/connectors",
		fmt.Sprintf(dests, "eventbridge"),
		fmt.Sprintf(dests, "kinesis") + "?page_size=10",
		fmt.Sprintf(dests, "eventbridge") + "?account=" + apitest.Acct2,
		fmt.Sprintf(dests, "eventbridge") + "/orders-bus",
		"/v1/streams/account:" + apitest.Acct1 + "/snapshot",
		"/v1/streams/account:" + apitest.Acct1 + "/events",
		"/v1/streams/destination:orders-bus/snapshot",
	} {
		a := call(t, "GET", url+path, apitest.Acct1Token, "")
		if a.status != 200 {
			t.Fatalf("%s: %d %s", path, a.status, a.body)
		}
		if bytes.Contains(a.body, []byte("other-bus")) || bytes.Contains(a.body, []byte(apitest.Acct2+`"`)) {
			t.Fatalf("%s answers acct_2's destination: %s", path, a.body)
		}
	}
	spy.mu.Lock()
	all, accounts := spy.all, slices.Compact(slices.Sorted(slices.Values(spy.accounts)))
	spy.mu.Unlock()
	if all != 0 || !slices.Equal(accounts, []string{apitest.Acct1}) {
		t.Fatalf("acct_1's routes read every destination %d times and the accounts %v; want 0 and only acct_1", all, accounts)
	}
	connectors := call(t, "GET", url+"/v1/connectors", apitest.Acct1Token, "").json(t)
	if got := fmt.Sprint(connectors["connectors"]); got != "[map[connector:eventbridge destinations:1] map[connector:kinesis destinations:1] map[connector:pubsub destinations:1]]" {
		t.Fatalf("acct_1's connectors: %s", got)
	}
	if list := call(t, "GET", url+fmt.Sprintf(dests, "eventbridge"), apitest.AdminToken, "").json(t); len(list["destinations"].([]any)) != 2 {
		t.Fatalf("the admin's eventbridge list: %v", list)
	}
	if spy.all != 1 {
		t.Fatalf("the admin's list read every destination %d times, want 1", spy.all)
	}
}

// BenchmarkCardAnswer times GET of one destination's card over HTTP, its state
// unchanged since the last answer (the common read), and counts its Redis round trips.
//
//	go test -run=NONE -bench=CardAnswer -benchtime=2000x ./internal/api/
func BenchmarkCardAnswer(b *testing.B) {
	r := apitest.New(b, apitest.Options{})
	counter := &testpeer.RoundTrips{}
	r.Store.Client().AddHook(counter)
	url := r.URL + fmt.Sprintf(dests, "eventbridge") + "/orders-bus"
	r.Publish(apitest.Acct1, 3) // a backlog, so the lag is read whole
	get := func() {
		req, err := http.NewRequest("GET", url, nil)
		if err != nil {
			b.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+apitest.Acct1Token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("GET card: %d", resp.StatusCode)
		}
	}
	get()
	counter.N.Store(0)
	b.ResetTimer()
	for range b.N {
		get()
	}
	b.StopTimer()
	b.ReportMetric(float64(counter.N.Load())/float64(b.N), "redis-round-trips/op")
}
