package dispatch

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/failures"
	"github.com/mercamap/relay/internal/store"
)

// Metrics count deliveries and leases.
type Metrics struct {
	Deliveries *prometheus.CounterVec   // by connector and outcome class
	Latency    *prometheus.HistogramVec // arrival in Redis to the bus's answer, delivered only
	SendTime   *prometheus.HistogramVec // one write's round trip
	Leases     prometheus.Gauge
	// SetupRefused counts setup checks that refused a pending destination, by reason:
	// failures.ReasonExternalIDNotEnforced, or "setup_incomplete" for a step missing.
	SetupRefused *prometheus.CounterVec
	// Disabled counts destinations disabled, by who: store.DisabledByRejections or
	// store.DisabledByOperator (the card's disabled.by).
	Disabled *prometheus.CounterVec
	// HandedOver counts log entries this replica's ingest handed to its own workers
	// (Dispatcher.Appended) before the log follower read them.
	HandedOver prometheus.Counter
}

// setupReasons are SetupRefused's reasons, each at 0 from the start.
var setupReasons = []string{failures.ReasonExternalIDNotEnforced, setupIncomplete}

// setupIncomplete is SetupRefused's reason for a refusal that is a setup step missing
// (a role that does not trust us, a missing label): no security reason.
const setupIncomplete = "setup_incomplete"

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
		SetupRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "relay_setup_refused_total",
			Help: "Setup checks that refused a pending destination, by reason: external_id_not_enforced (its role lets a wrong ExternalId in) or setup_incomplete.",
		}, []string{"reason"}),
	}
	m.HandedOver = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "relay_log_entries_handed_over_total",
		Help: "Log entries this replica's ingest handed to its own destinations' workers as it stored them, before the log follower read them back.",
	})
	m.Disabled = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "relay_destinations_disabled_total",
		Help: "Destinations this replica disabled, by who: rejections (disable_after rejected writes in a row) or operator (an admin's disable, its cascade included).",
	}, []string{"by"})
	// Every connector's series at 0 from the start, so an alert on a rate sees the
	// first attempts (a series born at 1 shows no increase).
	for _, c := range []destination.Connector{destination.EventBridge, destination.Kinesis, destination.PubSub} {
		for _, o := range []failures.Class{failures.Delivered, failures.NotTaken, failures.Rejected} {
			m.Deliveries.WithLabelValues(string(c), string(o))
		}
		m.Latency.WithLabelValues(string(c))
		m.SendTime.WithLabelValues(string(c))
	}
	for _, r := range setupReasons {
		m.SetupRefused.WithLabelValues(r)
	}
	for _, by := range []string{store.DisabledByRejections, store.DisabledByOperator} {
		m.Disabled.WithLabelValues(by)
	}
	if reg != nil {
		reg.MustRegister(m.Deliveries, m.Latency, m.SendTime, m.Leases, m.SetupRefused, m.Disabled, m.HandedOver)
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
