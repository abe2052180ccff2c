package client

import (
	"context"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// Connectors lists each connector with how many destinations the token sees.
func (c *Client) Connectors(ctx context.Context) (ConnectorList, error) {
	var out ConnectorList
	return out, c.do(ctx, call{method: http.MethodGet, path: "/v1/connectors"}, &out)
}

// ListQuery filters a destination list; the zero value lists every card.
type ListQuery struct {
	PageSize int      // cards per page asked for (0: 200, the most a page holds)
	Account  string   // that account's only
	Statuses []string // active, paused, disabled, pending, failing: any of them
	Search   string   // the id holds this text
}

// Destinations lists a connector's cards, following the pages: each card once, in id
// order; an error ends the sequence.
func (c *Client) Destinations(ctx context.Context, connector Connector, q ListQuery) iter.Seq2[Card, error] {
	return func(yield func(Card, error) bool) {
		v := url.Values{"page_size": {strconv.Itoa(max(q.PageSize, 0))}}
		if q.PageSize == 0 {
			v.Set("page_size", "200")
		}
		if q.Account != "" {
			v.Set("account", q.Account)
		}
		if len(q.Statuses) > 0 {
			v.Set("status", strings.Join(q.Statuses, ","))
		}
		if q.Search != "" {
			v.Set("q", q.Search)
		}
		for {
			var page DestinationList
			if err := c.do(ctx, call{method: http.MethodGet, path: path("v1", "connectors", string(connector), "destinations"), query: v}, &page); err != nil {
				yield(Card{}, err)
				return
			}
			for _, card := range page.Destinations {
				if !yield(card, nil) {
					return
				}
			}
			if page.NextPageToken == nil {
				return
			}
			v.Set("page_token", *page.NextPageToken)
		}
	}
}

// AllDestinations is every card the token sees, connector by connector.
func (c *Client) AllDestinations(ctx context.Context) ([]Card, error) {
	conns, err := c.Connectors(ctx)
	if err != nil {
		return nil, err
	}
	var cards []Card
	for _, conn := range conns.Connectors {
		if conn.Destinations == 0 {
			continue
		}
		for card, err := range c.Destinations(ctx, conn.Connector, ListQuery{}) {
			if err != nil {
				return nil, err
			}
			cards = append(cards, card)
		}
	}
	return cards, nil
}

// Ref names a destination: its connector and id.
type Ref struct {
	Connector Connector
	ID        string
}

// RefOf is the Ref of a card.
func RefOf(card Card) Ref { return Ref{Connector: card.Connector, ID: card.ID} }

func (r Ref) path(sub ...string) string {
	return path(append([]string{"v1", "connectors", string(r.Connector), "destinations", r.ID}, sub...)...)
}

// Find is the card of the destination id among those the token sees, wherever its
// connector: a NOT_FOUND *Error when there is none.
func (c *Client) Find(ctx context.Context, id string) (Card, error) {
	conns, err := c.Connectors(ctx)
	if err != nil {
		return Card{}, err
	}
	for _, conn := range conns.Connectors {
		if conn.Destinations == 0 {
			continue
		}
		card, err := c.Destination(ctx, Ref{conn.Connector, id})
		if !IsCode(err, CodeNotFound) {
			return card, err
		}
	}
	return Card{}, &Error{Status: http.StatusNotFound, Code: CodeNotFound, Message: "no destination " + strconv.Quote(id) + " that this token may see"}
}

// Destination is one card.
func (c *Client) Destination(ctx context.Context, r Ref) (Card, error) {
	var out Card
	return out, c.do(ctx, call{method: http.MethodGet, path: r.path()}, &out)
}

// CreateDestination adds a destination under connector; it is pending until its setup
// check passes. A non-empty idempotencyKey makes a retried create (on any replica,
// within 24 hours) answer with what the first one made: pass the same key again.
func (c *Client) CreateDestination(ctx context.Context, connector Connector, body DestinationCreate, idempotencyKey string) (Card, error) {
	cl := call{method: http.MethodPost, path: path("v1", "connectors", string(connector), "destinations"), body: body}
	if idempotencyKey != "" {
		cl.header = http.Header{"Idempotency-Key": {idempotencyKey}}
	}
	var out Card
	return out, c.do(ctx, cl, &out)
}

// ChangeDestination changes the role, KMS key, event filter, window or rate cap of a
// destination the API made. Each field named in null (FieldInFlight, FieldMaxRate) is
// sent as null, which sets it back: the relay's default window, no rate cap.
func (c *Client) ChangeDestination(ctx context.Context, r Ref, body DestinationChange, null ...string) (Card, error) {
	sent, err := withNulls(body, null)
	if err != nil {
		return Card{}, err
	}
	var out Card
	return out, c.do(ctx, call{method: http.MethodPatch, path: r.path(), body: sent}, &out)
}

// DeleteDestination deletes a destination the API made, on every replica.
func (c *Client) DeleteDestination(ctx context.Context, r Ref) (DestinationDeleted, error) {
	var out DestinationDeleted
	return out, c.do(ctx, call{method: http.MethodDelete, path: r.path()}, &out)
}

// Pause pauses the destination: no write starts after the answer, on any replica.
func (c *Client) Pause(ctx context.Context, r Ref) (ChangedCard, error) {
	var out ChangedCard
	return out, c.do(ctx, call{method: http.MethodPost, path: r.path("pause")}, &out)
}

// Activate switches the destination back on; replay "" delivers what arrives from now
// on, "since_paused" or "since_disabled" what arrived meanwhile first.
func (c *Client) Activate(ctx context.Context, r Ref, replay ActivateRequestReplay) (ChangedCard, error) {
	cl := call{method: http.MethodPost, path: r.path("activate")}
	if replay != "" {
		cl.body = ActivateRequest{Replay: &replay}
	}
	var out ChangedCard
	return out, c.do(ctx, cl, &out)
}

// Test writes a relay.test event through the whole path and says what the bus answered.
func (c *Client) Test(ctx context.Context, r Ref) (TestResult, error) {
	var out TestResult
	return out, c.do(ctx, call{method: http.MethodPost, path: r.path("test")}, &out)
}

// Replay delivers the destination's events again from body's point (From or AfterEvent).
func (c *Client) Replay(ctx context.Context, r Ref, body ReplayRequest) (ReplayedCard, error) {
	body.DryRun = nil
	var out ReplayedCard
	return out, c.do(ctx, call{method: http.MethodPost, path: r.path("replay"), body: body}, &out)
}

// ReplayDryRun counts what Replay would send, changing nothing.
func (c *Client) ReplayDryRun(ctx context.Context, r Ref, body ReplayRequest) (ReplayDryRun, error) {
	yes := true
	body.DryRun = &yes
	var out ReplayDryRun
	return out, c.do(ctx, call{method: http.MethodPost, path: r.path("replay"), body: body}, &out)
}

// Disable disables the destination and its cascade (an admin token).
func (c *Client) Disable(ctx context.Context, r Ref, reason string) (DisableResult, error) {
	cl := call{method: http.MethodPost, path: r.path("disable")}
	if reason != "" {
		cl.body = DisableRequest{Reason: &reason}
	}
	var out DisableResult
	return out, c.do(ctx, cl, &out)
}

// Attempts is the destination's attempt log, newest first, following the pages.
func (c *Client) Attempts(ctx context.Context, r Ref) iter.Seq2[Attempt, error] {
	return func(yield func(Attempt, error) bool) {
		v := url.Values{"limit": {"500"}}
		for {
			var page AttemptPage
			if err := c.do(ctx, call{method: http.MethodGet, path: r.path("attempts"), query: v}, &page); err != nil {
				yield(Attempt{}, err)
				return
			}
			for _, a := range page.Attempts {
				if !yield(a, nil) {
					return
				}
			}
			if page.Next == nil {
				return
			}
			v.Set("before", strconv.FormatInt(*page.Next, 10))
		}
	}
}

// Attempt is line n of the attempt log with what was sent and the bus's answer.
func (c *Client) Attempt(ctx context.Context, r Ref, n int64) (AttemptDetail, error) {
	var out AttemptDetail
	return out, c.do(ctx, call{method: http.MethodGet, path: r.path("attempts", strconv.FormatInt(n, 10))}, &out)
}

// Retry writes the message of attempt n once more, outside the ordered stream.
func (c *Client) Retry(ctx context.Context, r Ref, n int64) (RetryQueued, error) {
	var out RetryQueued
	return out, c.do(ctx, call{method: http.MethodPost, path: r.path("attempts", strconv.FormatInt(n, 10), "retry")}, &out)
}

// Minutes is the destination's deliveries and failures per minute over the last day.
func (c *Client) Minutes(ctx context.Context, r Ref) (Minutes, error) {
	var out Minutes
	return out, c.do(ctx, call{method: http.MethodGet, path: r.path("minutes")}, &out)
}
