package contracttest_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/mercamap/relay/internal/api/contracttest"
)

// recordingTB is the testing.TB a Checker reports to, keeping what it says.
type recordingTB struct {
	testing.TB
	errors   []string
	cleanups []func()
}

func (r *recordingTB) Helper()                   {}
func (r *recordingTB) Cleanup(f func())          { r.cleanups = append(r.cleanups, f) }
func (r *recordingTB) Errorf(f string, a ...any) { r.errors = append(r.errors, fmt.Sprintf(f, a...)) }
func (r *recordingTB) Fatal(a ...any)            { panic(fmt.Sprint(a...)) }

// problems is what a Checker says of one answer h gives to method path.
func problems(t *testing.T, method, path string, h http.HandlerFunc) []string {
	t.Helper()
	tb := &recordingTB{}
	c := contracttest.New(tb)
	c.Wrap(h).ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(method, path, nil))
	for _, f := range slices.Backward(tb.cleanups) {
		f()
	}
	return tb.errors
}

func errorAnswer(status int, code string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"error":{"code":%q,"message":"words"}}`, code)
	}
}

func redirect(to string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Location", to)
		w.WriteHeader(http.StatusMovedPermanently)
	}
}

// TestTheCheckerHoldsRedirectsAndPathsThatAreNotRoutesToTheDocument: openapi3filter lets
// every redirect pass without a look, and a path that is not a route has no operation to
// check against; the Checker holds both to the document: GET /console's 301 as listed
// (Location /console/, no body), any other redirect refused, and a path that is not a
// route to the document's x-not-a-route answers.
func TestTheCheckerHoldsRedirectsAndPathsThatAreNotRoutesToTheDocument(t *testing.T) {
	for _, c := range []struct {
		name, method, path string
		h                  http.HandlerFunc
		fails              string // "" when the answer matches the document
	}{
		{"the console's redirect as listed", "GET", "/console", redirect("/console/"), ""},
		{"the console's redirect with an HTML body", "GET", "/console",
			http.RedirectHandler("/console/", http.StatusMovedPermanently).ServeHTTP, "no body"},
		{"the console's redirect elsewhere", "GET", "/console", redirect("./"), "Location"},
		{"a 308 of the console", "GET", "/console", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Location", "/console/")
			w.WriteHeader(http.StatusPermanentRedirect)
		}, "not in the document"},
		{"the page's index.html redirected", "GET", "/console/index.html", redirect("./"), "not in the document"},
		{"a route's path redirected", "POST", "/v1/connectors/eventbridge/destinations/a-bus/x/../pause",
			redirect("/v1/connectors/eventbridge/destinations/a-bus/pause"), "not in the document"},
		{"an empty segment redirected", "POST", "/v1/connectors//destinations/a-bus/pause",
			redirect("/v1/connectors/destinations/a-bus/pause"), "not in the document"},
		{"not a route: 404 NOT_FOUND", "DELETE", "/v1/accounts//sessions", errorAnswer(404, "NOT_FOUND"), ""},
		{"not a route: 401 first", "DELETE", "/v1/accounts//sessions", errorAnswer(401, "UNAUTHENTICATED"), ""},
		{"not a route: 404 of another code", "GET", "/nope", errorAnswer(404, "INVALID_ARGUMENT"), "NOT_FOUND"},
		{"not a route: 404 as text", "GET", "/v1/whoami/", func(w http.ResponseWriter, r *http.Request) {
			http.NotFound(w, r)
		}, "404"},
		{"not a route: 200", "GET", "/v1//whoami", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"scope":"admin"}`)
		}, "not in the document"},
	} {
		got := problems(t, c.method, c.path, c.h)
		switch {
		case c.fails == "" && len(got) > 0:
			t.Errorf("%s: the checker refused an answer the document lists: %v", c.name, got)
		case c.fails != "" && len(got) == 0:
			t.Errorf("%s: the checker let it pass; want a problem naming %q", c.name, c.fails)
		case c.fails != "" && !strings.Contains(strings.Join(got, "\n"), c.fails):
			t.Errorf("%s: the checker said %v; want it to name %q", c.name, got, c.fails)
		}
	}
}
