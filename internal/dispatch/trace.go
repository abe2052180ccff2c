package dispatch

import (
	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/store"
)

// Tracer starts the span of one write (internal/tracing implements it), a child of the
// event's stored traceparent; end takes the outcome class and the card's sentence.
type Tracer interface {
	StartWrite(traceparent string, dest destination.Destination, eventID string) (end func(outcome, message string))
}

// traceWrite is Options.Tracer.StartWrite, or a no-op while tracing is off.
func (d *Dispatcher) traceWrite(dest destination.Destination, e store.LogEntry) func(outcome, message string) {
	if d.opts.Tracer == nil {
		return func(string, string) {}
	}
	return d.opts.Tracer.StartWrite(e.TraceParent, dest, e.EventID)
}
