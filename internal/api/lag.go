package api

import (
	"context"
	"time"

	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/store"
	"github.com/mercamap/relay/internal/stream"
)

// addLag puts the destination's lag, and the oldest point a replay may start from, on
// its card, read from positions (store.DestinationLag: O(1) in Redis whatever the
// backlog). A failed read, or a lag the positions cannot tell (an upgraded log, see
// LagReading.Known), leaves the lag off the card rather than failing the call: the rest
// of the card was read already.
func (s *Server) addLag(ctx context.Context, card *stream.Card, d destination.Destination) {
	if from := s.opts.Destinations.ReplayableFrom(); !from.IsZero() {
		card.ReplayableFrom = &from
	}
	r, err := s.opts.Store.DestinationLag(ctx, store.Ref{Account: d.Account, ID: d.ID})
	if err != nil || !r.Known {
		return
	}
	lag := &stream.Lag{Events: r.Events} // exact: EventsAtLeast stays false
	if r.Next != "" {
		at := store.IDTime(r.Next)
		lag.OldestUndeliveredAt = &at
		lag.OldestUndeliveredAge = max(time.Since(at), 0).Seconds()
	}
	card.Lag = lag
}
