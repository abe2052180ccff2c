package main

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mercamap/relay/internal/ingest"
	"github.com/mercamap/relay/internal/lag"
	"github.com/mercamap/relay/internal/store"
	"github.com/mercamap/relay/internal/tracing"
)

// registerWatchMetrics adds what the alerts and the dashboard watch beside the packages'
// own counters: destination lag and status (sampled from Redis at scrape), ingest lag,
// and whether Redis answers.
func registerWatchMetrics(reg prometheus.Registerer, st *store.Store, consumer *ingest.Consumer, sampler *lag.Sampler) {
	up := &redisUp{st: st}
	reg.MustRegister(sampler, consumer.LagCollector(), prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "relay_redis_up", Help: "1 when Redis answered PING within a second at this scrape.",
	}, up.value))
}

// redisUp pings Redis for relay_redis_up without holding a scrape: go-redis may block
// on a Redis that accepts and never answers for longer than a context asks (its read
// timeout and retries), so one PING runs at a time in the background and a scrape waits
// for it at most redisUpWait.
type redisUp struct {
	st *store.Store

	mu      sync.Mutex
	running chan struct{} // closed when the PING in progress ends
	ok      bool          // what the last PING that ended said
}

const redisUpWait = time.Second

func (u *redisUp) value() float64 {
	u.mu.Lock()
	done := u.running
	if done == nil {
		done = make(chan struct{})
		u.running = done
		go func() {
			defer close(done)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := u.st.Client().Ping(ctx).Err()
			cancel()
			u.mu.Lock()
			u.ok, u.running = err == nil, nil
			u.mu.Unlock()
		}()
	}
	u.mu.Unlock()
	t := time.NewTimer(redisUpWait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		return 0 // no answer within a second: down, whatever the last PING said
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.ok {
		return 1
	}
	return 0
}

// shutdownTracer exports the spans still buffered, waiting a few seconds at most.
func shutdownTracer(t *tracing.Tracer, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := t.Shutdown(ctx); err != nil {
		log.Warn("traces not all exported at shutdown", "component", "tracing", "error", err)
	}
}
