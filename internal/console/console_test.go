package console_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/mercamap/relay/internal/api"
	"github.com/mercamap/relay/internal/console"
)

// serve runs the API server with the console mounted, as relay serve does.
func serve(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(api.New(api.Options{Console: console.New(console.Options{DisableAfter: 7})}).Handler())
	t.Cleanup(srv.Close)
	return srv
}

func get(t *testing.T, url string) (*http.Response, string) {
	t.Helper()
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func TestEveryConsoleFileIsServedWithTheStrictPolicyAndNoToken(t *testing.T) {
	srv := serve(t)
	files := map[string]string{
		"/console/":              "text/html",
		"/console/app.js":        "text/javascript",
		"/console/follow.js":     "text/javascript",
		"/console/api.js":        "text/javascript",
		"/console/i18n.js":       "text/javascript",
		"/console/console.css":   "text/css",
		"/console/settings.json": "application/json",
	}
	for path, ctype := range files {
		resp, body := get(t, srv.URL+path)
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), ctype) {
			t.Errorf("GET %s: %d %s", path, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		csp := resp.Header.Get("Content-Security-Policy")
		for _, want := range []string{"default-src 'none'", "script-src 'self'", "style-src 'self'", "connect-src 'self'", "frame-ancestors 'none'"} {
			if !strings.Contains(csp, want) {
				t.Errorf("GET %s: the policy %q lacks %q", path, csp, want)
			}
		}
		if strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "unsafe-eval") || strings.Contains(csp, "http") {
			t.Errorf("GET %s: the policy allows more than the relay's own origin: %q", path, csp)
		}
		if path == "/console/settings.json" && !strings.Contains(body, `"disable_after":7`) {
			t.Errorf("settings: %s", body)
		}
	}
	if resp, _ := get(t, srv.URL+"/console"); resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != "/console/" {
		t.Errorf("GET /console: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	if resp, _ := get(t, srv.URL+"/console/nothing-here.js"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("a missing file answered %d", resp.StatusCode)
	}
}

// The policy forbids inline script and style; the page must need neither, and must
// never load anything from another origin (it works on a machine with no internet).
func TestThePageHasNoInlineScriptStyleOrOtherOrigin(t *testing.T) {
	srv := serve(t)
	_, page := get(t, srv.URL+"/console/")
	if m := regexp.MustCompile(`<script(?:[^>]*)>`).FindAllString(page, -1); len(m) != 1 || !strings.Contains(m[0], `src="app.js"`) || !strings.Contains(m[0], `type="module"`) {
		t.Errorf("the page's scripts: %q (want only the app.js module)", m)
	}
	for _, bad := range []string{"<style", " style=", "onclick=", "onload=", "javascript:", "http://", "https://", "//cdn"} {
		if strings.Contains(page, bad) {
			t.Errorf("the page holds %q", bad)
		}
	}
	for _, f := range []string{"app.js", "follow.js", "api.js", "i18n.js"} {
		_, js := get(t, srv.URL+"/console/"+f)
		for _, bad := range []string{"innerHTML", "eval(", "new Function", "http://", "https://", "EventSource", "?token", "access_token"} {
			if strings.Contains(js, bad) {
				t.Errorf("%s holds %q", f, bad)
			}
		}
	}
}
