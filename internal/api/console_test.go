package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/mercamap/relay/internal/api/apitest"
)

// The console shows the admin actions only to an admin token: it asks whoami.
func TestWhoamiTellsATokenItsOwnScope(t *testing.T) {
	r := apitest.New(t, apitest.Options{})
	for token, want := range map[string]string{apitest.AdminToken: "admin", apitest.Acct1Token: "account:acct_1", apitest.Acct2Token: "account:acct_2"} {
		a := call(t, "GET", r.URL+"/v1/whoami", token, "")
		if a.status != http.StatusOK || a.json(t)["scope"] != want {
			t.Errorf("whoami: %d %v, want scope %s", a.status, a.json(t), want)
		}
	}
	if a := call(t, "GET", r.URL+"/v1/whoami", "wrong", ""); a.status != http.StatusUnauthorized || a.errorCode(t) != "UNAUTHENTICATED" {
		t.Errorf("whoami with a wrong token: %d", a.status)
	}
}

// TestTheConsoleAnswersExactlyWhatTheDocumentSays: /console is 301 with Location
// /console/ and no body (not http.RedirectHandler's HTML), /console/index.html is the
// page itself (not a 301 to "./"), and a path deeper than one file, or a file's name
// with a slash after it, is not a route (401, then 404 NOT_FOUND): never a redirect.
// The rig's Checker holds each answer to the document as well.
func TestTheConsoleAnswersExactlyWhatTheDocumentSays(t *testing.T) {
	base := served(t, apitest.New(t, apitest.Options{}))
	a := noFollow(t, "GET", base+"/console?x=1", "")
	if a.status != http.StatusMovedPermanently || a.header.Get("Location") != "/console/" || len(a.body) != 0 {
		t.Errorf("GET /console: %d Location %q body %q; want 301 to /console/ with no body", a.status, a.header.Get("Location"), a.body)
	}
	page := noFollow(t, "GET", base+"/console/", "")
	if page.status != http.StatusOK || !strings.HasPrefix(page.header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET /console/: %d %s", page.status, page.header.Get("Content-Type"))
	}
	if a := noFollow(t, "GET", base+"/console/index.html", ""); a.status != http.StatusOK || string(a.body) != string(page.body) ||
		a.header.Get("Content-Security-Policy") == "" {
		t.Errorf("GET /console/index.html: %d Location %q; want 200, the page with its policy", a.status, a.header.Get("Location"))
	}
	if a := noFollow(t, "GET", base+"/console/app.js", ""); a.status != http.StatusOK || !strings.HasPrefix(a.header.Get("Content-Type"), "text/javascript") {
		t.Errorf("GET /console/app.js: %d %s", a.status, a.header.Get("Content-Type"))
	}
	if a := noFollow(t, "GET", base+"/console/nope.js", ""); a.status != http.StatusNotFound || a.header.Get("Location") != "" {
		t.Errorf("GET /console/nope.js: %d Location %q; want 404", a.status, a.header.Get("Location"))
	}
	for _, p := range []string{"/console/app.js/", "/console/index.html/", "/console/x/app.js", "/console//", "/console/./app.js"} {
		if a := noFollow(t, "GET", base+p, ""); a.status != http.StatusUnauthorized || a.header.Get("Location") != "" {
			t.Errorf("GET %s without a token: %d %s (Location %q); want 401", p, a.status, a.body, a.header.Get("Location"))
		}
		if a := noFollow(t, "GET", base+p, apitest.AdminToken); a.status != http.StatusNotFound || a.errorCode(t) != "NOT_FOUND" {
			t.Errorf("GET %s: %d %s; want 404 NOT_FOUND", p, a.status, a.body)
		}
	}
}
