// Package stream owns the replayable channels: the cards a snapshot holds, replay pages
// read from the stored channel events, the live SSE transport with its pointer events,
// and Client, the follower every watcher is. The stored sequence is the truth: the live
// transport only makes news arrive sooner, and this package never writes a channel event.
package stream

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/store"
)

// Directory is where the configured destinations are looked up (the dispatcher).
type Directory interface {
	// AccountDestinations is one account's destinations, sorted by id; read-only.
	AccountDestinations(acct string) []destination.Destination
	Destination(id string) (destination.Destination, bool)
}

// Options configure Channels.
type Options struct {
	Store     *store.Store
	Directory Directory
	Identity  destination.Identity // ours, shown on cards; SetIdentity changes it
	// BroadcastLimit is the largest SSE data line sent as is; a larger event goes out as
	// a relay-pointer/1 the client fetches by replay (default 64 KiB).
	BroadcastLimit int
	KeepAlive      time.Duration // comment line on an idle subscription (default 15s)
	Poll           time.Duration // how often the live transport looks for news (default 200ms)
	// Drop, when set, leaves the events it returns true for off the live transport, as
	// a lossy network would. Tests only: replay must recover them.
	Drop   func(channel string, sequence int64) bool
	Logger *slog.Logger
	// ViewCache is how many destinations' cards are kept built between answers
	// (default DefaultViewCache; negative: none).
	ViewCache int
	// Window is delivery.in_flight: the window a card shows for a destination that sets
	// none (default destination.DefaultInFlight). Read once: delivery is restart-only.
	Window int
}

// Channels serves snapshots, replay pages and live subscriptions.
type Channels struct {
	opts     Options
	identity atomic.Pointer[destination.Identity]
	hub      *hub
	views    *views // the cards as last built, by destination id (view.go)
}

// New returns Channels over the store and the configured destinations.
func New(opts Options) *Channels {
	if opts.BroadcastLimit <= 0 {
		opts.BroadcastLimit = 64 << 10
	}
	if opts.KeepAlive <= 0 {
		opts.KeepAlive = 15 * time.Second
	}
	if opts.Poll <= 0 {
		opts.Poll = 200 * time.Millisecond
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.ViewCache == 0 {
		opts.ViewCache = DefaultViewCache
	}
	if opts.Window <= 0 {
		opts.Window = destination.DefaultInFlight
	}
	c := &Channels{opts: opts, hub: newHub(opts.Store, opts.Poll, opts.Logger), views: newViews(opts.ViewCache)}
	c.SetIdentity(opts.Identity)
	return c
}

// SetIdentity changes the identity shown on cards (a config reload).
func (c *Channels) SetIdentity(id destination.Identity) { c.identity.Store(&id) }

// Kinds of channel.
const (
	KindDestination = "destination"
	KindAccount     = "account"
)

// Channel is a resolved channel: its name, the account whose keys hold it and, for a
// destination channel, the destination.
type Channel struct {
	Name        string
	Account     string
	Destination *destination.Destination
}

// ParseName splits "destination:<id>" or "account:<id>"; ok is false for anything else.
func ParseName(name string) (kind, id string, ok bool) {
	kind, id, found := strings.Cut(name, ":")
	if !found || id == "" || (kind != KindDestination && kind != KindAccount) {
		return "", "", false
	}
	return kind, id, true
}

// Resolve finds the channel a name stands for. An account channel always resolves: the
// caller decides which accounts exist.
func (c *Channels) Resolve(name string) (Channel, error) {
	kind, id, ok := ParseName(name)
	if !ok {
		return Channel{}, destination.ErrNotFound
	}
	if kind == KindAccount {
		return Channel{Name: name, Account: id}, nil
	}
	d, ok := c.opts.Directory.Destination(id)
	if !ok {
		return Channel{}, destination.ErrNotFound
	}
	return Channel{Name: name, Account: d.Account, Destination: &d}, nil
}

// Card reads d's card (its Lag left out, as snapshots show it); see CardAndLag.
func (c *Channels) Card(ctx context.Context, d destination.Destination) (Card, error) {
	card, _, err := c.CardAndLag(ctx, d)
	return card, err
}

// CardAndLag reads d's card and where d stands in its account's log, in one round trip
// (store.ReadCard): its state and sequence are read together, and the state only when
// it is not the one the replica's view of d was built from. The card is that view's
// copy while its sequence (and definition, identity and ExternalId) hold; else it is
// built again and kept (only its state fields, when those alone changed).
func (c *Channels) CardAndLag(ctx context.Context, d destination.Destination) (Card, store.LagReading, error) {
	deadline := time.Now().Add(configLagWait)
	for {
		id := *c.identity.Load()
		prev := c.views.get(d.ID)
		var held *store.State
		if prev != nil {
			held = &prev.state
		}
		rd, err := c.opts.Store.ReadCard(ctx, store.Ref{Account: d.Account, ID: d.ID}, held)
		if errors.Is(err, destination.ErrNotFound) {
			c.views.drop(d.ID)
			return Card{}, store.LagReading{}, destination.ErrNotFound
		}
		if err != nil {
			return Card{}, store.LagReading{}, err
		}
		st := rd.State
		if st == nil {
			st = held // still the stored state
		}
		if agrees(d, *st) || !c.waitForConfig(ctx, deadline, d.ID) {
			v, key := prev, staticKeyOf(d, *st, id, c.opts.Window)
			if rd.State != nil || prev.static != key {
				v = newView(prev, key, d, *st, id)
				c.views.put(d.ID, v)
			}
			return v.card, rd.Lag, nil
		}
		if d, err = c.destination(d.ID); err != nil {
			return Card{}, store.LagReading{}, err
		}
	}
}

// configLagWait is how long a card waits for the in-memory config to catch up with a
// redefinition Redis already holds (a reload writes state, then swaps the config).
const configLagWait = 2 * time.Second

// agrees reports whether the stored state was written for this definition of d. A
// reload stores the new fingerprint (and appends resync.required) before the new
// definition is in memory: a snapshot taken in between would pair the new sequence with
// the old target, and the client would never hear of the change again.
func agrees(d destination.Destination, st store.State) bool {
	return st.Fingerprint == "" || st.Fingerprint == d.Fingerprint()
}

// waitForConfig pauses before reading again; false once the deadline passed (replicas
// running different configs disagree for good: the card shows this one's).
func (c *Channels) waitForConfig(ctx context.Context, deadline time.Time, id string) bool {
	if time.Now().After(deadline) {
		c.opts.Logger.Warn("stored state was written for another definition of the destination; is the config the same on every replica?", "destination", id)
		return false
	}
	select {
	case <-ctx.Done():
		return false
	case <-time.After(10 * time.Millisecond):
		return true
	}
}

func (c *Channels) destination(id string) (destination.Destination, error) {
	d, ok := c.opts.Directory.Destination(id)
	if !ok {
		return destination.Destination{}, destination.ErrNotFound
	}
	return d, nil
}

// Snapshot is a channel's state as of Sequence; Cursor is Sequence as a replay cursor.
type Snapshot struct {
	Channel  string       `json:"channel"`
	Sequence int64        `json:"sequence"`
	Cursor   string       `json:"cursor"`
	Data     SnapshotData `json:"data"`
}

// SnapshotData is {"destination":card} for a destination channel, or
// {"account":{"id"},"destinations":[card,…]} for an account channel.
type SnapshotData struct {
	Destination  *Card    `json:"destination,omitempty"`
	Account      *Account `json:"account,omitempty"`
	Destinations []Card   `json:"destinations,omitempty"`
}

// MarshalJSON writes the account form with its destinations even when there are none.
func (d SnapshotData) MarshalJSON() ([]byte, error) {
	if d.Account != nil {
		cards := d.Destinations
		if cards == nil {
			cards = []Card{}
		}
		return json.Marshal(struct {
			Account      *Account `json:"account"`
			Destinations []Card   `json:"destinations"`
		}{d.Account, cards})
	}
	return json.Marshal(struct {
		Destination *Card `json:"destination"`
	}{d.Destination})
}

// Account is the account part of an account channel's snapshot.
type Account struct {
	ID string `json:"id"`
}

// Snapshot reads a channel's state and the sequence it reflects in one MULTI.
func (c *Channels) Snapshot(ctx context.Context, ch Channel) (Snapshot, error) {
	id := *c.identity.Load()
	if ch.Destination != nil {
		card, err := c.Card(ctx, *ch.Destination)
		if err != nil {
			return Snapshot{}, err
		}
		return Snapshot{Channel: ch.Name, Sequence: card.Sequence, Cursor: cursor(card.Sequence),
			Data: SnapshotData{Destination: &card}}, nil
	}
	deadline := time.Now().Add(configLagWait)
	var cards []Card
	var seq int64
	for {
		dests := c.opts.Directory.AccountDestinations(ch.Account)
		ids := make([]string, len(dests))
		for i, d := range dests {
			ids[i] = d.ID
		}
		states, n, err := c.opts.Store.AccountStates(ctx, ch.Account, ids)
		if err != nil {
			return Snapshot{}, err
		}
		cards, seq = []Card{}, n
		lagging := ""
		for _, d := range dests {
			st, ok := states[d.ID]
			if !ok {
				continue
			}
			if !agrees(d, st) {
				lagging = d.ID
			}
			// The static part as this replica's view of d has it, when it does; the
			// account's views are not kept (a large account would evict every other).
			cards = append(cards, newView(c.views.get(d.ID), staticKeyOf(d, st, id, c.opts.Window), d, st, id).card)
		}
		if lagging == "" || !c.waitForConfig(ctx, deadline, lagging) {
			break
		}
	}
	return Snapshot{Channel: ch.Name, Sequence: seq, Cursor: cursor(seq),
		Data: SnapshotData{Account: &Account{ID: ch.Account}, Destinations: cards}}, nil
}

// Event is one stored channel event, as replay and the live transport carry it.
type Event struct {
	ID       string          `json:"id"` // "<channel>:<sequence>": stable
	Sequence int64           `json:"sequence"`
	Type     string          `json:"type"`
	Time     time.Time       `json:"time"`
	Data     json.RawMessage `json:"data"`
}

// Page is one replay page; Cursor is the sequence of its last event (or the after it
// was asked for, when empty).
type Page struct {
	Events []Event `json:"events"`
	Cursor string  `json:"cursor"`
	More   bool    `json:"more"`
}

// ErrCursorExpired is returned for a cursor older than retention (or ahead of the
// channel): the client must load a new snapshot.
var ErrCursorExpired = errors.New("cursor expired: load a new snapshot")

// Replay limits.
const (
	DefaultReplayLimit = 100
	MaxReplayLimit     = 1000
)

// Replay returns up to limit events with sequence > after; after=0 starts at the first
// retained event. Replay never holds a pointer: it reads the stored events themselves.
func (c *Channels) Replay(ctx context.Context, ch Channel, after, limit int64) (Page, error) {
	limit = max(1, min(limit, MaxReplayLimit))
	p, err := c.opts.Store.ReadChannel(ctx, ch.Account, ch.Name, after, limit)
	if err != nil {
		return Page{}, err
	}
	// A cursor past the channel's end was never handed out by this store (Redis lost
	// data, or another deployment's cursor): only a new snapshot is safe.
	if p.Expired || after > p.Last {
		return Page{}, ErrCursorExpired
	}
	out := Page{Events: make([]Event, 0, len(p.Events)), Cursor: cursor(after), More: p.More}
	for _, e := range p.Events {
		out.Events = append(out.Events, eventFrom(ch.Name, e))
		out.Cursor = cursor(e.Sequence)
	}
	return out, nil
}

func eventFrom(channel string, e store.ChannelEvent) Event {
	data := json.RawMessage(e.Data)
	if len(data) == 0 {
		data = json.RawMessage("null")
	}
	return Event{ID: EventID(channel, e.Sequence), Sequence: e.Sequence, Type: e.Type, Time: e.Time, Data: data}
}

// EventID is the stable id of a channel's event.
func EventID(channel string, seq int64) string { return channel + ":" + strconv.FormatInt(seq, 10) }

func cursor(seq int64) string { return strconv.FormatInt(seq, 10) }
