package api

import (
	"context"
	"time"

	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/store"
	"github.com/mercamap/relay/internal/stream"
)

// cardWithLag reads d's card as the destination routes answer it: with its lag and the
// oldest point a replay may start from, all in the card's one round trip
// (stream.Channels.CardAndLag).
func (s *Server) cardWithLag(ctx context.Context, d destination.Destination) (stream.Card, error) {
	card, reading, err := s.opts.Streams.CardAndLag(ctx, d)
	if err != nil {
		return stream.Card{}, err
	}
	s.addLag(&card, reading)
	return card, nil
}

// addLag puts the destination's lag, and the oldest point a replay may start from, on
// its card; the lag is read from positions (store.LagReading: O(1) in Redis whatever
// the backlog). A lag the positions cannot tell (an upgraded log, see LagReading.Known)
// is left off the card.
func (s *Server) addLag(card *stream.Card, r store.LagReading) {
	if from := s.opts.Destinations.ReplayableFrom(); !from.IsZero() {
		card.ReplayableFrom = &from
	}
	if !r.Known {
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
