package ingest

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/mercamap/relay/internal/cloudevent"
	"github.com/mercamap/relay/internal/signature"
)

// Metrics counts what ingest did with each message.
type Metrics struct {
	Consumed    prometheus.Counter
	Acked       prometheus.Counter
	Stored      prometheus.Counter
	Duplicates  prometheus.Counter
	Unrouted    prometheus.Counter
	Quarantined *prometheus.CounterVec
	// DeadLettered counts messages rejected to the broker's dead-letter exchange (the
	// quarantine) because ingest could not republish them itself.
	DeadLettered *prometheus.CounterVec
	StoreErrors  prometheus.Counter
	// QuarantineTruncated counts quarantine copies whose body was cut to
	// rabbitmq.quarantine.max_body_bytes. QuarantineDropped and QuarantineDroppedBytes
	// count what the broker dropped from the full quarantine queue, oldest first (read
	// off its drop path by whichever replica got it: sum them over replicas).
	QuarantineTruncated    prometheus.Counter
	QuarantineDropped      prometheus.Counter
	QuarantineDroppedBytes prometheus.Counter
	// ConnectionLosses counts established broker connections that ended other than by
	// shutdown.
	ConnectionLosses prometheus.Counter
	// PartitionsActive is how many partitions this replica took events from in the last
	// rebalance round (at most its share); PartitionHandovers counts those it handed to
	// another replica. With one queue neither moves.
	PartitionsActive   prometheus.Gauge
	PartitionHandovers prometheus.Counter
}

// quarantineReasons are the verification reasons a message is quarantined for (and
// dead-lettered for, when its copy would not fit in a frame or was refused).
var quarantineReasons = []string{
	string(signature.MissingSignature), string(signature.UnknownVersion), string(signature.BadSignature),
	string(signature.TooOld), string(signature.FromTheFuture),
	string(cloudevent.NotACloudEvent), string(cloudevent.BodyNotJSON), TenantMismatch, EventIDMismatch,
}

// NewMetrics creates the ingest metrics and registers them on reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Consumed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "relay_events_consumed_total", Help: "Messages taken off the broker.",
		}),
		Acked: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "relay_events_acked_total", Help: "Messages acked to the broker (stored, duplicate, unrouted or quarantined).",
		}),
		Stored: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "relay_events_stored_total", Help: "Events appended to at least one account log.",
		}),
		Duplicates: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "relay_events_duplicate_total", Help: "Events whose ce-id every matching account had seen: acked, appended nowhere.",
		}),
		Unrouted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "relay_events_unrouted_total", Help: "Verified events that belong to no configured account: acked and dropped.",
		}),
		Quarantined: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "relay_events_quarantined_total", Help: "Messages that failed verification, republished to the quarantine exchange.",
		}, []string{"reason"}),
		DeadLettered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "relay_events_dead_lettered_total", Help: "Messages rejected so that the broker dead-letters them, unchanged, to the quarantine (the copy would not fit in a frame, or the headers are unreadable).",
		}, []string{"reason"}),
		StoreErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "relay_store_append_errors_total", Help: "Failed append round trips to Redis (the batch is retried, nothing is acked).",
		}),
		QuarantineTruncated: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "relay_quarantine_truncated_total", Help: "Quarantine copies kept as a prefix of the body (rabbitmq.quarantine.max_body_bytes), with its size and SHA-256.",
		}),
		QuarantineDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "relay_quarantine_dropped_total", Help: "Messages the broker dropped from the full quarantine queue, oldest first (rabbitmq.quarantine.max_messages or max_bytes), counted by this replica.",
		}),
		QuarantineDroppedBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "relay_quarantine_dropped_bytes_total", Help: "Body bytes of the messages counted by relay_quarantine_dropped_total.",
		}),
		ConnectionLosses: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "relay_ingest_connection_losses_total", Help: "Established broker connections of ingest that were lost (not closed by shutdown).",
		}),
		PartitionsActive: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "relay_ingest_partitions_active", Help: "Partitions (rabbitmq.partitions) this replica took events from in the last rebalance round.",
		}),
		PartitionHandovers: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "relay_ingest_partition_handovers_total", Help: "Partitions this replica handed to another replica because it held more than its share.",
		}),
	}
	// Every reason at 0 from the start: the first message of a reason is then an
	// increase an alert sees (a series born at 1 shows no increase).
	for _, r := range quarantineReasons {
		m.Quarantined.WithLabelValues(r)
		m.DeadLettered.WithLabelValues(r)
	}
	for _, r := range []string{HeadersTooLarge, HeadersTooDeep, HeadersTooMany, HeadersMalformed} {
		m.DeadLettered.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(m.Consumed, m.Acked, m.Stored, m.Duplicates, m.Unrouted, m.Quarantined, m.DeadLettered, m.StoreErrors, m.ConnectionLosses,
			m.QuarantineTruncated, m.QuarantineDropped, m.QuarantineDroppedBytes,
			m.PartitionsActive, m.PartitionHandovers)
	}
	return m
}
