package api

import "net/http"

// consoleRoutes mounts the browser console. Its files need no token (they hold none);
// every call the page makes goes through the authed routes above. The page and its
// files are one segment each (no subtree "/console/"): a deeper path is no route, and
// the ServeMux has no subtree to redirect to.
func (s *Server) consoleRoutes(m *http.ServeMux) {
	m.Handle("GET /console/{$}", s.opts.Console)
	m.Handle("GET /console/{file}", s.opts.Console)
	m.HandleFunc("GET /console", consoleRedirect)
}

// consoleRedirect sends /console to the page at /console/, whose files the page names
// relative to it: 301 with Location and no body (http.RedirectHandler writes an HTML
// one, which the document does not list).
func consoleRedirect(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Location", "/console/")
	w.WriteHeader(http.StatusMovedPermanently)
}

// whoami tells a client (the console) the scope of its own token: "admin" or
// "account:<id>", so it shows only the actions that token may take; for a console
// session, also "session": true and when it ends ("expires_at").
func (s *Server) whoami(w http.ResponseWriter, r *http.Request, p principal) {
	scope := "admin"
	if !p.admin {
		scope = "account:" + p.account
	}
	if p.session {
		writeJSON(w, http.StatusOK, map[string]any{"scope": scope, "session": true, "expires_at": p.expires})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"scope": scope})
}
