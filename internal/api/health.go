package api

import (
	"context"
	"net/http"
	"time"
)

// healthz answers 200 while the process can answer at all.
func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// readyz answers 200 only when the broker consumer is connected, Redis answers PING and
// a config is loaded; otherwise 503 naming each check that failed.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	checks := map[string]string{"broker": "ok", "redis": "ok", "config": "ok"}
	ready := true
	if s.opts.Broker != nil && !s.opts.Broker() {
		checks["broker"], ready = "not connected to the broker", false
	}
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if s.opts.Store == nil || s.opts.Store.Client().Ping(ctx).Err() != nil {
		checks["redis"], ready = "does not answer PING", false
	}
	if s.accounts.Load() == nil {
		checks["config"], ready = "not loaded", false
	}
	status := http.StatusOK
	if !ready {
		status = http.StatusServiceUnavailable
	}
	writeJSON(w, status, map[string]any{"ready": ready, "checks": checks})
}
