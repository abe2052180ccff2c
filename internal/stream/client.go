package stream

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ResyncType is the channel event that says replay cannot express a change: load a new
// snapshot.
const ResyncType = "resync.required"

// ClientOptions configure a Client.
type ClientOptions struct {
	Caller  *Caller
	Channel string // destination:<id> or account:<id>
	// MaxHeld is how many early events are held while a gap is filled before a new
	// snapshot is loaded instead (default 1000).
	MaxHeld     int
	ReplayLimit int64         // page size of gap replays (default 1000, the API's cap)
	MinBackoff  time.Duration // first reconnection delay (default 100ms), doubled up to
	MaxBackoff  time.Duration // this (default 10s), with jitter
	// IdleTimeout ends a subscription that sent nothing, not even a keep-alive, for this
	// long (default 1m): a silently dead connection is replaced.
	IdleTimeout time.Duration
	// OnSnapshot is called with each snapshot loaded; OnApply with each event applied
	// and the card it changed (zero when it names none). Both run on Run's goroutine.
	OnSnapshot func(View)
	OnApply    func(Event, Card)
	Logger     *slog.Logger
}

// View is what a Client holds: a channel's cards as of Sequence.
type View struct {
	Channel      string          `json:"channel"`
	Sequence     int64           `json:"sequence"`
	Account      *Account        `json:"account,omitempty"` // account channels only
	Destinations map[string]Card `json:"destinations"`
}

func (v View) clone() View {
	v.Destinations = maps.Clone(v.Destinations) // cards are replaced, never changed in place
	return v
}

// Client follows one channel the way the contract says a client must: subscribe first
// and buffer; load the snapshot; drop buffered events at or below its sequence; apply
// the rest in sequence order, dropping duplicates; on a gap hold what came early and
// replay from its cursor; on 410, resync.required or too many held events load a new
// snapshot; on any disconnect reconnect with backoff, resuming with Last-Event-ID. After
// a reconnection of any length it holds what a client that never left holds.
type Client struct {
	opts ClientOptions
	log  *slog.Logger

	mu     sync.Mutex // guards view and loaded for readers
	view   View
	loaded bool

	// Only Run's goroutine touches these.
	cursor       int64           // the sequence of the last event applied (or the snapshot's)
	held         map[int64]Event // early events, by sequence
	needSnapshot bool
}

// NewClient returns a Client; call Run.
func NewClient(opts ClientOptions) *Client {
	if opts.MaxHeld <= 0 {
		opts.MaxHeld = 1000
	}
	if opts.ReplayLimit <= 0 {
		opts.ReplayLimit = MaxReplayLimit
	}
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = 100 * time.Millisecond
	}
	if opts.MaxBackoff < opts.MinBackoff {
		opts.MaxBackoff = max(10*time.Second, opts.MinBackoff)
	}
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = time.Minute
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Client{opts: opts, log: opts.Logger.With("channel", opts.Channel),
		held: map[int64]Event{}, needSnapshot: true}
}

// View returns a copy of what the client holds now; ok is false before the first snapshot.
func (c *Client) View() (v View, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.view.clone(), c.loaded
}

// Run follows the channel until ctx ends (it then returns nil) or the API refuses the
// token or the channel (400, 401, 403, 404: an *APIError), which retrying cannot fix.
func (c *Client) Run(ctx context.Context) error {
	wait := c.opts.MinBackoff
	for {
		connected, err := c.session(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if permanent(err) {
			return err
		}
		if connected {
			wait = c.opts.MinBackoff
		}
		c.log.Info("subscription ended; reconnecting", "in", wait.String(), "error", err)
		t := time.NewTimer(wait/2 + rand.N(wait/2+1))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		wait = min(2*wait, c.opts.MaxBackoff)
	}
}

func permanent(err error) bool {
	var ae *APIError
	if !errors.As(err, &ae) {
		return false
	}
	switch ae.Status {
	case http.StatusBadRequest, http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound:
		return true
	}
	return false
}

// frame is one SSE event as read off the wire.
type frame struct{ id, event, data string }

// session is one subscription: connected says it got as far as an open stream.
func (c *Client) session(ctx context.Context) (connected bool, err error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	after := int64(-1) // a fresh start: events after the server's current sequence
	if !c.needSnapshot {
		after = c.cursor // resume right after what is applied
	}
	resp, err := c.opts.Caller.subscribe(sctx, c.opts.Channel, after)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	frames := make(chan frame, 1024)
	readErr := make(chan error, 1)
	go func() {
		readErr <- readFrames(sctx, resp.Body, frames, c.opts.IdleTimeout, cancel)
		close(frames)
	}()
	// Held events came on the old connection; the new one sends them again.
	clear(c.held)
	// The subscription is open and buffering in frames: the snapshot loaded now cannot
	// miss an event between the two.
	if c.needSnapshot {
		if err := c.resnapshot(ctx); err != nil {
			return true, err
		}
	}
	for {
		select {
		case <-ctx.Done():
			return true, nil
		case f, ok := <-frames:
			if !ok {
				return true, fmt.Errorf("subscription ended: %w", <-readErr)
			}
			if err := c.handle(ctx, f); err != nil {
				return true, err
			}
		}
	}
}

// readFrames parses text/event-stream into frames until the body ends or nothing (not
// even a comment) arrives for idle.
func readFrames(ctx context.Context, body io.Reader, out chan<- frame, idle time.Duration, cancel func()) error {
	timer := time.AfterFunc(idle, cancel)
	defer timer.Stop()
	r := bufio.NewReaderSize(body, 64<<10)
	var f frame
	var data []string
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return err
		}
		timer.Reset(idle)
		line = strings.TrimRight(line, "\r\n")
		if line == "" {
			if len(data) > 0 {
				f.data = strings.Join(data, "\n")
				select {
				case out <- f:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			f, data = frame{}, nil
			continue
		}
		if rest, ok := strings.CutPrefix(line, ": keep-alive "); ok {
			// Our server's keep-alive names the sequence it has passed.
			select {
			case out <- frame{event: keepAliveFrame, data: rest}:
			case <-ctx.Done():
				return ctx.Err()
			}
			continue
		}
		if strings.HasPrefix(line, ":") {
			continue // any other comment
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "id":
			f.id = value
		case "event":
			f.event = value
		case "data":
			data = append(data, value)
		}
	}
}

// keepAliveFrame is the frame readFrames makes of a keep-alive comment.
const keepAliveFrame = ":keep-alive"

func (c *Client) handle(ctx context.Context, f frame) error {
	if f.event == keepAliveFrame {
		// The stream passed an event we never got (lost on the way, or the last one
		// before a quiet spell): replay it rather than wait for the next event.
		if n, err := strconv.ParseInt(f.data, 10, 64); err == nil && n > c.cursor {
			return c.catchUp(ctx)
		}
		return nil
	}
	if f.event == PointerType {
		var p Pointer
		if json.Unmarshal([]byte(f.data), &p) != nil || p.Sequence <= c.cursor {
			return nil
		}
		// Too large to broadcast: the event itself comes by replay.
		return c.catchUp(ctx)
	}
	var ev Event
	if err := json.Unmarshal([]byte(f.data), &ev); err != nil || ev.Sequence <= 0 {
		c.log.Warn("unreadable event on the subscription; skipped", "id", f.id)
		return nil
	}
	switch {
	case ev.Sequence <= c.cursor:
		return nil // a duplicate: applied already
	case ev.Sequence == c.cursor+1:
		if err := c.apply(ctx, ev); err != nil {
			return err
		}
		return c.drainHeld(ctx)
	}
	if _, dup := c.held[ev.Sequence]; dup {
		return nil
	}
	c.held[ev.Sequence] = ev
	if len(c.held) > c.opts.MaxHeld {
		return c.resnapshot(ctx)
	}
	return c.catchUp(ctx) // a gap: the stored events fill it
}

// catchUp replays from the cursor to the channel's end, then applies what was held.
func (c *Client) catchUp(ctx context.Context) error {
	for {
		var page Page
		q := url.Values{"after": {strconv.FormatInt(c.cursor, 10)}, "limit": {strconv.FormatInt(c.opts.ReplayLimit, 10)}}
		err := c.opts.Caller.Do(ctx, http.MethodGet, ChannelPath(c.opts.Channel, "events"), q, nil, &page)
		var ae *APIError
		if errors.As(err, &ae) && ae.Status == http.StatusGone {
			c.log.Info("cursor older than retention; loading a new snapshot", "cursor", c.cursor)
			return c.resnapshot(ctx)
		}
		if err != nil {
			return err
		}
		for _, ev := range page.Events {
			if ev.Sequence <= c.cursor {
				continue
			}
			if ev.Sequence != c.cursor+1 { // trimmed under our feet
				return c.resnapshot(ctx)
			}
			if err := c.apply(ctx, ev); err != nil {
				return err
			}
		}
		if !page.More || len(page.Events) == 0 {
			return c.drainHeld(ctx)
		}
	}
}

// drainHeld drops held events the cursor passed and applies those that follow it.
func (c *Client) drainHeld(ctx context.Context) error {
	for {
		for seq := range c.held {
			if seq <= c.cursor {
				delete(c.held, seq)
			}
		}
		ev, ok := c.held[c.cursor+1]
		if !ok {
			return nil
		}
		delete(c.held, ev.Sequence)
		if err := c.apply(ctx, ev); err != nil {
			return err
		}
	}
}

// eventData is what every channel event's data holds (lua.go's emit_both).
type eventData struct {
	Destination string                     `json:"destination"`
	State       map[string]json.RawMessage `json:"state"` // the card fields it changed (CardState's names)
}

// apply applies the event that follows the cursor.
func (c *Client) apply(ctx context.Context, ev Event) error {
	if ev.Type == ResyncType {
		return c.resnapshot(ctx)
	}
	var d eventData
	_ = json.Unmarshal(ev.Data, &d) // an event without a card state only moves the cursor
	var card Card
	c.mu.Lock()
	if d.Destination != "" && d.State != nil {
		cur, ok := c.view.Destinations[d.Destination]
		if !ok {
			c.mu.Unlock()
			// A destination the snapshot did not hold (added by a reload): only a
			// snapshot has its card.
			return c.resnapshot(ctx)
		}
		if err := cur.ApplyChanges(d.State); err != nil {
			c.mu.Unlock()
			return c.resnapshot(ctx) // a state this client cannot read: start again from a snapshot
		}
		if c.view.Account == nil {
			cur.Sequence = ev.Sequence
		} else {
			// Every change appends to the destination's and the account's channel in
			// one script, so one account event is one step of the card's own sequence.
			cur.Sequence++
		}
		c.view.Destinations[d.Destination] = cur
		card = cur
	}
	c.view.Sequence = ev.Sequence
	c.mu.Unlock()
	c.cursor = ev.Sequence
	if c.opts.OnApply != nil {
		c.opts.OnApply(ev, card)
	}
	return nil
}

// resnapshot loads a new snapshot and starts over from its sequence.
func (c *Client) resnapshot(ctx context.Context) error {
	c.needSnapshot = true // until it loads: a reconnection starts afresh
	var snap Snapshot
	if err := c.opts.Caller.Do(ctx, http.MethodGet, ChannelPath(c.opts.Channel, "snapshot"), nil, nil, &snap); err != nil {
		return err
	}
	v := View{Channel: snap.Channel, Sequence: snap.Sequence, Account: snap.Data.Account, Destinations: map[string]Card{}}
	if snap.Data.Destination != nil {
		v.Destinations[snap.Data.Destination.ID] = *snap.Data.Destination
	}
	for _, card := range snap.Data.Destinations {
		v.Destinations[card.ID] = card
	}
	c.mu.Lock()
	c.view, c.loaded = v, true
	c.mu.Unlock()
	c.cursor, c.needSnapshot = snap.Sequence, false
	if c.opts.OnSnapshot != nil {
		c.opts.OnSnapshot(v.clone())
	}
	return c.drainHeld(ctx)
}
