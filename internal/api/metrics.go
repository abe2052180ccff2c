package api

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/store"
)

// queueDepthCap bounds the count one destination costs a scrape.
const queueDepthCap = 10000

// QueueDepth is a collector of relay_queue_depth, computed at scrape time: the account
// log's entries after each destination's cursor, up to 10000, for the destinations this
// replica holds leases for (so replicas do not report each other's).
type QueueDepth struct {
	store *store.Store
	held  func() []destination.Destination
	desc  *prometheus.Desc
}

// NewQueueDepth returns the collector; held lists the destinations with a lease here.
func NewQueueDepth(st *store.Store, held func() []destination.Destination) *QueueDepth {
	return &QueueDepth{store: st, held: held, desc: prometheus.NewDesc("relay_queue_depth",
		"Account-log events waiting after the destination's cursor (before its event filter), counted up to 10000; destinations this replica holds leases for.",
		[]string{"destination", "account", "connector"}, nil)}
}

// Describe implements prometheus.Collector.
func (q *QueueDepth) Describe(ch chan<- *prometheus.Desc) { ch <- q.desc }

// Collect implements prometheus.Collector.
func (q *QueueDepth) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	for _, d := range q.held() {
		n, err := q.store.QueueDepth(ctx, store.Ref{Account: d.Account, ID: d.ID}, queueDepthCap)
		if err != nil {
			continue // a missing sample, not a failed scrape
		}
		ch <- prometheus.MustNewConstMetric(q.desc, prometheus.GaugeValue, float64(n), d.ID, d.Account, string(d.Connector))
	}
}
