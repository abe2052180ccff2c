package eventbridge

import (
	"time"

	"github.com/mercamap/relay/internal/destination"
)

// Render is the PutEvents entry Send writes for m, without writing it.
func (s *Sink) Render(d destination.Destination, m destination.Message) (destination.Sent, error) {
	e := &destination.EventBridgeEntry{EventBusName: d.BusARN, Source: s.source, DetailType: m.Type, Detail: string(m.Body())}
	if t, err := time.Parse(time.RFC3339Nano, m.CreatedAt); err == nil {
		e.Time = t.UTC().Format(time.RFC3339Nano)
	}
	return destination.Sent{Connector: string(destination.EventBridge), EventBridge: e}, nil
}
