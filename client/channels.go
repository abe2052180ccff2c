package client

import (
	"context"
	"encoding/json"
	"iter"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"

	"github.com/mercamap/relay/internal/stream"
)

// Snapshot is a channel's state (destination:<id> or account:<id>) and the sequence it
// reflects.
func (c *Client) Snapshot(ctx context.Context, channel string) (Snapshot, error) {
	var out Snapshot
	return out, c.do(ctx, call{method: http.MethodGet, path: path("v1", "streams", channel, "snapshot")}, &out)
}

// Events is one page of a channel's events after the cursor after (0: from the first
// kept); limit 0 takes the relay's default. A cursor older than the channel keeps
// answers CURSOR_EXPIRED: load a new snapshot.
func (c *Client) Events(ctx context.Context, channel string, after int64, limit int) (EventPage, error) {
	v := url.Values{"after": {strconv.FormatInt(after, 10)}}
	if limit > 0 {
		v.Set("limit", strconv.Itoa(limit))
	}
	var out EventPage
	return out, c.do(ctx, call{method: http.MethodGet, path: path("v1", "streams", channel, "events"), query: v}, &out)
}

// Update is one step of a followed channel: a snapshot loaded (Snapshot true, every card
// in Destinations), or one event applied in sequence order (Event, and the card it
// changed in Card when it names one).
type Update struct {
	Channel      string
	Sequence     int64 // the last event the follower's state reflects
	Snapshot     bool
	Destinations map[string]Card // on a snapshot: the channel's cards by id
	Event        *ChannelEvent
	Card         *Card
}

// FollowOptions change Follow.
type FollowOptions struct {
	// MaxHeld is how many early events are held while a gap fills before a new snapshot
	// is loaded instead (0: 1000).
	MaxHeld int
	Logger  *slog.Logger // reconnections and resyncs (nil: none)
}

// Follow follows a channel the way the API contract says a client must: subscribe
// first and buffer; load the snapshot; drop what it already reflects; apply the rest in
// sequence order, each once; replay a gap from the cursor; load a new snapshot on 410,
// resync.required or too many held events; reconnect with Last-Event-ID whenever the
// connection drops. After a reconnection of any length its state is that of a client
// that never left. The sequence ends when ctx ends, when the loop stops, or with the
// *Error of a refusal retrying cannot fix (400, 401, 403, 404).
func (c *Client) Follow(ctx context.Context, channel string, opts FollowOptions) iter.Seq2[Update, error] {
	return func(yield func(Update, error) bool) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		updates := make(chan Update)
		send := func(u Update) {
			select {
			case updates <- u:
			case <-ctx.Done():
			}
		}
		follower := stream.NewClient(stream.ClientOptions{
			Caller:  &stream.Caller{Base: c.base, Token: c.token, HTTP: c.opts.HTTPClient},
			Channel: channel, MaxHeld: opts.MaxHeld, Logger: opts.Logger,
			OnSnapshot: func(v stream.View) {
				u := Update{Channel: channel, Sequence: v.Sequence, Snapshot: true, Destinations: map[string]Card{}}
				for id, card := range v.Destinations {
					u.Destinations[id] = convert[Card](card)
				}
				send(u)
			},
			OnApply: func(ev stream.Event, card stream.Card) {
				e := convert[ChannelEvent](ev)
				u := Update{Channel: channel, Sequence: ev.Sequence, Event: &e}
				if card.ID != "" {
					cc := convert[Card](card)
					u.Card = &cc
				}
				send(u)
			},
		})
		done := make(chan error, 1)
		go func() { done <- follower.Run(ctx) }()
		for {
			select {
			case u := <-updates:
				if !yield(u, nil) {
					cancel()
					<-done
					return
				}
			case err := <-done:
				if err != nil {
					yield(Update{}, asError(err))
				}
				return
			}
		}
	}
}

// convert turns the follower's value into this package's type of the same JSON.
func convert[T any](v any) T {
	var out T
	b, _ := json.Marshal(v)
	_ = json.Unmarshal(b, &out)
	return out
}

// asError turns the caller's error answer (a call's, or the follower's refusal) into
// an *Error.
func asError(err error) error {
	if ae, ok := err.(*stream.APIError); ok {
		e := &Error{Status: ae.Status, Code: ErrorCode(ae.Code), Message: ae.Message, RetryAfter: ae.RetryAfter}
		for _, f := range ae.Fields {
			e.Fields = append(e.Fields, FieldProblem{Field: f.Field, Message: f.Message})
		}
		return e
	}
	return err
}
