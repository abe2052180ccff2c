// Package console serves the browser console: the connector pages and destination cards,
// as plain HTML, CSS and JavaScript modules embedded in the binary (no build step, no
// CDN). Every answer carries a Content-Security-Policy that allows only the relay's own
// origin and no inline script or style. It holds no token and calls nothing itself: the
// page calls the operator API with the token the user typed in.
package console

import (
	"embed"
	"encoding/json"
	"io/fs"
	"net/http"
	"strings"
)

//go:embed static
var files embed.FS

// Prefix is the path the console is served under.
const Prefix = "/console/"

// CSP lets the page load and call only its own origin: no inline script or style, no
// eval, no frames, no plugins, forms post nowhere, and no other page may frame it.
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; font-src 'self'; manifest-src 'self'; base-uri 'none'; " +
	"form-action 'none'; frame-ancestors 'none'; object-src 'none'"

// Options configure the console handler.
type Options struct {
	// DisableAfter is how many consecutive rejections disable a destination
	// (delivery.disable_after), so a card can say how many are left.
	DisableAfter int
}

// New returns the handler for everything under Prefix; mount it at GET Prefix.
func New(opts Options) http.Handler {
	static, err := fs.Sub(files, "static")
	if err != nil {
		panic("console: embedded files missing: " + err.Error()) // a build without static/
	}
	fileServer := http.StripPrefix(Prefix, http.FileServerFS(static))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", CSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		// The files are small and change with the binary: always revalidate.
		h.Set("Cache-Control", "no-cache")
		if r.URL.Path == Prefix+"settings.json" {
			h.Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]int{"disable_after": opts.DisableAfter})
			return
		}
		if !strings.HasPrefix(r.URL.Path, Prefix) {
			http.NotFound(w, r)
			return
		}
		if r.URL.Path == Prefix+"index.html" {
			// The page itself, as at Prefix: http.FileServer would redirect it to "./".
			r = atPrefix(r)
		}
		fileServer.ServeHTTP(w, r)
	})
}

// atPrefix is r asking for Prefix, the page.
func atPrefix(r *http.Request) *http.Request {
	r2 := r.Clone(r.Context())
	r2.URL.Path, r2.URL.RawPath = Prefix, ""
	return r2
}
