package api

import "net/http"

// consoleRoutes mounts the browser console. Its files need no token (they hold none);
// every call the page makes goes through the authed routes above.
func (s *Server) consoleRoutes(m *http.ServeMux) {
	m.Handle("GET /console/", s.opts.Console)
	m.Handle("GET /console", http.RedirectHandler("/console/", http.StatusMovedPermanently))
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
