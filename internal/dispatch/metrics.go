package dispatch

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/failures"
)

// Metrics count deliveries and leases.
type Metrics struct {
	Deliveries *prometheus.CounterVec   // by connector and outcome class
	Latency    *prometheus.HistogramVec // arrival in Redis to the bus's answer, delivered only
	SendTime   *prometheus.HistogramVec // one write's round trip
	Leases     prometheus.Gauge
}

// NewMetrics creates the dispatch metrics and registers them on reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "relay_delivery_attempts_total", Help: "Write attempts by connector and outcome (delivered, not_taken, rejected).",
		}, []string{"connector", "outcome"}),
		Latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "relay_delivery_latency_seconds", Help: "From the event's arrival in Redis to the bus's acknowledgement.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 20),
		}, []string{"connector"}),
		SendTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "relay_delivery_send_seconds", Help: "One write's round trip to the bus.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 18),
		}, []string{"connector"}),
		Leases: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "relay_leases_held", Help: "Destination leases this replica holds.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.Deliveries, m.Latency, m.SendTime, m.Leases)
	}
	return m
}

func (m *Metrics) observe(dest destination.Destination, class failures.Class, send, sinceArrival time.Duration) {
	c := string(dest.Connector)
	m.Deliveries.WithLabelValues(c, string(class)).Inc()
	m.SendTime.WithLabelValues(c).Observe(send.Seconds())
	if class == failures.Delivered {
		m.Latency.WithLabelValues(c).Observe(sinceArrival.Seconds())
	}
}
