package stream

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/mercamap/relay/internal/store"
)

// hub wakes live subscriptions when their channel's sequence moves. One poller per
// process reads every watched channel's counter in one pipelined round trip, so the
// cost is one small read per Poll however many subscribers there are, and no Redis
// connection is parked in a blocking read per subscriber. It also keeps each watched
// channel's latest events encoded, so an event is read from Redis and
// encoded once for all of its subscribers.
type hub struct {
	store *store.Store
	poll  time.Duration
	log   *slog.Logger

	mu      sync.Mutex
	watched map[store.ChannelRef]*watched
	running bool
}

type watched struct {
	refs int
	last int64         // the sequence the poller saw last; -1 before its first look
	wake chan struct{} // closed (and replaced) when the sequence moves
	tail []liveFrame   // the latest frames read, consecutive sequences; never changed in place
	fill sync.Mutex    // one Redis read of the channel at a time: the others wait and share it
}

// liveFrame is one event encoded for the live transport: its data line is encoded once
// for every subscriber, each of which adds the id and event lines.
type liveFrame struct {
	seq   int64
	event string // the event's type, or PointerType
	data  []byte // the event as replay shows it, or its Pointer: one line of JSON
}

// tailFrames is how many encoded frames a channel keeps for its subscribers.
const tailFrames = 2 * liveBatch

func newHub(st *store.Store, poll time.Duration, log *slog.Logger) *hub {
	return &hub{store: st, poll: poll, log: log, watched: map[store.ChannelRef]*watched{}}
}

// join starts watching ref for one more subscriber.
func (h *hub) join(ref store.ChannelRef) {
	h.mu.Lock()
	defer h.mu.Unlock()
	w, ok := h.watched[ref]
	if !ok {
		w = &watched{last: -1, wake: make(chan struct{})}
		h.watched[ref] = w
	}
	w.refs++
	if !h.running {
		h.running = true
		go h.run()
	}
}

// leave stops watching ref for one subscriber.
func (h *hub) leave(ref store.ChannelRef) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if w, ok := h.watched[ref]; ok {
		if w.refs--; w.refs <= 0 {
			delete(h.watched, ref)
		}
	}
}

// wakeChan returns the channel closed at ref's next move, and the sequence the poller
// saw last (-1 before its first look, or when ref is not watched). A subscriber takes
// it before reading the stored events, so a move after that read always closes the one
// it holds: the poller's first look closes it too, so nothing slips in between.
func (h *hub) wakeChan(ref store.ChannelRef) (<-chan struct{}, int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if w, ok := h.watched[ref]; ok {
		return w.wake, w.last
	}
	ch := make(chan struct{})
	close(ch) // not watched: read again
	return ch, -1
}

// cached returns the frames after `after` when the kept tail holds every one of them up
// to `upTo`.
func (h *hub) cached(ref store.ChannelRef, after, upTo int64) ([]liveFrame, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	w, ok := h.watched[ref]
	if !ok || len(w.tail) == 0 || upTo < 0 {
		return nil, false
	}
	first, last := w.tail[0].seq, w.tail[len(w.tail)-1].seq
	if first > after+1 || last < upTo {
		return nil, false
	}
	return w.tail[after+1-first:], true
}

// filler is the lock one Redis read of ref takes; nil when ref is not watched.
func (h *hub) filler(ref store.ChannelRef) *sync.Mutex {
	h.mu.Lock()
	defer h.mu.Unlock()
	if w, ok := h.watched[ref]; ok {
		return &w.fill
	}
	return nil
}

// keep adds frames just read (consecutive sequences) to ref's tail. Frames older than
// the tail (a subscriber catching up) are not kept: they would push out the news.
func (h *hub) keep(ref store.ChannelRef, frames []liveFrame) {
	if len(frames) == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	w, ok := h.watched[ref]
	if !ok {
		return
	}
	from, to := frames[0].seq, frames[len(frames)-1].seq
	var next []liveFrame
	switch {
	case len(w.tail) > 0 && from >= w.tail[0].seq && from <= w.tail[len(w.tail)-1].seq+1:
		// It continues the tail (or overlaps its end): keep what comes before it.
		next = append(next, w.tail[:from-w.tail[0].seq]...)
		next = append(next, frames...)
		for _, f := range w.tail {
			if f.seq > to {
				next = append(next, f)
			}
		}
	case len(w.tail) == 0 || to >= w.tail[len(w.tail)-1].seq:
		next = append(next, frames...) // newer than the tail, with a gap: start again
	default:
		return
	}
	if n := len(next); n > tailFrames {
		next = next[n-tailFrames:]
	}
	w.tail = next
}

// run polls until nothing is watched.
func (h *hub) run() {
	for {
		h.mu.Lock()
		if len(h.watched) == 0 {
			h.running = false
			h.mu.Unlock()
			return
		}
		refs := make([]store.ChannelRef, 0, len(h.watched))
		for ref := range h.watched {
			refs = append(refs, ref)
		}
		h.mu.Unlock()

		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		seqs, err := h.store.ChannelSequences(ctx, refs)
		cancel()
		if err != nil {
			h.log.Warn("live transport cannot read channel sequences", "error", err)
		} else {
			h.mu.Lock()
			for i, ref := range refs {
				if w, ok := h.watched[ref]; ok && w.last != seqs[i] {
					w.last = seqs[i]
					close(w.wake)
					w.wake = make(chan struct{})
				}
			}
			h.mu.Unlock()
		}
		time.Sleep(h.poll)
	}
}
