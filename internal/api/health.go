package api

import (
	"net/http"
	"time"
)

// Starting marks the replica as started but not serving yet, with why (serve waiting
// for Redis, each try's error): /healthz answers 200, since the process is alive and
// working towards serving; /readyz answers 503 with checks.startup saying why; every
// other route answers 503 UNAVAILABLE with the same sentence. Started ends it.
func (s *Server) Starting(reason string) { s.starting.Store(&reason) }

// Started is called once serve is ready to serve: Redis answered, the ExternalIds
// checked, the destinations' state loaded.
func (s *Server) Started() { s.starting.Store(nil) }

// startingGate answers 503 for every route but the health checks while Starting holds.
func (s *Server) startingGate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if reason := s.starting.Load(); reason != nil && !isHealth(r) {
			writeError(w, errUnavailable("the relay is starting: "+*reason))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// ReadyTimeout is the longest /readyz waits for Redis to answer PING: well under the
// shipped readiness probe's timeout (the Helm chart: 3 s), so the probe always gets
// an answer, whatever Redis does.
const ReadyTimeout = time.Second

// healthz answers 200 while the process can answer at all.
func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// readyz answers whether this replica can serve the API: 503 with checks.startup while
// Starting holds; 200 when Redis answers PING
// within ReadyTimeout and a config is loaded, otherwise 503 naming each check that
// failed. The broker is reported ("broker") but does not decide: during a broker outage
// the API and the console are what operators need, so the pod stays in the Service;
// ingest is watched by relay_broker_connected and its alert.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	if reason := s.starting.Load(); reason != nil {
		// Nothing else is worth checking yet: serve has not loaded the destinations.
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"ready": false,
			"checks": map[string]string{"startup": *reason}})
		return
	}
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
