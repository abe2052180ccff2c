package store

import (
	"context"
	"encoding/json"
	"errors"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// ChannelEvent is one stored channel event.
type ChannelEvent struct {
	Sequence int64
	Type     string
	Time     time.Time
	Data     json.RawMessage
}

// ChannelPage is one replay page.
type ChannelPage struct {
	Events  []ChannelEvent
	More    bool  // events after the page exist
	Expired bool  // after is older than the oldest retained event: load a snapshot
	Last    int64 // the channel's current sequence
}

// ReadChannel returns up to limit events of an account's channel with sequence > after.
// A cursor older than retention comes back Expired. A channel keeps its events four
// ways (emit, emit_outcome and flush_account in lua.go): whole (data); as a pointer to
// a destination's event (an account channel's d and s); as a run, one entry standing
// for a stretch of outcomes (a destination's: its attempt lines; an account's: one
// destination's events); and as a pack of an account's pointers. ReadChannel serves
// each the same way: as the event it stands for.
func (s *Store) ReadChannel(ctx context.Context, acct, channel string, after int64, limit int64) (ChannelPage, error) {
	key := chanKey(acct, channel)
	var out ChannelPage
	start := max(after, 0) + 1
	held, err := s.channelEntries(ctx, key, chanSeqKey(acct, channel), start, limit)
	if err != nil {
		return ChannelPage{}, err
	}
	out.Last = held.last
	// The oldest event kept: the first entry's, and no further back than the count bound
	// (a run may hold events from before it, whose lines are gone).
	oldest := held.last + 1 // everything up to Last was trimmed away
	if held.first > 0 {
		oldest = max(held.first, held.last-int64(s.bounds.ChannelEvents)+1)
	}
	// after=0 replays from the first retained event; any other cursor must not point
	// before what retention kept.
	if after > 0 && after < oldest-1 {
		out.Expired = true
		return out, nil
	}
	if start < oldest {
		start = oldest
		if held, err = s.channelEntries(ctx, key, chanSeqKey(acct, channel), start, limit); err != nil {
			return ChannelPage{}, err
		}
		out.Last = held.last
	}
	end := min(held.last, start+limit-1)
	out.More = end < held.last
	dest, isDest := strings.CutPrefix(channel, "destination:")
	if !isDest {
		dest = ""
	}
	var r resolver
	for seq := start; seq <= end; seq++ {
		m, off, ok := held.holder(seq)
		if !ok {
			r.gone(len(out.Events), dest)
			out.Events = append(out.Events, ChannelEvent{Sequence: seq})
			continue
		}
		ev := channelEvent(dest, m)
		ev.Sequence = seq
		switch {
		case ev.Type == runType && dest != "": // a destination's run: attempt line a + off
			r.line(len(out.Events), dest, num(m.Values["a"])+off)
		case ev.Type == runType: // an account's run: destination d's event s + off
			r.event(len(out.Events), str(m.Values["d"]), num(m.Values["s"])+off)
		case ev.Type == packType: // an account's pack: its pointer off
			p := held.pack(m)[off]
			r.event(len(out.Events), p.dest, p.seq)
		case m.Values["d"] != nil: // a pointer
			r.event(len(out.Events), str(m.Values["d"]), num(m.Values["s"]))
		}
		out.Events = append(out.Events, ev)
	}
	if err := r.resolve(ctx, s, acct, out.Events); err != nil {
		return ChannelPage{}, err
	}
	return out, nil
}

// runType and packType are the types of a run's and a pack's entries (emit_outcome,
// flush_account in lua.go): never an event's own.
const (
	runType  = "r"
	packType = "p"
)

// packed is the pointers a pack holds, one account sequence each, in order.
func packed(m redis.XMessage) []eventRef {
	parts := strings.Split(str(m.Values["p"]), "\x00")
	out := make([]eventRef, 0, len(parts)/2)
	for i := 0; i+1 < len(parts); i += 2 {
		seq, _ := strconv.ParseInt(parts[i+1], 10, 64)
		out = append(out, eventRef{dest: parts[i], seq: seq})
	}
	return out
}

// heldEntries are the entries of a channel that hold its events from some sequence on:
// the one at or before it (a run may hold it) and those after, in order.
type heldEntries struct {
	entries     []redis.XMessage
	first, last int64                 // the first entry's sequence (0: none) and the channel's counter
	packs       map[string][]eventRef // the packs' pointers (packed), parsed once, by entry id
}

// pack is the pointers of pack m, parsed on first use.
func (h *heldEntries) pack(m redis.XMessage) []eventRef {
	p, ok := h.packs[m.ID]
	if !ok {
		if h.packs == nil {
			h.packs = map[string][]eventRef{}
		}
		p = packed(m)
		h.packs[m.ID] = p
	}
	return p
}

// channelEntries reads, in one round trip, the entries that hold up to limit events
// from sequence start on, the first entry's sequence and the channel's counter.
func (s *Store) channelEntries(ctx context.Context, key, seqKey string, start, limit int64) (heldEntries, error) {
	from := strconv.FormatInt(start, 10) + "-0"
	// The counter first: every entry up to it is there by the time the ranges are read
	// (a script appends the entry and counts it at once), and a run read later holds no
	// event past it that another entry, read too late to see, holds instead.
	pipe := s.rdb.Pipeline()
	last := pipe.Get(ctx, seqKey)
	first := pipe.XRangeN(ctx, key, "-", "+", 1)
	head := pipe.XRevRangeN(ctx, key, from, "-", 1)
	page := pipe.XRangeN(ctx, key, "("+from, "+", limit)
	_, _ = pipe.Exec(ctx) // a missing counter is redis.Nil; real errors show on the commands below
	for _, c := range []*redis.XMessageSliceCmd{first, head, page} {
		if err := c.Err(); err != nil {
			return heldEntries{}, err
		}
	}
	var h heldEntries
	h.last, _ = strconv.ParseInt(last.Val(), 10, 64)
	if f := first.Val(); len(f) > 0 {
		h.first = seqOf(f[0].ID)
	}
	h.entries = append(head.Val(), page.Val()...)
	return h, nil
}

// holder is the entry that holds event seq and how far into it the event lies: an
// entry holds its own sequence, a run every one up to the next entry's (or the
// channel's counter), a pack one for each pointer it holds. false: no entry holds it
// (trimmed, or the channel gone).
func (h *heldEntries) holder(seq int64) (redis.XMessage, int64, bool) {
	// the last entry at or before seq
	i := sort.Search(len(h.entries), func(i int) bool { return seqOf(h.entries[i].ID) > seq }) - 1
	if i < 0 {
		return redis.XMessage{}, 0, false
	}
	m := h.entries[i]
	at := seqOf(m.ID)
	until := at
	switch str(m.Values["type"]) {
	case runType:
		until = h.last
		if i+1 < len(h.entries) {
			until = seqOf(h.entries[i+1].ID) - 1
		}
	case packType:
		until = at + int64(len(h.pack(m))) - 1
	}
	if seq > until {
		return redis.XMessage{}, 0, false
	}
	return m, seq - at, true
}

// resolver gathers the events of a page that stand for others (a destination's event
// for an account's pointer or run, an attempt line for a destination's run) and fills
// them in with two round trips at most.
type resolver struct {
	lines  []lineRef  // events that are attempt lines
	events []eventRef // events that are a destination's events
	lost   []eventRef // events nothing holds
}

type lineRef struct {
	i    int // the page's event
	dest string
	n    int64
}

type eventRef struct {
	i    int
	dest string
	seq  int64
}

func (r *resolver) line(i int, dest string, n int64) { r.lines = append(r.lines, lineRef{i, dest, n}) }
func (r *resolver) event(i int, dest string, seq int64) {
	r.events = append(r.events, eventRef{i, dest, seq})
}
func (r *resolver) gone(i int, dest string) { r.lost = append(r.lost, eventRef{i: i, dest: dest}) }

// resolve fills in evs. An event whose source is no longer kept (trimmed a moment
// before the channel that points at it was, or the destination's channel gone) is
// served as resync.required: the follower loads a new snapshot, which holds what the
// event said. So is an account pointer at or below its destination's born (the account
// channel's sequence when the destination's channel started at 1, ensureScript): it is
// about an earlier, deleted destination of the id, whatever the new channel holds at
// that sequence.
func (r *resolver) resolve(ctx context.Context, s *Store, acct string, evs []ChannelEvent) error {
	for _, l := range r.lost {
		resync(&evs[l.i], l.dest)
	}
	if len(r.events) > 0 {
		// The destinations' entries that hold the events pointed at: each destination's
		// events on one page are a stretch of its sequences.
		type stretch struct{ from, to int64 }
		stretches := map[string]*stretch{}
		for _, e := range r.events {
			if st := stretches[e.dest]; st == nil {
				stretches[e.dest] = &stretch{e.seq, e.seq}
			} else {
				st.from, st.to = min(st.from, e.seq), max(st.to, e.seq)
			}
		}
		pipe := s.rdb.Pipeline()
		heads, pages := map[string]*redis.XMessageSliceCmd{}, map[string]*redis.XMessageSliceCmd{}
		borns := map[string]*redis.SliceCmd{}
		for d, st := range stretches {
			key, from := chanKey(acct, DestinationChannel(d)), strconv.FormatInt(st.from, 10)+"-0"
			heads[d] = pipe.XRevRangeN(ctx, key, from, "-", 1)
			pages[d] = pipe.XRangeN(ctx, key, "("+from, strconv.FormatInt(st.to, 10)+"-0", st.to-st.from+1)
			borns[d] = pipe.HMGet(ctx, destKey(acct, d), "born")
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return err
		}
		held, born := map[string]*heldEntries{}, map[string]int64{}
		for d, st := range stretches {
			held[d] = &heldEntries{entries: append(heads[d].Val(), pages[d].Val()...), last: st.to}
			if v := borns[d].Val(); len(v) == 1 {
				born[d], _ = strconv.ParseInt(str(v[0]), 10, 64)
			}
		}
		for _, e := range r.events {
			m, off, ok := held[e.dest].holder(e.seq)
			if !ok || evs[e.i].Sequence <= born[e.dest] {
				resync(&evs[e.i], e.dest)
				continue
			}
			ev := channelEvent(e.dest, m)
			ev.Sequence = evs[e.i].Sequence
			if ev.Type == runType {
				r.line(e.i, e.dest, num(m.Values["a"])+off)
			}
			evs[e.i] = ev
		}
	}
	if len(r.lines) == 0 {
		return nil
	}
	// The attempt lines, one read per stretch of consecutive lines of a destination.
	type read struct {
		dest string
		cmd  *redis.XMessageSliceCmd
	}
	pipe := s.rdb.Pipeline()
	var reads []read
	for i := 0; i < len(r.lines); {
		j := i + 1
		for j < len(r.lines) && r.lines[j].dest == r.lines[i].dest && r.lines[j].n == r.lines[j-1].n+1 {
			j++
		}
		from, to := strconv.FormatInt(r.lines[i].n, 10)+"-0", strconv.FormatInt(r.lines[j-1].n, 10)+"-0"
		reads = append(reads, read{r.lines[i].dest, pipe.XRange(ctx, attemptsKey(acct, r.lines[i].dest), from, to)})
		i = j
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return err
	}
	got := map[string]map[int64]redis.XMessage{}
	for _, rd := range reads {
		if got[rd.dest] == nil {
			got[rd.dest] = map[int64]redis.XMessage{}
		}
		for _, m := range rd.cmd.Val() {
			got[rd.dest][seqOf(m.ID)] = m
		}
	}
	for _, l := range r.lines {
		m, ok := got[l.dest][l.n]
		if !ok || outcomeType(attemptOf(m).Outcome) == "" { // gone, or a line of no event
			resync(&evs[l.i], l.dest)
			continue
		}
		evs[l.i] = outcomeEvent(evs[l.i].Sequence, l.dest, m)
	}
	return nil
}

// resync makes ev the resync.required that stands for an event no longer kept.
func resync(ev *ChannelEvent, dest string) {
	d, _ := json.Marshal(map[string]string{"destination": dest,
		"reason": "the destination's event is no longer kept: load a new snapshot"})
	ev.Type, ev.Data = "resync.required", d
	if ev.Time.IsZero() {
		ev.Time = time.Now().UTC().Truncate(time.Millisecond)
	}
}

// channelEvent is a stored channel event as a reader gets it: its data as stored, or,
// for a delivery's outcome kept in its short form (emit_outcome before runs), built by
// outcomeData for destination dest. A run or a pointer comes back with its type and
// time only (ReadChannel fills it in).
func channelEvent(dest string, m redis.XMessage) ChannelEvent {
	ms, _ := strconv.ParseInt(str(m.Values["at"]), 10, 64)
	ev := ChannelEvent{Sequence: seqOf(m.ID), Type: str(m.Values["type"]), Time: time.UnixMilli(ms).UTC()}
	if d, ok := m.Values["data"].(string); ok {
		ev.Data = json.RawMessage(d)
	} else if _, ok := m.Values["e"]; ok {
		ev.Data = outcomeData(dest, ev.Type, ev.Time, m.Values)
	}
	return ev
}

func num(v any) int64 {
	n, _ := strconv.ParseInt(str(v), 10, 64)
	return n
}

func seqOf(id string) int64 {
	n, _ := strconv.ParseInt(strings.SplitN(id, "-", 2)[0], 10, 64)
	return n
}

func str(v any) string { s, _ := v.(string); return s }

// ChannelSequence is a channel's current sequence (0 before its first event).
func (s *Store) ChannelSequence(ctx context.Context, acct, channel string) (int64, error) {
	n, err := s.rdb.Get(ctx, chanSeqKey(acct, channel)).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	return n, err
}
