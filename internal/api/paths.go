package api

import (
	"net/http"
	"strings"
)

// cleanPaths hands every request whose path http.ServeMux would rewrite to unrouted
// instead of to next. The ServeMux answers such a path (an empty segment, a "." or ".."
// segment) with a redirect to its cleaned form before any handler runs: before the token
// is checked, and with a status the document does not list; a client that follows it
// acts on another resource (DELETE /v1/accounts//sessions becomes DELETE
// /v1/accounts/sessions). Such a path is no route of ours, and answers as one.
func cleanPaths(next, unrouted http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Both forms: the ServeMux routes the escaped one, a proxy in front of the relay
		// may route the decoded one ("%2E%2E", "a%2F%2Fb").
		if !cleanPath(r.URL.EscapedPath()) || !cleanPath(r.URL.Path) {
			unrouted.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// cleanPath reports whether p is a path the ServeMux routes as it is: it begins with
// "/", and has no "." or ".." segment and no empty one but after a trailing slash.
func cleanPath(p string) bool {
	if !strings.HasPrefix(p, "/") {
		return false // CONNECT's host:port, or nothing
	}
	segments := strings.Split(p[1:], "/")
	for i, seg := range segments {
		if seg == "." || seg == ".." || seg == "" && i < len(segments)-1 {
			return false
		}
	}
	return true
}

// noRoute answers a path that is not a route, once the token is checked: a caller
// without a valid one learns nothing of which paths are routes (401 first, as on every
// route that takes a token).
func (s *Server) noRoute(w http.ResponseWriter, r *http.Request, _ principal) {
	notFound(w, r)
}
