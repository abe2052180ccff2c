package ingest

import (
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/mercamap/relay/internal/store"
)

// Tracer starts one span per stored event (internal/tracing implements it). The span
// continues the producer's W3C traceparent when the message carries one; the returned
// traceparent is the span's own, stored with the event; end is called once the batch is
// stored and acked, or with the error that left it in the broker.
type Tracer interface {
	StartConsume(traceparent, tracestate, eventID, eventType string) (stored string, end func(error))
}

// traceSpans are the open spans of one batch.
type traceSpans []func(error)

// start opens e's span when tracing is on and records its traceparent on e.
func (s *traceSpans) start(t Tracer, d amqp.Delivery, e *store.Entry) {
	if t == nil {
		return
	}
	tp, end := t.StartConsume(traceHeader(d.Headers, "traceparent"), traceHeader(d.Headers, "tracestate"), e.EventID, e.CEType)
	e.TraceParent = tp
	*s = append(*s, end)
}

func (s traceSpans) end(err error) {
	for _, end := range s {
		end(err)
	}
}

// traceHeader reads a trace header as W3C Trace Context over AMQP names it, or as the
// CloudEvents distributed tracing extension does in binary mode (ce-traceparent, …).
// The value is not signed: it only ever names a parent span.
func traceHeader(h amqp.Table, name string) string {
	for _, key := range [...]string{name, "ce-" + name, "cloudEvents_" + name, "cloudEvents:" + name} {
		switch v := h[key].(type) {
		case string:
			return v
		case []byte:
			return string(v)
		}
	}
	return ""
}
