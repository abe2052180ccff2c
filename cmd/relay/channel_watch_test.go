package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// documentedEventTypes are the channel event types docs/api.md lists (the contract's
// and the relay's additions).
var documentedEventTypes = map[string]bool{
	"delivery.succeeded": true, "delivery.not_taken": true, "delivery.rejected": true,
	"message.expired": true, "destination.paused": true, "destination.activated": true,
	"destination.disabled": true, "destination.checked": true, "resync.required": true,
	"destination.replayed": true, "delivery.retried": true,
}

// channelWatch reads every channel of a roll from every live replica, over and over,
// until stopped: each destination's channel and each account's, by replay (the events
// route) and now and then by snapshot and the replay from its cursor. It keeps what
// each sequence number held when first read and records a problem when a read is not
// gap-free, starts elsewhere than after the cursor it was asked for, disagrees with an
// earlier read (from any replica), or holds a type the API reference does not list.
type channelWatch struct {
	r          *roll
	channels   []*watchedChannel
	halt, done chan struct{}

	mu            sync.Mutex
	problems      []string
	readsBy       map[string]int // replica → channel reads it answered
	reads, events int            // reads answered, events checked
	expired       int            // reads answered 410 CURSOR_EXPIRED (a new snapshot then)
}

// watchedChannel is one channel and what the watch has read of it.
type watchedChannel struct {
	name    string
	account string    // an account channel's account
	dest    *rollDest // a destination channel's destination
	cursor  int64     // the last sequence read
	seen    map[int64]seenEvent
}

// seenEvent is what a sequence number held when first read, and from which replica.
type seenEvent struct {
	id, typ, time, by string
}

// channelEvent is an event of the events route, as the contract shapes it.
type channelEvent struct {
	ID       string          `json:"id"`
	Sequence int64           `json:"sequence"`
	Type     string          `json:"type"`
	Time     string          `json:"time"`
	Data     json.RawMessage `json:"data"`
}

// watchChannels starts the watch; finish stops it and reads its problems.
func (r *roll) watchChannels() *channelWatch {
	w := &channelWatch{r: r, halt: make(chan struct{}), done: make(chan struct{}), readsBy: map[string]int{}}
	for _, acct := range []string{"acct_1", "acct_2"} {
		w.channels = append(w.channels, &watchedChannel{name: "account:" + acct, account: acct, seen: map[int64]seenEvent{}})
	}
	for _, d := range r.dests {
		w.channels = append(w.channels, &watchedChannel{name: "destination:" + d.id, dest: d, seen: map[int64]seenEvent{}})
	}
	go w.run()
	r.t.Cleanup(func() { w.stop() })
	return w
}

func (w *channelWatch) run() {
	defer close(w.done)
	for round := 0; ; round++ {
		for _, p := range w.r.live() {
			for _, c := range w.channels {
				if round%5 == 0 {
					w.snapshot(p, c)
				} else {
					w.replay(p, c, max(0, c.cursor-3)) // a few known events again: they must not have changed
				}
			}
		}
		select {
		case <-w.halt:
			return
		case <-time.After(100 * time.Millisecond): // the next round's pace, not a wait for a condition
		}
	}
}

// stop ends the watch and returns how many reads each replica answered.
func (w *channelWatch) stop() map[string]int {
	select {
	case <-w.halt:
	default:
		close(w.halt)
	}
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.readsBy
}

func (w *channelWatch) errors() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.problems
}

func (w *channelWatch) problem(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.problems) < 50 {
		w.problems = append(w.problems, fmt.Sprintf(format, args...))
	}
}

// get reads path on p; ok is false (and a problem recorded) unless p answered 200, but
// a replica sent SIGTERM may have gone, and 410 is for the caller.
func (w *channelWatch) get(p *replica, path string) (httpAnswer, bool) {
	a := doRequest(mustRequest(http.MethodGet, p.api+path), rollAdminToken)
	switch {
	case a.status == http.StatusOK:
		w.mu.Lock()
		w.readsBy[p.name]++
		w.reads++
		w.mu.Unlock()
		return a, true
	case a.status == http.StatusGone:
	case p.terminated.Load():
	default:
		w.problem("%s %s GET %s: %d %s", time.Now().Format("15:04:05.000"), p.name, path, a.status, truncate(a.body))
	}
	return a, false
}

func mustRequest(method, url string) *http.Request {
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		panic(err)
	}
	return req
}

// replay reads c's events after the cursor after from p and checks them; on 410 it
// starts over from a snapshot.
func (w *channelWatch) replay(p *replica, c *watchedChannel, after int64) {
	path := fmt.Sprintf("/v1/streams/%s/events?after=%d&limit=1000", c.name, after)
	a, ok := w.get(p, path)
	if a.status == http.StatusGone {
		w.mu.Lock()
		w.expired++
		w.mu.Unlock()
		w.snapshot(p, c)
		return
	}
	if !ok {
		return
	}
	var page struct {
		Events []channelEvent `json:"events"`
		Cursor string         `json:"cursor"`
		More   bool           `json:"more"`
	}
	if err := json.Unmarshal([]byte(a.body), &page); err != nil {
		w.problem("%s GET %s: %v in %s", p.name, path, err, truncate(a.body))
		return
	}
	last := after
	for i, e := range page.Events {
		if !documentedEventTypes[e.Type] {
			w.problem("%s %s: event %d is of type %q, which docs/api.md does not list", p.name, c.name, e.Sequence, e.Type)
		}
		switch {
		case i == 0 && after > 0 && e.Sequence != after+1:
			w.problem("%s %s: the events after %d start at %d", p.name, c.name, after, e.Sequence)
		case i > 0 && e.Sequence != last+1:
			w.problem("%s %s: a gap in one read, %d then %d", p.name, c.name, last, e.Sequence)
		}
		last = e.Sequence
		got := seenEvent{id: e.ID, typ: e.Type, time: e.Time, by: p.name}
		if before, ok := c.seen[e.Sequence]; !ok {
			c.seen[e.Sequence] = got
		} else if before.id != got.id || before.typ != got.typ || before.time != got.time {
			w.problem("%s %s: event %d is %+v, and was %+v", p.name, c.name, e.Sequence, got, before)
		}
	}
	if page.Cursor != strconv.FormatInt(last, 10) {
		w.problem("%s %s: the events after %d end at %d with cursor %q", p.name, c.name, after, last, page.Cursor)
	}
	if !page.More && last < c.cursor {
		w.problem("%s %s: the events after %d end at %d, with nothing more, and %d was read before", p.name, c.name, after, last, c.cursor)
	}
	c.cursor = max(c.cursor, last)
	w.mu.Lock()
	w.events += len(page.Events)
	w.mu.Unlock()
}

// snapshot reads c's snapshot from p, checks its shape, and replays from its cursor
// on the same replica: the events that follow it must start right after its sequence.
func (w *channelWatch) snapshot(p *replica, c *watchedChannel) {
	path := "/v1/streams/" + c.name + "/snapshot"
	a, ok := w.get(p, path)
	if !ok {
		return
	}
	var snap struct {
		Channel  string `json:"channel"`
		Sequence int64  `json:"sequence"`
		Cursor   string `json:"cursor"`
		Data     struct {
			Destination *struct {
				ID     string `json:"id"`
				Status string `json:"status"`
			} `json:"destination"`
			Account *struct {
				ID string `json:"id"`
			} `json:"account"`
			Destinations []struct {
				ID string `json:"id"`
			} `json:"destinations"`
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(a.body), &snap); err != nil {
		w.problem("%s GET %s: %v in %s", p.name, path, err, truncate(a.body))
		return
	}
	if snap.Channel != c.name || snap.Cursor != strconv.FormatInt(snap.Sequence, 10) {
		w.problem("%s GET %s: channel %q, sequence %d, cursor %q", p.name, path, snap.Channel, snap.Sequence, snap.Cursor)
	}
	switch {
	case c.dest != nil && (snap.Data.Destination == nil || snap.Data.Destination.ID != c.dest.id || snap.Data.Destination.Status != "active"):
		w.problem("%s GET %s: want %s's card, active: %s", p.name, path, c.dest.id, truncate(a.body))
	case c.dest == nil:
		want := 0
		for _, d := range w.r.dests {
			if d.account == c.account {
				want++
			}
		}
		if snap.Data.Account == nil || snap.Data.Account.ID != c.account || len(snap.Data.Destinations) != want {
			w.problem("%s GET %s: want %s and its %d destinations: %s", p.name, path, c.account, want, truncate(a.body))
		}
	}
	w.replay(p, c, snap.Sequence)
}
