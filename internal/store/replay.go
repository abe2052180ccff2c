package store

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/mercamap/relay/internal/destination"
	"github.com/redis/go-redis/v9"
)

// ReplayPoint is where a replay starts: after every event stored before From, or after
// the event AfterEvent (a ce-id). Exactly one is set.
type ReplayPoint struct {
	From       time.Time
	AfterEvent string
}

// Replay asks for a destination's events from a point of its account's log again.
type Replay struct {
	Ref
	Point ReplayPoint
	// Oldest is the oldest point still replayable (the log's retention); an older one
	// is ErrTooOld.
	Oldest            time.Time
	ChannelRetention  time.Duration
	AttemptsRetention time.Duration
}

// Replayed is what a replay did.
type Replayed struct {
	Cursor   string // the log id delivery restarts (or, replacing a replay in flight, goes on) after ("0-0": the start of the log)
	Pending  bool   // the destination is not active: the replay starts when it is activated
	Sequence int64  // the destination channel's sequence after destination.replayed
}

// ErrTooOld is returned for a replay point older than the log keeps.
type ErrTooOld struct{ Oldest time.Time }

func (e ErrTooOld) Error() string {
	return "the replay point is older than the log keeps; the oldest still replayable is " +
		e.Oldest.UTC().Format(time.RFC3339)
}

// ErrNoSuchEvent is returned for a replay after an event the account's log does not
// hold (never received, or older than the log keeps).
var ErrNoSuchEvent = errors.New("the account's log holds no event with that id")

var replayScript = redis.NewScript(luaPrelude + `
local now_ms, cutoff, iso, point, dest_id = tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4], ARGV[5], ARGV[6]
local from_ms, after_id = ARGV[7], ARGV[8]
local status = redis.call('HGET', KEYS[1], 'status')
if not status then return redis.error_reply('UNKNOWN destination has no stored state') end
local target
-- KEYS[8], the ordinal index, holds every log entry since it began, each a few bytes:
-- the log (whole entries) is read only for a point older than the index.
if from_ms ~= '' then
  -- After the last entry stored before from_ms, or the start of the log.
  local before = '(' .. from_ms .. '-0'
  local prev = redis.call('XREVRANGE', KEYS[8], before, '-', 'COUNT', 1)[1] or
    redis.call('XREVRANGE', KEYS[6], before, '-', 'COUNT', 1)[1]
  target = '0-0'
  if prev then target = prev[1] end
elseif #redis.call('XRANGE', KEYS[8], after_id, after_id) == 0 and
    #redis.call('XRANGE', KEYS[6], after_id, after_id) == 0 then
  return redis.error_reply('NOSUCH the entry was trimmed')
else
  target = after_id
end
local pending, replaced, cursor = 0, '', target
if status == 'active' then
  local moved
  cursor, replaced, moved = replay_to(target, KEYS[6], false)
  -- A write begun or committed under the old epoch moves the cursor no more; a replay
  -- that only replaces the running one leaves the writes under way alone.
  if moved then redis.call('HINCRBY', KEYS[1], 'epoch', 1) end
  redis.call('HDEL', KEYS[1], 'replay_from')
else
  -- The point waits for the activation; a newer one replaces it.
  replaced = redis.call('HGET', KEYS[1], 'replay_from') or ''
  redis.call('HSET', KEYS[1], 'replay_from', target)
  pending = 1
end
local message = 'replay ' .. point .. ' asked for'
if pending == 1 then message = message .. '; it starts when the destination is activated' end
if replaced ~= '' then
  message = message .. '; it replaces the replay after ' .. replaced .. ' not yet done'
  if pending == 0 then message = message .. ': delivery goes on after ' .. cursor end
end
local n = redis.call('HINCRBY', KEYS[1], 'attempts', 1)
add_attempt(KEYS[7], n, now_ms, '', 'replayed', message)
local seq = emit_both('destination.replayed', now_ms, cutoff,
  {destination = dest_id, point = point, cursor = cursor, pending = pending == 1, message = message,
   replaces = replaced ~= '' and replaced or nil})
if pending == 0 then control(KEYS[9], dest_id, 'replay', '') end
return {cursor, pending, seq}
`)

// Replay moves a destination's cursor back to a point of its account's log, in one
// Redis step fenced like a status change: everything after it is delivered again, in
// log order, before newer events (a write begun before the replay may still land; no
// write under the old cursor starts after it). On a destination not active the point is
// kept and the activation starts from it. One replay is in flight per destination: one
// asked while another has not reached the log's end of when it began replaces it
// (replay_to in luaPrelude), so asking again and again resends the log once, not once
// per ask. The replay is a destination.replayed event on the destination's channels
// and a line ("replayed") in its attempt log, which name the replay it replaced.
func (s *Store) Replay(ctx context.Context, r Replay) (Replayed, error) {
	p := r.Point
	var fromMS, afterID, point string
	switch {
	case p.AfterEvent != "":
		id, err := s.findEvent(ctx, r.Account, p.AfterEvent)
		if err != nil {
			return Replayed{}, err
		}
		if EntryTime(id).Before(r.Oldest) {
			return Replayed{}, ErrTooOld{Oldest: r.Oldest}
		}
		afterID, point = id, "after event "+p.AfterEvent
	case p.From.Before(r.Oldest):
		return Replayed{}, ErrTooOld{Oldest: r.Oldest}
	default:
		fromMS, point = strconv.FormatInt(p.From.UnixMilli(), 10), "from "+p.From.UTC().Format(time.RFC3339Nano)
	}
	now := time.Now()
	keys := append(r.chanKeys(), logKey(r.Account), attemptsKey(r.Account, r.ID), ordKey(r.Account), ctlKey(r.Account))
	res, err := replayScript.Run(ctx, s.rdb, keys, "" /* unused */, now.UnixMilli(), now.Add(-r.ChannelRetention).UnixMilli(),
		now.UTC().Format(time.RFC3339Nano), point, r.ID, fromMS, afterID, s.boundsArg()).Slice()
	switch {
	case redis.HasErrorPrefix(err, "UNKNOWN"):
		return Replayed{}, destination.ErrNotFound
	case redis.HasErrorPrefix(err, "NOSUCH"):
		return Replayed{}, ErrNoSuchEvent
	case err != nil:
		return Replayed{}, err
	}
	cursor, _ := res[0].(string)
	pending, _ := res[1].(int64)
	seq, _ := res[2].(int64)
	return Replayed{Cursor: cursor, Pending: pending == 1, Sequence: seq}, nil
}

// legacyLookback bounds how many log entries a lookup of an event reads when its
// marker predates the ordinal index (value "1": stored by an earlier version, which
// kept no log id). Such markers expire with the dedup window after an upgrade.
const legacyLookback = 1000

// findEvent is the log id of the newest entry of acct's log with that ce-id.
func (s *Store) findEvent(ctx context.Context, acct, ceID string) (string, error) {
	return s.findEventFrom(ctx, acct, ceID, "+")
}

// findEventFrom is findEvent for an entry at or before the log id end ("+": any). The
// account's dedup marker for the ce-id holds its log id (see gateSource), so the lookup
// is one small script: no marker, no such event. A marker from before the index ("1")
// falls back to reading back from end at most legacyLookback entries; so does one whose
// id is past end (the ce-id came again after its marker expired: the entry wanted is
// older).
func (s *Store) findEventFrom(ctx context.Context, acct, ceID, end string) (string, error) {
	v, err := s.marker(ctx, acct, ceID)
	switch {
	case err != nil:
		return "", err
	case v == "":
		return "", ErrNoSuchEvent
	case isLogID(v) && (end == "+" || CompareIDs(v, end) <= 0):
		return v, nil
	}
	msgs, err := s.rdb.XRevRangeN(ctx, logKey(acct), end, "-", legacyLookback).Result()
	if err != nil {
		return "", err
	}
	es, err := logEntries(msgs)
	if err != nil {
		return "", err
	}
	for _, e := range es {
		if e.EventID == ceID {
			return e.ID, nil
		}
	}
	return "", ErrNoSuchEvent
}

// isLogID reports whether a marker's value is a stream id ("<ms>-<seq>").
func isLogID(v string) bool {
	ms, seq, ok := strings.Cut(v, "-")
	return ok && ms != "" && seq != "" && strings.Trim(ms, "0123456789") == "" && strings.Trim(seq, "0123456789") == ""
}
