package stream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/mercamap/relay/internal/store"
)

// PointerType is the SSE event that stands in for an event too large to broadcast. It
// is not an event: it is never stored and never in a replay; its data is
// {"sequence":N}, the event to fetch by replay.
const PointerType = "relay-pointer/1"

// Pointer is a pointer's data.
type Pointer struct {
	Sequence int64 `json:"sequence"`
}

// liveBatch is how many stored events one read of a subscription takes.
const liveBatch = 100

// writeTimeout bounds one write to a subscriber: a client that stopped reading is cut
// rather than holding its goroutine forever.
const writeTimeout = 30 * time.Second

// Subscribe streams a channel's events as text/event-stream until ctx ends or the
// client goes: `id: <sequence>`, `event: <type>`, `data: <the event as replay shows
// it>`, with `: keep-alive <sequence>` comments while idle. It starts after the sequence after, or
// after the channel's current sequence when after < 0. The response headers are sent
// only once the starting point is fixed, so a client that loads its snapshot after they
// arrive cannot miss an event between the two.
func (c *Channels) Subscribe(ctx context.Context, w http.ResponseWriter, ch Channel, after int64) error {
	ref := store.ChannelRef{Account: ch.Account, Channel: ch.Name}
	if after < 0 {
		seq, err := c.opts.Store.ChannelSequence(ctx, ch.Account, ch.Name)
		if err != nil {
			return err
		}
		after = seq
	}
	c.hub.join(ref)
	defer c.hub.leave(ref)

	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // proxies must not hold events back
	w.WriteHeader(http.StatusOK)
	send := func(s string) error {
		_ = rc.SetWriteDeadline(time.Now().Add(writeTimeout)) // unsupported writers: no deadline
		if _, err := io.WriteString(w, s); err != nil {
			return err
		}
		return rc.Flush()
	}
	if err := send(": subscribed after " + strconv.FormatInt(after, 10) + "\n\n"); err != nil {
		return nil // the client went
	}
	keepAlive := time.NewTicker(c.opts.KeepAlive)
	defer keepAlive.Stop()
	for {
		wake, known := c.hub.wakeChan(ref)
		frames, more, expired, err := c.next(ctx, ref, after, known)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			c.opts.Logger.Warn("live transport cannot read a channel", "channel", ch.Name, "error", err)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(c.opts.Poll):
			}
			continue
		}
		if expired {
			// The client's Last-Event-ID is older than retention: send what is kept. The
			// gap it sees makes it replay, get 410 and load a new snapshot.
			after = 0
			continue
		}
		var out []byte
		for _, f := range frames {
			after = f.seq
			if c.opts.Drop != nil && c.opts.Drop(ch.Name, f.seq) {
				continue
			}
			out = append(out, f.data...)
		}
		if len(out) > 0 {
			if err := send(string(out)); err != nil {
				return nil
			}
		}
		if more {
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
		case <-keepAlive.C:
			// The comment names the last sequence this stream passed: a client that lost
			// the channel's latest event on the way sees it is behind without waiting for
			// the next one.
			if err := send(": keep-alive " + strconv.FormatInt(after, 10) + "\n\n"); err != nil {
				return nil
			}
		}
	}
}

// next returns the frames after `after`: from the channel's kept tail when it holds
// them up to `known` (the sequence the poller saw), else from one Redis read that the
// channel's other subscribers then share. Nothing is read when the poller knows of no
// event past `after`: its next move wakes the subscriber.
func (c *Channels) next(ctx context.Context, ref store.ChannelRef, after, known int64) (frames []liveFrame, more, expired bool, err error) {
	if known >= 0 && after >= known {
		return nil, false, false, nil
	}
	if frames, ok := c.hub.cached(ref, after, known); ok {
		return frames, false, false, nil
	}
	if fill := c.hub.filler(ref); fill != nil {
		fill.Lock()
		defer fill.Unlock()
		// Another subscriber may have read them while this one waited.
		if frames, ok := c.hub.cached(ref, after, known); ok {
			return frames, false, false, nil
		}
	}
	page, err := c.opts.Store.ReadChannel(ctx, ref.Account, ref.Channel, after, liveBatch)
	if err != nil || page.Expired {
		return nil, false, page.Expired, err
	}
	for _, e := range page.Events {
		frames = append(frames, liveFrame{seq: e.Sequence, data: c.frame(ref.Channel, e)})
	}
	c.hub.keep(ref, frames)
	return frames, page.More, false, nil
}

// frame is one SSE event, or its pointer when the data is larger than the limit.
func (c *Channels) frame(channel string, e store.ChannelEvent) []byte {
	data, err := json.Marshal(eventFrom(channel, e))
	if err != nil || len(data) > c.opts.BroadcastLimit {
		data, _ = json.Marshal(Pointer{Sequence: e.Sequence})
		return fmt.Appendf(nil, "id: %d\nevent: %s\ndata: %s\n\n", e.Sequence, PointerType, data)
	}
	// encoding/json escapes newlines inside strings, so data is one line.
	return fmt.Appendf(nil, "id: %d\nevent: %s\ndata: %s\n\n", e.Sequence, e.Type, data)
}

// ParseLastEventID reads a Last-Event-ID header: -1 when empty (start at the current
// sequence), else a sequence ≥ 0.
func ParseLastEventID(v string) (int64, error) {
	if v == "" {
		return -1, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, errors.New("Last-Event-ID must be a sequence number")
	}
	return n, nil
}
