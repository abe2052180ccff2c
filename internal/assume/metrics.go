package assume

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/mercamap/relay/internal/failures"
)

// Metrics count the AssumeRole calls made on our principal, and those STS throttled.
type Metrics struct {
	Calls     *prometheus.CounterVec // by call: probe or session
	Throttled *prometheus.CounterVec // by call: STS throttled our principal
}

// NewMetrics creates the STS metrics, each label at 0 from the start, and registers them
// on reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "relay_sts_calls_total", Help: "AssumeRole calls made on the relay's own principal, by call (probe, session).",
		}, []string{"call"}),
		Throttled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "relay_sts_throttled_total", Help: "AssumeRole calls STS answered with a throttle of the relay's own principal, by call (probe, session).",
		}, []string{"call"}),
	}
	for _, call := range []string{"probe", "session"} {
		m.Calls.WithLabelValues(call)
		m.Throttled.WithLabelValues(call)
	}
	if reg != nil {
		reg.MustRegister(m.Calls, m.Throttled)
	}
	return m
}

// count records one call and whether STS throttled it.
func (m *Metrics) count(call string, err error) {
	m.Calls.WithLabelValues(call).Inc()
	if failures.Throttled(err) {
		m.Throttled.WithLabelValues(call).Inc()
	}
}
