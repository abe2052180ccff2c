package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Status of a destination.
const (
	Active   = "active"
	Paused   = "paused"
	Disabled = "disabled"
)

// Failure is the last failure a card shows.
type Failure struct {
	At      time.Time `json:"at"`
	EventID string    `json:"event_id"`
	Class   string    `json:"class"`
	Message string    `json:"message"`
}

// Delivery is the last delivery a card shows.
type Delivery struct {
	At      time.Time `json:"at"`
	EventID string    `json:"event_id"`
}

// DisabledInfo says when and why a destination was disabled.
type DisabledInfo struct {
	At     time.Time `json:"at"`
	Reason string    `json:"reason"`
}

// State is a destination's stored state.
type State struct {
	Status              string
	Cursor              string // log id of the last event that ended at this destination
	ConsecutiveFailures int
	LastFailure         *Failure
	LastDelivery        *Delivery
	Disabled            *DisabledInfo
	ExternalID          string
	Fingerprint         string
	Sequence            int64 // last sequence of the destination's channel
}

// Ref names one destination and its account (the key hash tag). Connector is carried
// into the operator event a disable writes; no key depends on it.
type Ref struct{ Account, ID, Connector string }

// chanKeys are KEYS[1..5] of every script that emits: the destination hash, then its
// channel and counter, then the account's channel and counter.
func (r Ref) chanKeys() []string {
	dc, ac := DestinationChannel(r.ID), AccountChannel(r.Account)
	return []string{destKey(r.Account, r.ID), chanKey(r.Account, dc), chanSeqKey(r.Account, dc),
		chanKey(r.Account, ac), chanSeqKey(r.Account, ac)}
}

// ErrUnknownDestination is returned for a destination with no stored state.
var ErrUnknownDestination = errors.New("destination has no stored state")

// LoadState reads a destination's state and its channel's sequence in one MULTI, so
// State.Sequence is the last channel event the state reflects (the card needs that).
func (s *Store) LoadState(ctx context.Context, r Ref) (State, error) {
	pipe := s.rdb.TxPipeline()
	h := pipe.HGetAll(ctx, destKey(r.Account, r.ID))
	seq := pipe.Get(ctx, chanSeqKey(r.Account, DestinationChannel(r.ID)))
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return State{}, err
	}
	if len(h.Val()) == 0 {
		return State{}, ErrUnknownDestination
	}
	st := stateFrom(h.Val())
	st.Sequence, _ = strconv.ParseInt(seq.Val(), 10, 64)
	return st, nil
}

func stateFrom(h map[string]string) State {
	st := State{
		Status: h["status"], Cursor: h["cursor"], ExternalID: h["external_id"], Fingerprint: h["fingerprint"],
	}
	st.ConsecutiveFailures, _ = strconv.Atoi(h["consecutive_failures"])
	unmarshalIf(h["last_failure"], &st.LastFailure)
	unmarshalIf(h["last_delivery"], &st.LastDelivery)
	unmarshalIf(h["disabled"], &st.Disabled)
	return st
}

func unmarshalIf[T any](s string, dst **T) {
	if s == "" {
		return
	}
	v := new(T)
	if json.Unmarshal([]byte(s), v) == nil {
		*dst = v
	}
}

var ensureScript = redis.NewScript(luaPrelude + `
local now_ms, cutoff = tonumber(ARGV[3]), tonumber(ARGV[4])
if redis.call('HEXISTS', KEYS[1], 'status') == 0 then
  -- First sight: deliver what arrives from now on.
  local last = redis.call('XREVRANGE', KEYS[6], '+', '-', 'COUNT', 1)[1]
  local cursor = '0-0'
  if last then cursor = last[1] end
  redis.call('HSET', KEYS[1], 'status', 'active', 'cursor', cursor, 'consecutive_failures', 0,
             'external_id', ARGV[1], 'fingerprint', ARGV[2])
  return 'new'
end
if redis.call('HGET', KEYS[1], 'fingerprint') ~= ARGV[2] then
  redis.call('HSET', KEYS[1], 'fingerprint', ARGV[2])
  emit_both('resync.required', now_ms, cutoff, {destination = ARGV[5], reason = 'the destination was redefined by config'})
  return 'redefined'
end
return 'same'
`)

// Ensure makes a destination's state exist: on first sight it issues the ExternalId
// (never changed after) and starts its cursor at the end of the account's log. A
// fingerprint that differs from the stored one appends resync.required to its channels.
// It returns "new", "redefined" or "same".
func (s *Store) Ensure(ctx context.Context, r Ref, externalID, fingerprint string, channelRetention time.Duration) (string, error) {
	now := time.Now()
	keys := append(r.chanKeys(), logKey(r.Account))
	return ensureScript.Run(ctx, s.rdb, keys, externalID, fingerprint, now.UnixMilli(),
		now.Add(-channelRetention).UnixMilli(), r.ID).Text()
}

var statusScript = redis.NewScript(luaPrelude + `
local want, now_ms, cutoff, iso = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local status = redis.call('HGET', KEYS[1], 'status')
if not status then return redis.error_reply('UNKNOWN destination has no stored state') end
if status == want then return {0, tonumber(redis.call('GET', KEYS[3]) or '0')} end
local etype
if want == 'paused' then
  redis.call('HSET', KEYS[1], 'status', 'paused')
  etype = 'destination.paused'
elseif want == 'active' then
  -- Events that arrived while paused or disabled are not delivered later.
  local last = redis.call('XREVRANGE', KEYS[6], '+', '-', 'COUNT', 1)[1]
  if last then redis.call('HSET', KEYS[1], 'cursor', last[1]) end
  redis.call('HSET', KEYS[1], 'status', 'active', 'consecutive_failures', 0)
  redis.call('HDEL', KEYS[1], 'disabled')
  etype = 'destination.activated'
else
  redis.call('HSET', KEYS[1], 'status', 'disabled', 'disabled', cjson.encode({at = iso, reason = ARGV[5]}))
  announce_disabled(KEYS[7], ARGV[9], ARGV[7], ARGV[6], ARGV[8], iso, ARGV[5])
  etype = 'destination.disabled'
end
return {1, emit_both(etype, now_ms, cutoff, {destination = ARGV[6], reason = ARGV[5]})}
`)

// SetStatus pauses, activates or disables a destination and appends the matching
// channel event. Activating resets the count and moves the cursor to the end of the log.
// Disabling also writes destination.disabled to the account's outbox, in the same script.
// changed is false when the destination already had that status.
func (s *Store) SetStatus(ctx context.Context, r Ref, status, reason string, channelRetention time.Duration) (changed bool, err error) {
	if status != Active && status != Paused && status != Disabled {
		return false, fmt.Errorf("unknown status %q", status)
	}
	now := time.Now()
	noticeID := ""
	if status == Disabled {
		noticeID = newNoticeID()
	}
	keys := append(r.chanKeys(), logKey(r.Account), outboxKey(r.Account))
	res, err := statusScript.Run(ctx, s.rdb, keys, status, now.UnixMilli(), now.Add(-channelRetention).UnixMilli(),
		now.UTC().Format(time.RFC3339Nano), boundText(reason), r.ID, r.Account, r.Connector, noticeID).Int64Slice()
	if redis.HasErrorPrefix(err, "UNKNOWN") {
		return false, ErrUnknownDestination
	}
	if err != nil {
		return false, err
	}
	return res[0] == 1, nil
}

var emitScript = redis.NewScript(luaPrelude + `
if redis.call('HEXISTS', KEYS[1], 'status') == 0 then
  return redis.error_reply('UNKNOWN destination has no stored state')
end
return emit_both(ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), cjson.decode(ARGV[4]))
`)

// Emit appends an event that changes no state (destination.checked) to the
// destination's and its account's channels; fields become the event's data, with the
// card's state added.
func (s *Store) Emit(ctx context.Context, r Ref, eventType string, fields map[string]any, channelRetention time.Duration) (int64, error) {
	data, err := json.Marshal(fields)
	if err != nil {
		return 0, err
	}
	now := time.Now()
	seq, err := emitScript.Run(ctx, s.rdb, r.chanKeys(), eventType, now.UnixMilli(), now.Add(-channelRetention).UnixMilli(), data).Int64()
	if redis.HasErrorPrefix(err, "UNKNOWN") {
		return 0, ErrUnknownDestination
	}
	return seq, err
}
