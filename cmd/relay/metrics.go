package main

import (
	"context"
	"log/slog"
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
	reg.MustRegister(sampler, consumer.LagCollector(), prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "relay_redis_up", Help: "1 when Redis answered PING within a second at this scrape.",
	}, func() float64 {
		// The store's one PING in flight, waited for a second at most: a Redis that
		// accepts and never answers does not hold the scrape.
		if answered, err := st.PingWithin(context.Background(), time.Second); answered && err == nil {
			return 1
		}
		return 0
	}))
}

// shutdownTracer exports the spans still buffered, waiting a few seconds at most.
func shutdownTracer(t *tracing.Tracer, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := t.Shutdown(ctx); err != nil {
		log.Warn("traces not all exported at shutdown", "component", "tracing", "error", err)
	}
}
