package api_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mercamap/relay/internal/api"
	"github.com/mercamap/relay/internal/api/apitest"
	"github.com/mercamap/relay/internal/api/contracttest"
	"github.com/mercamap/relay/internal/console"
	"github.com/mercamap/relay/internal/registry"
)

// noFollow sends method url as it is, and reads its answer, a redirect included.
func noFollow(t *testing.T, method, url, token string) answer {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{status: resp.StatusCode, body: b, header: resp.Header}
}

// served is an API over r's Redis, dispatcher and channels with the console too, as
// serve runs it: every path of the document is a route of it.
func served(t *testing.T, r *apitest.Rig) string {
	t.Helper()
	return newServer(t, api.New(api.Options{Config: apitest.Config(), Destinations: r.Dispatcher, Store: r.Store,
		Streams: r.Streams, Console: console.New(console.Options{DisableAfter: 20})}))
}

// TestARedirectFollowingClientActsOnNoOtherResource is the path rewrite of issue 52: the
// ServeMux answered DELETE /v1/accounts//sessions with 307 to /v1/accounts/sessions,
// before the token was checked, and a client that follows redirects (Go's, curl -L)
// then deleted the account named "sessions". Now it is a path that is not a route: 404,
// and the account is still there. So with "." and "..": .../orders-bus/x/../pause
// pauses nothing.
func TestARedirectFollowingClientActsOnNoOtherResource(t *testing.T) {
	r := apitest.New(t, apitest.Options{})
	ctx := context.Background()
	reg := registry.New(r.Store.Client())
	rec := registry.AccountRecord{ID: "sessions", Tenants: []string{"t9"}, CreatedAt: time.Now().UTC()}
	if err := reg.CreateAccount(ctx, rec); err != nil {
		t.Fatal(err)
	}
	cfg := apitest.Config()
	cfg.Accounts = append(cfg.Accounts, rec.Account()) // as serve's reload of the registry has it
	base := newServer(t, api.New(api.Options{Config: cfg, Destinations: r.Dispatcher, Store: r.Store, Streams: r.Streams, Registry: reg}))

	// call follows redirects, as http.DefaultClient does.
	if a := call(t, "DELETE", base+"/v1/accounts//sessions", apitest.AdminToken, ""); a.status != http.StatusNotFound || a.errorCode(t) != "NOT_FOUND" {
		t.Errorf("DELETE /v1/accounts//sessions, redirects followed: %d %s; want 404 NOT_FOUND", a.status, a.body)
	}
	if _, err := reg.GetAccount(ctx, "sessions"); err != nil {
		t.Fatalf("the account named sessions after DELETE /v1/accounts//sessions: %v", err)
	}
	if a := call(t, "GET", base+"/v1/accounts/sessions", apitest.AdminToken, ""); a.status != http.StatusOK {
		t.Errorf("GET /v1/accounts/sessions: %d %s", a.status, a.body)
	}

	bus := base + fmt.Sprintf(dests, "eventbridge") + "/orders-bus"
	for _, p := range []string{"/x/../pause", "/./pause", "//pause", "/%2E/pause"} {
		if a := call(t, "POST", bus+p, apitest.AdminToken, ""); a.status != http.StatusNotFound || a.errorCode(t) != "NOT_FOUND" {
			t.Errorf("POST …/orders-bus%s, redirects followed: %d %s; want 404 NOT_FOUND", p, a.status, a.body)
		}
	}
	if card := call(t, "GET", bus, apitest.AdminToken, "").json(t); card["status"] != "active" {
		t.Errorf("orders-bus after the pauses through paths that are not routes: %v, want active", card["status"])
	}
}

// TestAPathThatIsNotARouteIsA404AfterTheTokenAndNeverARedirect: every path the ServeMux
// would clean (an empty segment, "." or "..", also escaped) or that is not a route (a
// trailing slash, a method no route has) answers, without following anything, 401 to a
// caller without a valid token and 404 NOT_FOUND to one with; on the operator listener,
// which takes no token, 404 at once. Never a 3xx, never a Location.
func TestAPathThatIsNotARouteIsA404AfterTheTokenAndNeverARedirect(t *testing.T) {
	r := apitest.New(t, apitest.Options{})
	base := served(t, r)
	for _, c := range []struct{ method, path string }{
		{"POST", "/v1/connectors//destinations/orders-bus/pause"},
		{"DELETE", "/v1/accounts//sessions"},
		{"GET", "/v1//whoami"},
		{"GET", "//v1/whoami"},
		{"GET", "/v1/./whoami"},
		{"GET", "/v1/x/../whoami"},
		{"GET", "/v1/%2E%2E/v1/whoami"},
		{"GET", "/v1/connectors/eventbridge/destinations/orders-bus%2F%2Fattempts"},
		{"GET", "/v1/whoami/"},
		{"GET", "/v1/connectors/"},
		{"GET", "/v1/streams/subscribe/"},
		{"PUT", "/v1/whoami"},
		{"GET", "//healthz"},
		{"GET", "/healthz/"},
		{"POST", "/console"},
		{"GET", "/console/app.js/"},
		{"GET", "/console/x/app.js"},
		{"GET", "/console/./app.js"},
		{"GET", "/nope"},
	} {
		for token, want := range map[string]struct {
			status int
			code   string
		}{"": {401, "UNAUTHENTICATED"}, "wrong": {401, "UNAUTHENTICATED"}, apitest.AdminToken: {404, "NOT_FOUND"}, apitest.Acct1Token: {404, "NOT_FOUND"}} {
			a := noFollow(t, c.method, base+c.path, token)
			if a.status != want.status || a.errorCode(t) != want.code || a.header.Get("Location") != "" {
				t.Errorf("%s %s with token %q: %d %s (Location %q); want %d %s", c.method, c.path, token, a.status, a.body, a.header.Get("Location"), want.status, want.code)
			}
		}
	}
	for _, p := range []string{"//metrics", "/metrics/", "/./metrics", "/x/../metrics", "/nope"} {
		if a := noFollow(t, "GET", r.MetricsURL+p, ""); a.status != 404 || a.errorCode(t) != "NOT_FOUND" || a.header.Get("Location") != "" {
			t.Errorf("GET %s on the operator listener: %d %s (Location %q); want 404 NOT_FOUND", p, a.status, a.body, a.header.Get("Location"))
		}
	}
}

// TestNoPathOfTheDocumentIsRedirectedWhenWrittenAnotherWay: each path of the OpenAPI
// document, with a trailing slash, a doubled slash or a "." segment, with each method, is
// a 404 NOT_FOUND to an admin token: the ServeMux neither cleans it nor adds or removes
// a trailing slash (it has no subtree but "/").
func TestNoPathOfTheDocumentIsRedirectedWhenWrittenAnotherWay(t *testing.T) {
	r := apitest.New(t, apitest.Options{})
	base := served(t, r)
	doc, err := contracttest.Document()
	if err != nil {
		t.Fatal(err)
	}
	fill := strings.NewReplacer("{connector}", "eventbridge", "{id}", "orders-bus", "{channel}", "destination:orders-bus",
		"{n}", "1", "{file}", "app.js")
	paths := doc.Paths.InMatchingOrder()
	slices.Sort(paths)
	routes := map[string]bool{}
	for _, tmpl := range paths {
		routes[fill.Replace(tmpl)] = true
	}
	for _, tmpl := range paths {
		p := fill.Replace(tmpl)
		dir, last := p[:strings.LastIndex(p, "/")], p[strings.LastIndex(p, "/"):]
		for _, variant := range []string{p + "/", "/" + p, dir + "/." + last, strings.TrimSuffix(p, "/") + "/x/.."} {
			if routes[variant] {
				continue // /console with its slash is the page
			}
			for _, method := range []string{"GET", "POST", "PATCH", "DELETE"} {
				a := noFollow(t, method, base+variant, apitest.AdminToken)
				if a.status != http.StatusNotFound || a.errorCode(t) != "NOT_FOUND" || a.header.Get("Location") != "" {
					t.Errorf("%s %s (of %s): %d %s (Location %q); want 404 NOT_FOUND", method, variant, tmpl, a.status, a.body, a.header.Get("Location"))
				}
			}
		}
	}
}
