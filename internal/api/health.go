package api

import (
	"net/http"
	"time"
)

// ReadyTimeout is the longest /readyz waits for Redis to answer PING: well under the
// shipped readiness probe's timeout (the Helm chart: 3 s), so the probe always gets
// an answer, whatever Redis does.
const ReadyTimeout = time.Second

// healthz answers 200 while the process can answer at all.
func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// readyz answers whether this replica can serve the API: 200 when Redis answers PING
// within ReadyTimeout and a config is loaded, otherwise 503 naming each check that
// failed. The broker is reported ("broker") but does not decide: during a broker outage
// the API and the console are what operators need, so the pod stays in the Service;
// ingest is watched by relay_broker_connected and its alert.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	checks := map[string]string{"broker": "ok", "redis": "ok", "config": "ok"}
	ready := true
	if s.opts.Broker != nil && !s.opts.Broker() {
		checks["broker"] = "not connected to the broker (ingest waits; the API serves)"
	}
	if s.opts.Store == nil {
		checks["redis"], ready = "no Redis client", false
	} else if answered, err := s.opts.Store.PingWithin(r.Context(), ReadyTimeout); !answered {
		checks["redis"], ready = "does not answer PING within "+ReadyTimeout.String(), false
	} else if err != nil {
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
