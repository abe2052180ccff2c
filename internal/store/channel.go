package store

import (
	"context"
	"encoding/json"
	"errors"
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
// A cursor older than retention comes back Expired.
func (s *Store) ReadChannel(ctx context.Context, acct, channel string, after int64, limit int64) (ChannelPage, error) {
	key := chanKey(acct, channel)
	pipe := s.rdb.Pipeline()
	first := pipe.XRangeN(ctx, key, "-", "+", 1)
	page := pipe.XRangeN(ctx, key, "("+strconv.FormatInt(after, 10)+"-0", "+", limit+1)
	last := pipe.Get(ctx, chanSeqKey(acct, channel))
	_, _ = pipe.Exec(ctx) // a missing counter is redis.Nil; real errors show on the commands below
	if err := page.Err(); err != nil {
		return ChannelPage{}, err
	}
	var out ChannelPage
	out.Last, _ = strconv.ParseInt(last.Val(), 10, 64)
	// after=0 replays from the first retained event; any other cursor must not point
	// before what retention kept.
	oldest := out.Last + 1 // everything up to Last was trimmed away
	if f := first.Val(); len(f) > 0 {
		oldest = seqOf(f[0].ID)
	}
	if after > 0 && after < oldest-1 {
		out.Expired = true
		return out, nil
	}
	msgs := page.Val()
	if int64(len(msgs)) > limit {
		msgs, out.More = msgs[:limit], true
	}
	dest, _ := strings.CutPrefix(channel, "destination:")
	for _, m := range msgs {
		out.Events = append(out.Events, channelEvent(dest, m))
	}
	if err := s.followPointers(ctx, acct, msgs, out.Events); err != nil {
		return ChannelPage{}, err
	}
	return out, nil
}

// followPointers fills in the events of an account channel's page that are pointers
// (emit_both: the destination's id "d" and the event's sequence "s" in its channel)
// with the data of the events they point at, read in one round trip. A pointer whose
// event its channel no longer holds (trimmed a moment before the account's channel
// was, or the channel gone) is served as resync.required: the follower loads a new
// snapshot, which holds what the event said.
func (s *Store) followPointers(ctx context.Context, acct string, msgs []redis.XMessage, evs []ChannelEvent) error {
	pipe := s.rdb.Pipeline()
	reads := map[int]*redis.XMessageSliceCmd{}
	for i, m := range msgs {
		d, ok := m.Values["d"].(string)
		if !ok {
			continue
		}
		id := str(m.Values["s"]) + "-0"
		reads[i] = pipe.XRange(ctx, chanKey(acct, DestinationChannel(d)), id, id)
	}
	if len(reads) == 0 {
		return nil
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return err
	}
	for i, r := range reads {
		if got := r.Val(); len(got) == 1 && str(got[0].Values["type"]) == evs[i].Type {
			evs[i].Data = channelEvent(str(msgs[i].Values["d"]), got[0]).Data
			continue
		}
		d, _ := json.Marshal(map[string]string{"destination": str(msgs[i].Values["d"]),
			"reason": "the destination's event is no longer kept: load a new snapshot"})
		evs[i].Type, evs[i].Data = "resync.required", d
	}
	return nil
}

// channelEvent is a stored channel event as a reader gets it: its data as stored, or,
// for a delivery's outcome kept in its short form (emit_outcome), built by outcomeData
// for destination dest.
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

// outcomeClass is the class a delivery outcome's event names, by its type.
var outcomeClass = map[string]string{"delivery.succeeded": KindDelivered, "delivery.rejected": KindRejected,
	"delivery.not_taken": KindNotTaken, "message.expired": KindExpired}

// outcomeData is the data of a delivery's outcome from its short form: the event's
// fields, and the card fields the outcome changed, as the card holds them (the last
// delivery or failure at the event's time, the count of failures in a row and the
// failing warning when they moved).
func outcomeData(dest, typ string, at time.Time, v map[string]any) json.RawMessage {
	type lastDelivery struct {
		At      string `json:"at"`
		EventID string `json:"event_id"`
	}
	type lastFailure struct {
		At      string `json:"at"`
		EventID string `json:"event_id"`
		Class   string `json:"class"`
		Message string `json:"message"`
	}
	class, iso, id := outcomeClass[typ], at.Format(time.RFC3339Nano), longEventID(str(v["e"]))
	var sentence string
	if x, ok := v["x"]; ok {
		sentence = longMessage(class, str(x))
	}
	state := map[string]any{}
	switch class {
	case KindDelivered:
		state["last_delivery"] = lastDelivery{iso, id}
	case KindRejected, KindNotTaken:
		state["last_failure"] = lastFailure{iso, id, class, sentence}
	}
	if f, ok := v["f"].(string); ok {
		state["consecutive_failures"], _ = strconv.Atoi(f)
	}
	if g, ok := v["g"].(string); ok {
		if g == "" {
			state["failing"] = nil
		} else {
			state["failing"] = json.RawMessage(g)
		}
	}
	data := map[string]any{"destination": dest, "event_id": id, "class": class, "state": state}
	if m := str(v["m"]); m != "" {
		data["message_id"] = m
	}
	if sentence != "" {
		data["message"] = sentence
	}
	if v["t"] == "1" {
		data["test"] = true
	}
	b, _ := json.Marshal(data) // strings, numbers and stored JSON: always marshals
	return b
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

// Attempt is one entry of a destination's attempt log.
type Attempt struct {
	N       int64     `json:"n"`
	At      time.Time `json:"at"`
	EventID string    `json:"event_id"`
	Outcome string    `json:"outcome"`
	Message string    `json:"message"`
	// RetryOf is the attempt a retry wrote again (on its "retry_queued" line and on its
	// outcome's), Retry the request's line on the outcome's; 0 otherwise.
	RetryOf int64 `json:"retry_of,omitempty"`
	Retry   int64 `json:"retry,omitempty"`
}

// Attempts returns up to limit attempts numbered below before (0: the newest), newest first.
func (s *Store) Attempts(ctx context.Context, r Ref, before, limit int64) ([]Attempt, error) {
	end := "+"
	if before > 0 {
		end = "(" + strconv.FormatInt(before, 10) + "-0"
	}
	msgs, err := s.rdb.XRevRangeN(ctx, attemptsKey(r.Account, r.ID), end, "-", limit).Result()
	if err != nil {
		return nil, err
	}
	out := make([]Attempt, len(msgs))
	for i, m := range msgs {
		out[i] = attemptOf(m)
	}
	return out, nil
}
