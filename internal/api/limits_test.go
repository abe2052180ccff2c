package api_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mercamap/relay/internal/api/apitest"
	"github.com/mercamap/relay/internal/config"
)

// slowBody opens a connection that sends a request declaring a body, without a token,
// and never sends the body. closed is done when the relay closes the connection.
func slowBody(t *testing.T, addr string) (closed <-chan struct{}) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_, err = io.WriteString(c, "POST /v1/connectors/eventbridge/destinations/orders-bus/pause HTTP/1.1\r\n"+
		"Host: relay\r\nContent-Type: application/json\r\nContent-Length: 4096\r\n\r\n")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Minute)) // the test's own bound
		_, _ = io.Copy(io.Discard, c)
	}()
	return done
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func countOpen(conns []<-chan struct{}) int {
	n := 0
	for _, c := range conns {
		if !isClosed(c) {
			n++
		}
	}
	return n
}

// healthzWithin calls /healthz on a new connection and fails unless it answers 200 in time.
func healthzWithin(t *testing.T, url string, d time.Duration) {
	t.Helper()
	client := &http.Client{Timeout: d, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get(url + "/healthz")
	if err != nil {
		t.Fatalf("/healthz while slow connections are held: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("/healthz: %d", resp.StatusCode)
	}
}

func TestSlowBodiesAreCutAfterReadTimeoutAndHealthzAnswersMeanwhile(t *testing.T) {
	const readTimeout = time.Second
	r := apitest.New(t, apitest.Options{Config: func(c *config.Config) {
		c.API.HTTP.ReadHeaderTimeout, c.API.HTTP.ReadTimeout = readTimeout, readTimeout
	}})
	addr := strings.TrimPrefix(r.URL, "http://")
	opened := time.Now()
	var conns []<-chan struct{}
	for range 300 {
		conns = append(conns, slowBody(t, addr))
	}
	healthzWithin(t, r.URL, 2*time.Second)
	if open := countOpen(conns); open == 0 {
		t.Fatal("every slow connection was closed before /healthz was asked: the test shows nothing")
	}
	// A subscription lives past read_timeout: the bound is on reading requests only.
	s := subscribe(t, r.URL+"/v1/streams/destination:orders-bus/subscribe", apitest.Acct1Token, "")
	subscribed := time.Now()

	apitest.WaitFor(t, 15*readTimeout, "the relay to close every slow-body connection", func() bool {
		return countOpen(conns) == 0
	})
	if took := time.Since(opened); took < readTimeout {
		t.Errorf("slow connections closed after %s, before read_timeout (%s)", took, readTimeout)
	}
	// What the test waits for here is time itself: the subscription older than the bound.
	<-time.After(time.Until(subscribed.Add(2 * readTimeout)))
	call(t, "POST", r.URL+fmt.Sprintf(dests, "eventbridge")+"/orders-bus/pause", apitest.AdminToken, "")
	if f := s.nextEvent(t); f.event != "destination.paused" {
		t.Fatalf("subscription after read_timeout: %+v", f)
	}
}

// rawGet sends a GET on an open connection and reads the answer's status.
func rawGet(t *testing.T, c net.Conn, rd *bufio.Reader, path, token string) int {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: relay\r\nAuthorization: Bearer %s\r\n\r\n", path, token); err != nil {
		t.Fatalf("write on the authenticated connection: %v", err)
	}
	resp, err := http.ReadResponse(rd, nil)
	if err != nil {
		t.Fatalf("read on the authenticated connection: %v", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

func TestPastMaxConnectionsTheOldestConnectionsWithoutATokenAreClosed(t *testing.T) {
	const maxConns = 20
	r := apitest.New(t, apitest.Options{Config: func(c *config.Config) {
		c.API.HTTP.MaxConnections = maxConns
		c.API.HTTP.ReadHeaderTimeout, c.API.HTTP.ReadTimeout = time.Minute, time.Minute // only the cap closes them
	}})
	addr := strings.TrimPrefix(r.URL, "http://")
	// A customer's keep-alive connection, authenticated before the flood.
	customer, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer customer.Close()
	rd := bufio.NewReader(customer)
	if status := rawGet(t, customer, rd, "/v1/connectors", apitest.Acct1Token); status != 200 {
		t.Fatalf("customer's first call: %d", status)
	}

	var conns []<-chan struct{}
	for range 5 * maxConns {
		conns = append(conns, slowBody(t, addr))
	}
	apitest.WaitFor(t, 20*time.Second, "the relay to hold at most max_connections", func() bool {
		return countOpen(conns) <= maxConns-1 // the customer holds one
	})
	for i := range conns[:len(conns)-maxConns] {
		if !isClosed(conns[i]) {
			apitest.WaitFor(t, 10*time.Second, "the oldest slow connections to be the ones closed", func() bool { return isClosed(conns[i]) })
		}
	}
	for range 5 {
		healthzWithin(t, r.URL, 2*time.Second)
	}
	if status := rawGet(t, customer, rd, "/v1/connectors", apitest.Acct1Token); status != 200 {
		t.Fatalf("the authenticated connection after the flood: %d", status)
	}
}

func TestABodyLargerThanMaxBodyBytesIsRefused(t *testing.T) {
	r := apitest.New(t, apitest.Options{Config: func(c *config.Config) { c.API.HTTP.MaxBodyBytes = 1024 }})
	bus := r.URL + fmt.Sprintf(dests, "eventbridge") + "/orders-bus"
	body := `{"reason":"` + strings.Repeat("x", 2048) + `"}`
	a := call(t, "POST", bus+"/disable", apitest.AdminToken, body)
	if a.status != 400 || a.errorCode(t) != "INVALID_ARGUMENT" || !strings.Contains(string(a.body), "1024 bytes") {
		t.Fatalf("a 2 KiB body against max_body_bytes 1024: %d %s", a.status, a.body)
	}
	if card := call(t, "GET", bus, apitest.AdminToken, "").json(t); card["status"] != "active" {
		t.Fatalf("the refused disable changed the destination: %v", card["status"])
	}
}

// tryToSubscribe opens a subscription and returns its status; a 200 stays open until
// the test ends or close is called.
func tryToSubscribe(t *testing.T, url, token string) (status int, body string, closeIt func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(b), cancel
	}
	return 200, "", func() { cancel(); resp.Body.Close() }
}

func TestSubscriptionsPastTheTokenOrAccountCapAre429ResourceExhausted(t *testing.T) {
	const secondToken = "acct1-second-token-0123456789"
	r := apitest.New(t, apitest.Options{Config: func(c *config.Config) {
		c.API.SubscriptionsPerToken, c.API.SubscriptionsPerAccount = 2, 3
		c.API.Tokens = append(c.API.Tokens, config.Token{Scope: "account:" + apitest.Acct1, Token: secondToken})
	}})
	bus := r.URL + "/v1/streams/destination:orders-bus/subscribe"
	acct := r.URL + "/v1/streams/account:acct_1/subscribe"
	exhausted := func(what string, status int, body string) {
		t.Helper()
		a := answer{status: status, body: []byte(body)}
		if status != 429 || a.errorCode(t) != "RESOURCE_EXHAUSTED" {
			t.Fatalf("%s: %d %s, want 429 RESOURCE_EXHAUSTED", what, status, body)
		}
	}
	ok := func(what string, status int, body string) {
		t.Helper()
		if status != 200 {
			t.Fatalf("%s: %d %s", what, status, body)
		}
	}
	st, b, first := tryToSubscribe(t, bus, apitest.Acct1Token)
	ok("first of the token", st, b)
	st, b, _ = tryToSubscribe(t, acct, apitest.Acct1Token)
	ok("second of the token", st, b)
	st, b, _ = tryToSubscribe(t, bus, apitest.Acct1Token)
	exhausted("third of the token (subscriptions_per_token 2)", st, b)

	st, b, _ = tryToSubscribe(t, bus, secondToken)
	ok("the account's second token", st, b)
	st, b, _ = tryToSubscribe(t, acct, secondToken)
	exhausted("the account's fourth (subscriptions_per_account 3)", st, b)

	// Other accounts and the admin are not held back by acct_1's.
	st, b, _ = tryToSubscribe(t, r.URL+"/v1/streams/destination:other-bus/subscribe", apitest.Acct2Token)
	ok("another account's", st, b)
	st, b, _ = tryToSubscribe(t, bus, apitest.AdminToken)
	ok("the admin's", st, b)

	// Closing one gives its place back.
	first()
	apitest.WaitFor(t, 10*time.Second, "the closed subscription's place to come back", func() bool {
		st, _, closeIt := tryToSubscribe(t, bus, apitest.Acct1Token)
		closeIt()
		return st == 200
	})
}

func TestSendATestIsRateLimitedPerDestinationAndPerAccountWithRetryAfter(t *testing.T) {
	r := apitest.New(t, apitest.Options{Config: func(c *config.Config) {
		c.API.TestsPerDestination = config.Rate{Count: 2, Per: time.Hour}
		c.API.TestsPerAccount = config.Rate{Count: 3, Per: time.Hour}
	}})
	test := func(connector, id, token string) answer {
		return call(t, "POST", r.URL+fmt.Sprintf(dests, connector)+"/"+id+"/test", token, "")
	}
	for i := range 2 {
		if a := test("eventbridge", "orders-bus", apitest.Acct1Token); a.status != 200 {
			t.Fatalf("test %d of orders-bus: %d %s", i+1, a.status, a.body)
		}
	}
	a := test("eventbridge", "orders-bus", apitest.Acct1Token)
	checkExhausted(t, "third test of orders-bus (2 per hour)", a, 30*time.Minute)

	if a := test("kinesis", "orders-stream", apitest.Acct1Token); a.status != 200 {
		t.Fatalf("acct_1's third test, on another destination: %d %s", a.status, a.body)
	}
	a = test("pubsub", "orders-topic", apitest.AdminToken) // an admin's test counts for the account too
	checkExhausted(t, "acct_1's fourth test (3 per hour)", a, 20*time.Minute)

	if a := test("eventbridge", "other-bus", apitest.Acct2Token); a.status != 200 {
		t.Fatalf("acct_2's test while acct_1 is limited: %d %s", a.status, a.body)
	}
	if got := len(r.Sink.Delivered("orders-bus")) + len(r.Sink.Delivered("orders-stream")) + len(r.Sink.Delivered("orders-topic")); got != 3 {
		t.Errorf("acct_1's sinks got %d test writes, want 3: a refused test must not reach the sink", got)
	}
}

// checkExhausted checks a 429 RESOURCE_EXHAUSTED with Retry-After and the same wait in
// its details, at least least.
func checkExhausted(t *testing.T, what string, a answer, least time.Duration) {
	t.Helper()
	if a.status != 429 || a.errorCode(t) != "RESOURCE_EXHAUSTED" {
		t.Fatalf("%s: %d %s, want 429 RESOURCE_EXHAUSTED", what, a.status, a.body)
	}
	secs, err := strconv.Atoi(a.header.Get("Retry-After"))
	if err != nil || time.Duration(secs)*time.Second < least {
		t.Fatalf("%s: Retry-After %q, want whole seconds of at least %s", what, a.header.Get("Retry-After"), least)
	}
	e, _ := a.json(t)["error"].(map[string]any)
	details, _ := e["details"].(map[string]any)
	if details["retry_after_seconds"] != float64(secs) {
		t.Fatalf("%s: details %v, want retry_after_seconds %d as in Retry-After", what, e["details"], secs)
	}
}

func TestChannelRoutesAnswerAnotherAccountsDestinationAndAMissingOneAlike(t *testing.T) {
	r := apitest.New(t, apitest.Options{})
	for _, route := range []string{"snapshot", "events?after=0", "subscribe"} {
		theirs := call(t, "GET", r.URL+"/v1/streams/destination:orders-bus/"+route, apitest.Acct2Token, "")
		missing := call(t, "GET", r.URL+"/v1/streams/destination:no-such-dest/"+route, apitest.Acct2Token, "")
		if theirs.status != missing.status || string(theirs.body) != string(missing.body) {
			t.Errorf("%s: another account's destination answers %d %s; a missing one %d %s: an account token can tell which ids exist",
				route, theirs.status, theirs.body, missing.status, missing.body)
		}
		if theirs.status != 403 || theirs.errorCode(t) != "ACCESS_REVOKED" {
			t.Errorf("%s: another account's destination channel: %d %s, want the contract's 403 ACCESS_REVOKED", route, theirs.status, theirs.body)
		}
	}
	// The admin sees every id: a missing one is simply not found.
	if a := call(t, "GET", r.URL+"/v1/streams/destination:no-such-dest/snapshot", apitest.AdminToken, ""); a.status != 404 {
		t.Errorf("admin, missing destination channel: %d", a.status)
	}
}

func TestEachChannelEventIsReadAndEncodedOnceForAllItsSubscribers(t *testing.T) {
	r := apitest.New(t, apitest.Options{})
	const subscribers, events = 40, 6
	var streams []*sse
	for range subscribers {
		streams = append(streams, subscribe(t, r.URL+"/v1/streams/destination:orders-bus/subscribe", apitest.AdminToken, ""))
	}
	rdb := r.Store.Client()
	if err := rdb.ConfigResetStat(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	bus := r.URL + fmt.Sprintf(dests, "eventbridge") + "/orders-bus"
	for i := range events {
		action := "/pause"
		if i%2 == 1 {
			action = "/activate"
		}
		call(t, "POST", bus+action, apitest.AdminToken, "")
	}
	var wg sync.WaitGroup
	var wrong atomic.Int32
	for _, s := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for want := 1; want <= events; want++ {
				f, err := s.next()
				for err == nil && f.comment != "" {
					f, err = s.next()
				}
				if err != nil || f.id != strconv.Itoa(want) {
					wrong.Add(1)
					return
				}
			}
		}()
	}
	wg.Wait()
	if n := wrong.Load(); n > 0 {
		t.Fatalf("%d subscribers did not get events 1…%d in order", n, events)
	}
	stats, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	reads := 0
	for _, line := range strings.Split(stats, "\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_xrange:calls="); ok {
			reads, _ = strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
		}
	}
	// One read of the channel is two XRANGEs (the first retained entry, then the page).
	// Shared, that is at most one read per event for all 40; alone, 40 per event.
	if reads > 2*events+2 {
		t.Fatalf("%d subscribers and %d events cost %d XRANGE calls: each subscriber reads the channel itself (want at most %d)",
			subscribers, events, reads, 2*events+2)
	}
}
