package api

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// ReadyTimeout is the longest /readyz waits for Redis to answer PING: well under the
// shipped readiness probe's timeout (the Helm chart: 3 s), so the probe always gets
// an answer, whatever Redis does.
const ReadyTimeout = time.Second

// pingTimeout bounds one PING in the background: it may outlive the request that
// started it, and the next requests wait on it rather than pile up new ones.
const pingTimeout = 5 * time.Second

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
	} else if answered, err := s.ping.wait(r.Context(), s.opts.Store.Client(), ReadyTimeout); !answered {
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

// pinger runs at most one Redis PING at a time, in the background, so a reader can stop
// waiting for it: go-redis may block on a peer that accepts and never answers for longer
// than a context asks (its dial and read timeouts), and a probe must not.
type pinger struct {
	mu     sync.Mutex
	flight *pingFlight // the PING in progress, nil when none
}

type pingFlight struct {
	done chan struct{} // closed once err is set
	err  error
}

// wait joins the PING in progress, or starts one, and waits for it at most d.
// answered is false when it did not end in time.
func (p *pinger) wait(ctx context.Context, rdb redis.UniversalClient, d time.Duration) (answered bool, err error) {
	p.mu.Lock()
	f := p.flight
	if f == nil {
		f = &pingFlight{done: make(chan struct{})}
		p.flight = f
		go func() {
			pctx, cancel := context.WithTimeout(context.Background(), pingTimeout)
			f.err = rdb.Ping(pctx).Err()
			cancel()
			p.mu.Lock()
			p.flight = nil
			p.mu.Unlock()
			close(f.done)
		}()
	}
	p.mu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-f.done:
		return true, f.err
	case <-t.C:
		return false, nil
	case <-ctx.Done():
		return false, ctx.Err()
	}
}
