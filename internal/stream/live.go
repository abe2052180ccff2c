package stream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
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
	return c.subscribe(ctx, w, []Start{{Channel: ch, After: after}}, false)
}

// Start is one channel of a multiplexed subscription and where it starts: after the
// sequence After, or after the channel's current sequence when After < 0.
type Start struct {
	Channel Channel
	After   int64
}

// SubscribeMany streams several channels on one text/event-stream, each as Subscribe
// streams it but with the channel named: `id: <channel> <sequence>` (events and
// pointers alike) and `: keep-alive <channel> <sequence>`. One connection then carries
// a whole page of channels: a browser opens at most six HTTP/1.1 connections per host.
// Each channel's starting point is fixed before the headers are sent, as in Subscribe.
func (c *Channels) SubscribeMany(ctx context.Context, w http.ResponseWriter, starts []Start) error {
	return c.subscribe(ctx, w, starts, true)
}

func (c *Channels) subscribe(ctx context.Context, w http.ResponseWriter, starts []Start, named bool) error {
	var current []store.ChannelRef
	for _, s := range starts {
		if s.After < 0 {
			current = append(current, store.ChannelRef{Account: s.Channel.Account, Channel: s.Channel.Name})
		}
	}
	if len(current) > 0 {
		seqs, err := c.opts.Store.ChannelSequences(ctx, current) // one round trip for all
		if err != nil {
			return err
		}
		starts = slices.Clone(starts)
		for i, j := 0, 0; i < len(starts); i++ {
			if starts[i].After < 0 {
				starts[i].After, j = seqs[j], j+1
			}
		}
	}
	for _, s := range starts {
		ref := store.ChannelRef{Account: s.Channel.Account, Channel: s.Channel.Name}
		c.hub.join(ref)
		defer c.hub.leave(ref)
	}

	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // proxies must not hold events back
	w.WriteHeader(http.StatusOK)
	out := &liveWriter{w: w, rc: http.NewResponseController(w)}
	var hello []byte
	for _, s := range starts {
		hello = fmt.Appendf(hello, ": subscribed %safter %d\n\n", prefix(s.Channel.Name, named), s.After)
	}
	if err := out.send(hello); err != nil {
		return nil // the client went
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for _, s := range starts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer cancel() // it ends only when the client went or ctx ended: end the others
			c.follow(ctx, out, s.Channel, s.After, named)
		}()
	}
	wg.Wait()
	return nil
}

// prefix is what names a channel in a multiplexed stream's ids and comments.
func prefix(channel string, named bool) string {
	if !named {
		return ""
	}
	return channel + " "
}

// liveWriter is one subscriber's response, shared by the channels it carries.
type liveWriter struct {
	mu sync.Mutex
	w  io.Writer
	rc *http.ResponseController
}

// send writes b and flushes it, as one piece: frames of two channels never interleave.
func (l *liveWriter) send(b []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	_ = l.rc.SetWriteDeadline(time.Now().Add(writeTimeout)) // unsupported writers: no deadline
	if _, err := l.w.Write(b); err != nil {
		return err
	}
	return l.rc.Flush()
}

// follow sends ch's events after `after` to out until ctx ends or the client goes.
func (c *Channels) follow(ctx context.Context, out *liveWriter, ch Channel, after int64, named bool) {
	ref := store.ChannelRef{Account: ch.Account, Channel: ch.Name}
	name := prefix(ch.Name, named)
	keepAlive := time.NewTicker(c.opts.KeepAlive)
	defer keepAlive.Stop()
	for {
		wake, known := c.hub.wakeChan(ref)
		frames, more, expired, err := c.next(ctx, ref, after, known)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			c.opts.Logger.Warn("live transport cannot read a channel", "channel", ch.Name, "error", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(c.opts.Poll):
			}
			continue
		}
		if expired {
			// The client's resume point is older than retention: send what is kept. The
			// gap it sees makes it replay, get 410 and load a new snapshot.
			after = 0
			continue
		}
		var b []byte
		for _, f := range frames {
			after = f.seq
			if c.opts.Drop != nil && c.opts.Drop(ch.Name, f.seq) {
				continue
			}
			b = fmt.Appendf(b, "id: %s%d\nevent: %s\ndata: %s\n\n", name, f.seq, f.event, f.data)
		}
		if len(b) > 0 {
			if err := out.send(b); err != nil {
				return
			}
		}
		if more {
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-wake:
		case <-keepAlive.C:
			// The comment names the last sequence this stream passed: a client that lost
			// the channel's latest event on the way sees it is behind without waiting for
			// the next one.
			if err := out.send(fmt.Appendf(nil, ": keep-alive %s%d\n\n", name, after)); err != nil {
				return
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
		frames = append(frames, c.frame(ref.Channel, e))
	}
	c.hub.keep(ref, frames)
	return frames, page.More, false, nil
}

// frame is one event for the live transport, or its pointer when the data is larger
// than the limit.
func (c *Channels) frame(channel string, e store.ChannelEvent) liveFrame {
	data, err := json.Marshal(eventFrom(channel, e))
	if err != nil || len(data) > c.opts.BroadcastLimit {
		data, _ = json.Marshal(Pointer{Sequence: e.Sequence})
		return liveFrame{seq: e.Sequence, event: PointerType, data: data}
	}
	// encoding/json escapes newlines inside strings, so data is one line.
	return liveFrame{seq: e.Sequence, event: e.Type, data: data}
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
