package api

import (
	"context"
	"time"

	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/store"
	"github.com/mercamap/relay/internal/stream"
)

// cardLagLimit bounds the events one card counts: a list of many cards stays cheap, and
// past it the card says "at least" (relay_destination_lag_events keeps the full count).
const cardLagLimit = 1000

// addLag puts the destination's lag, and the oldest point a replay may start from, on
// its card. A failed read leaves the lag off the card rather than failing the call: the
// rest of the card was read already.
func (s *Server) addLag(ctx context.Context, card *stream.Card, d destination.Destination) {
	if from := s.opts.Destinations.ReplayableFrom(); !from.IsZero() {
		card.ReplayableFrom = &from
	}
	r, err := s.opts.Store.DestinationLag(ctx, store.Ref{Account: d.Account, ID: d.ID}, cardLagLimit)
	if err != nil {
		return
	}
	lag := &stream.Lag{Events: r.Count, EventsAtLeast: r.Count >= cardLagLimit}
	if r.Next != "" {
		at := store.IDTime(r.Next)
		lag.OldestUndeliveredAt = &at
		lag.OldestUndeliveredAge = max(time.Since(at), 0).Seconds()
	}
	card.Lag = lag
}
