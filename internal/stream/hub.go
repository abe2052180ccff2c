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
// connection is parked in a blocking read per subscriber.
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
}

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

// wakeChan returns the channel closed at ref's next move. A subscriber takes it before
// reading the stored events, so a move after that read always closes the one it holds:
// the poller's first look (last = -1) closes it too, so nothing slips in between.
func (h *hub) wakeChan(ref store.ChannelRef) <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	if w, ok := h.watched[ref]; ok {
		return w.wake
	}
	ch := make(chan struct{})
	close(ch) // not watched: read again
	return ch
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
