package dispatch

import (
	"errors"

	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/store"
)

// Renderer is a Sink that can say what it writes for a message without writing it
// (the three connectors' sinks are).
type Renderer interface {
	Render(d destination.Destination, m destination.Message) (destination.Sent, error)
}

// ErrNoRender is returned by Sent when the destination's sink cannot rebuild a message.
var ErrNoRender = errors.New("this destination's sink cannot show what it writes")

// Sent rebuilds the message the destination's sink writes for a log entry, as the bus
// receives it: the message is built from the entry exactly as a delivery builds it
// (Dispatcher.message), then mapped by the sink.
func (d *Dispatcher) Sent(id string, e store.LogEntry) (destination.Sent, error) {
	dest, ok := d.Destination(id)
	if !ok {
		return destination.Sent{}, destination.ErrNotFound
	}
	r, ok := d.sink(dest).(Renderer)
	if !ok {
		return destination.Sent{}, ErrNoRender
	}
	return r.Render(dest, d.message(dest, e))
}
