package api_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mercamap/relay/internal/api/apitest"
	"github.com/mercamap/relay/internal/config"
	"github.com/mercamap/relay/internal/destination"
)

// keptConn is a keep-alive connection a test sends raw requests on.
type keptConn struct {
	c  net.Conn
	rd *bufio.Reader
}

func dialKept(t *testing.T, addr string) *keptConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &keptConn{c: c, rd: bufio.NewReader(c)}
}

// get sends one GET with token on the connection; err is set when the relay closed it
// instead of answering.
func (k *keptConn) get(path, token string) (answer, error) {
	_ = k.c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprintf(k.c, "GET %s HTTP/1.1\r\nHost: relay\r\nAuthorization: Bearer %s\r\n\r\n", path, token); err != nil {
		return answer{}, err
	}
	resp, err := http.ReadResponse(k.rd, nil)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return answer{status: resp.StatusCode, body: b, header: resp.Header}, err
}

// fresh sends one request on a new connection, as a probe or a new client does.
func fresh(t *testing.T, url, token string) (answer, error) {
	t.Helper()
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	req, _ := http.NewRequest("GET", url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return answer{status: resp.StatusCode, body: b, header: resp.Header}, err
}

// The attack: one account token opens every connection the API allows and keeps
// them open. The probes and another account still get in, 5 out of 5, and the hog's
// connections past its share are answered 429 with Retry-After, not held.
func TestOneAccountTokenHoldingTheWholeConnectionCapLeavesHealthAndOtherAccountsIn(t *testing.T) {
	def := config.DefaultAPI().HTTP
	// The shipped shares: a token a sixteenth of the pool, an account an eighth, a few
	// places kept for the probes. The test runs the same shares of a smaller pool.
	if def.MaxConnectionsPerToken*16 > def.MaxConnections || def.MaxConnectionsPerAccount*8 > def.MaxConnections ||
		def.MaxConnectionsPerToken > def.MaxConnectionsPerAccount || def.HealthConnections < 1 {
		t.Fatalf("default shares %+v: one token or account may hold more than the test assumes", def)
	}
	const maxConns = 200
	scaled := func(n int) int { return max(1, n*maxConns/def.MaxConnections) }
	perToken := scaled(def.MaxConnectionsPerToken)
	r := apitest.New(t, apitest.Options{Config: func(c *config.Config) {
		c.API.HTTP.MaxConnections = maxConns
		c.API.HTTP.HealthConnections = scaled(def.HealthConnections)
		c.API.HTTP.MaxConnectionsPerToken = perToken
		c.API.HTTP.MaxConnectionsPerAccount = scaled(def.MaxConnectionsPerAccount)
		c.API.HTTP.ReadHeaderTimeout, c.API.HTTP.ReadTimeout = time.Minute, time.Minute // only the caps close them
	}})
	addr := strings.TrimPrefix(r.URL, "http://")
	card := fmt.Sprintf(dests, "eventbridge") + "/orders-bus"

	// The hog: one keep-alive connection after another, each authenticated with its card.
	var kept []*keptConn
	refused := 0
	for i := range maxConns {
		k := dialKept(t, addr)
		a, err := k.get(card, apitest.Acct1Token)
		switch {
		case err != nil:
			t.Fatalf("hog connection %d: closed without an answer (%v), want 200 or 429 with Retry-After", i, err)
		case a.status == 200:
			kept = append(kept, k)
		default:
			checkExhausted(t, fmt.Sprintf("hog connection %d, past its share", i), a, time.Second)
			refused++
		}
	}
	// And it fills the rest of the pool with connections that never send a token.
	for range maxConns {
		_ = dialKept(t, addr)
	}

	for i := range 5 {
		if a, err := fresh(t, r.URL+"/healthz", ""); err != nil || a.status != 200 {
			t.Fatalf("/healthz %d of 5 while one token holds the API: %d %v", i+1, a.status, err)
		}
		a, err := fresh(t, r.URL+fmt.Sprintf(dests, "eventbridge")+"/other-bus", apitest.Acct2Token)
		if err != nil || a.status != 200 {
			t.Fatalf("acct_2's card %d of 5 while acct_1's token holds the API: %d %s %v", i+1, a.status, a.body, err)
		}
	}
	if len(kept) > perToken || refused == 0 {
		t.Fatalf("one token holds %d connections (%d refused); its cap is %d", len(kept), refused, perToken)
	}
	// What the hog holds within its share still works.
	if a, err := kept[0].get(card, apitest.Acct1Token); err != nil || a.status != 200 {
		t.Fatalf("the hog's first connection, within its share: %d %v", a.status, err)
	}
}

// Requests in progress at once are capped per token and per account: past the cap the
// answer is 429 with Retry-After, and another account is served meanwhile.
func TestConcurrentRequestsPastTheTokenOrAccountCapAre429(t *testing.T) {
	const secondToken = "acct1-second-token-0123456789"
	const perToken, perAccount = 3, 3 // the account's places are the first token's
	r := apitest.New(t, apitest.Options{Config: func(c *config.Config) {
		c.API.HTTP.MaxRequestsPerToken, c.API.HTTP.MaxRequestsPerAccount = perToken, perAccount
		c.API.TestsPerDestination = config.Rate{Count: 1000, Per: time.Minute}
		c.API.TestsPerAccount = config.Rate{Count: 1000, Per: time.Minute}
		c.API.Tokens = append(c.API.Tokens, config.Token{Scope: "account:" + apitest.Acct1, Token: secondToken})
	}})
	// Every test send of orders-bus waits in the sink until released: a slow request.
	release := make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(release) }) }
	t.Cleanup(open) // a failed test must not leave sends held while the rig stops
	r.Sink.SetBehave(func(dest string, _ destination.Message) error {
		if dest == "orders-bus" {
			<-release
		}
		return nil
	})
	test := r.URL + fmt.Sprintf(dests, "eventbridge") + "/orders-bus/test"
	answers := make(chan answer, 16)
	send := func(token string) {
		go func() {
			req, _ := http.NewRequest("POST", test, nil)
			req.Header.Set("Authorization", "Bearer "+token)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				answers <- answer{}
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			answers <- answer{status: resp.StatusCode, body: b, header: resp.Header}
		}()
	}
	next := func(what string) answer {
		t.Helper()
		select {
		case a := <-answers:
			return a
		case <-time.After(15 * time.Second):
			t.Fatalf("%s: no answer in 15 s (every request is held: no cap)", what)
			return answer{}
		}
	}
	const sent = 8
	for range sent {
		send(apitest.Acct1Token)
	}
	for i := range sent - perToken {
		what := fmt.Sprintf("acct_1's request %d past max_requests_per_token", i+1)
		checkExhausted(t, what, next(what), time.Second)
	}
	// The account's other token has held nothing, but the account's places are taken.
	card := r.URL + fmt.Sprintf(dests, "eventbridge") + "/orders-bus"
	checkExhausted(t, "acct_1's other token past max_requests_per_account", call(t, "GET", card, secondToken, ""), time.Second)

	if a := call(t, "GET", r.URL+fmt.Sprintf(dests, "eventbridge")+"/other-bus", apitest.Acct2Token, ""); a.status != 200 {
		t.Fatalf("acct_2's card while acct_1 is at its cap: %d %s", a.status, a.body)
	}
	open()
	for i := range perToken {
		if a := next("a held request once released"); a.status != 200 {
			t.Fatalf("held request %d once released: %d %s", i+1, a.status, a.body)
		}
	}
	if a := call(t, "GET", card, secondToken, ""); a.status != 200 {
		t.Fatalf("acct_1 once its requests ended: %d %s", a.status, a.body)
	}
}

// /metrics names every account and destination: it is served on the operator listener
// only, where it takes no token; on the API's listener it is not a route (401 without a
// token, 404 with one).
func TestMetricsAreOnTheOperatorListenerOnlyAndHealthOnBoth(t *testing.T) {
	r := apitest.New(t, apitest.Options{Registry: prometheus.NewRegistry()})
	if a := call(t, "GET", r.URL+"/metrics", "", ""); a.status != 401 || a.errorCode(t) != "UNAUTHENTICATED" {
		t.Fatalf("/metrics on the API listener without a token: %d %s, want 401 UNAUTHENTICATED", a.status, a.body)
	}
	for _, token := range []string{apitest.Acct1Token, apitest.AdminToken} {
		if a := call(t, "GET", r.URL+"/metrics", token, ""); a.status != 404 || a.errorCode(t) != "NOT_FOUND" {
			t.Fatalf("/metrics on the API listener (token %t): %d %s, want 404 NOT_FOUND", token != "", a.status, a.body)
		}
	}
	a := call(t, "GET", r.MetricsURL+"/metrics", "", "")
	if a.status != 200 || !strings.Contains(string(a.body), "relay_leases_held") {
		t.Fatalf("/metrics on the operator listener, no token: %d %.200s", a.status, a.body)
	}
	for _, base := range []string{r.URL, r.MetricsURL} {
		for _, path := range []string{"/healthz", "/readyz"} {
			if a := call(t, "GET", base+path, "", ""); a.status != 200 {
				t.Errorf("%s%s: %d %s", base, path, a.status, a.body)
			}
		}
	}
	// The operator listener serves nothing else: no card, whatever the token.
	if a := call(t, "GET", r.MetricsURL+fmt.Sprintf(dests, "eventbridge"), apitest.AdminToken, ""); a.status != 404 {
		t.Fatalf("the API's routes on the operator listener: %d %s, want 404", a.status, a.body)
	}
}

// withHost sends a GET naming host in its Host header, as a page reached through DNS
// rebinding does (the browser sends the attacker's name).
func withHost(t *testing.T, url, host, token string) answer {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	req.Host = host
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return send(t, req)
}

func TestARequestNamingAHostNotInAllowedHostsIsRefusedButHealthAnswers(t *testing.T) {
	r := apitest.New(t, apitest.Options{Config: func(c *config.Config) {
		c.API.AllowedHosts = []string{"relay", "Relay.Relay.svc.cluster.local", "localhost:8080"}
	}})
	card := fmt.Sprintf(dests, "eventbridge") + "/orders-bus"
	// A rebinding page's fetch carries its own name (and the victim's cookies or a token
	// it found: here a valid one, so only the Host check stands in the way).
	for _, host := range []string{"evil.example:8080", "localhost:9999", "relay.evil.example", "127.0.0.1:8080"} {
		a := withHost(t, r.URL+card, host, apitest.Acct1Token)
		if a.status != 403 || a.errorCode(t) != "FORBIDDEN" || strings.Contains(string(a.body), "orders-bus") {
			t.Errorf("Host %s: %d %s, want 403 FORBIDDEN and nothing of the card", host, a.status, a.body)
		}
		if a := withHost(t, r.MetricsURL+"/metrics", host, ""); a.status != 403 && !strings.HasPrefix(host, "127.") {
			t.Errorf("Host %s on /metrics: %d, want 403", host, a.status)
		}
		for _, base := range []string{r.URL, r.MetricsURL} {
			if a := withHost(t, base+"/healthz", host, ""); a.status != 200 {
				t.Errorf("Host %s, %s/healthz: %d, want 200 (health answers whatever the Host)", host, base, a.status)
			}
			if a := withHost(t, base+"/readyz", host, ""); a.status != 200 {
				t.Errorf("Host %s, %s/readyz: %d", host, base, a.status)
			}
		}
	}
	for _, host := range []string{"relay:8080", "RELAY", "relay.relay.svc.cluster.local.:443", "localhost:8080"} {
		if a := withHost(t, r.URL+card, host, apitest.Acct1Token); a.status != 200 {
			t.Errorf("listed Host %s: %d %s", host, a.status, a.body)
		}
	}
	// The scraper names each pod by its address: an IP Host is no rebinding page's.
	for _, host := range []string{"relay:9090", "10.1.2.3:9090", "[fd00::7]:9090"} {
		if a := withHost(t, r.MetricsURL+"/metrics", host, ""); a.status != 200 {
			t.Errorf("Host %s on /metrics: %d, want 200", host, a.status)
		}
	}
}

// With every place for authenticated connections taken, a newcomer of another account
// gets in and one of the largest holder's connections is the one closed.
func TestAFullPoolClosesAConnectionOfTheLargestHolderNotTheNewcomer(t *testing.T) {
	const maxConns, reserve, share = 20, 2, 10
	r := apitest.New(t, apitest.Options{Config: func(c *config.Config) {
		c.API.HTTP.MaxConnections, c.API.HTTP.HealthConnections = maxConns, reserve
		c.API.HTTP.MaxConnectionsPerToken, c.API.HTTP.MaxConnectionsPerAccount = share, share
		c.API.HTTP.ReadHeaderTimeout, c.API.HTTP.ReadTimeout = time.Minute, time.Minute
	}})
	addr := strings.TrimPrefix(r.URL, "http://")
	hold := func(token, path string, n int) []*keptConn {
		var out []*keptConn
		for i := range n {
			k := dialKept(t, addr)
			if a, err := k.get(path, token); err != nil || a.status != 200 {
				t.Fatalf("connection %d: %d %v", i, a.status, err)
			}
			out = append(out, k)
		}
		return out
	}
	acct1 := hold(apitest.Acct1Token, fmt.Sprintf(dests, "eventbridge")+"/orders-bus", share)
	admin := hold(apitest.AdminToken, "/v1/connectors", maxConns-reserve-share) // every authenticated place taken
	k := dialKept(t, addr)
	if a, err := k.get(fmt.Sprintf(dests, "eventbridge")+"/other-bus", apitest.Acct2Token); err != nil || a.status != 200 {
		t.Fatalf("acct_2's newcomer with the pool full: %d %s %v", a.status, a.body, err)
	}
	closed := func(ks []*keptConn, token string) int {
		n := 0
		for _, k := range ks {
			if _, err := k.get("/v1/connectors", token); err != nil {
				n++
			}
		}
		return n
	}
	if n := closed(acct1, apitest.Acct1Token); n != 1 {
		t.Errorf("%d of acct_1's connections (the largest holder, %d) closed, want 1", n, share)
	}
	if n := closed(admin, apitest.AdminToken); n != 0 {
		t.Errorf("%d of the smaller holder's connections closed", n)
	}
	if a, err := fresh(t, r.URL+"/healthz", ""); err != nil || a.status != 200 {
		t.Fatalf("/healthz with every authenticated place taken: %d %v", a.status, err)
	}
}
