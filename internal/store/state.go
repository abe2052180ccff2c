package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/mercamap/relay/internal/destination"
	"github.com/redis/go-redis/v9"
)

// Status of a destination.
const (
	Active   = "active"
	Paused   = "paused"
	Disabled = "disabled"
	// Pending: added by config, its setup check not passed yet. Nothing is written or
	// counted; the first check that passes makes it active (SetupChecked).
	Pending = "pending"
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

// DisabledInfo says when and why a destination was disabled, and by whom.
type DisabledInfo struct {
	At     time.Time `json:"at"`
	Reason string    `json:"reason"`
	// By is DisabledByOperator (our team, with an admin token: only an admin token
	// re-activates it) or DisabledByRejections (the rejections in a row: the customer's
	// to re-activate).
	By string `json:"by"`
}

// Who disabled a destination.
const (
	DisabledByOperator   = "operator"
	DisabledByRejections = "rejections"
)

// State is a destination's stored state.
type State struct {
	// CreatedAt is when Redis first held the destination (zero for one stored before
	// the field was).
	CreatedAt           time.Time
	Status              string
	Cursor              string // log id of the last event that ended at this destination
	ConsecutiveFailures int
	LastFailure         *Failure
	LastDelivery        *Delivery
	Disabled            *DisabledInfo
	Failing             *Failing // a warning threshold reached in this run of failures
	ExternalID          string
	Fingerprint         string
	Sequence            int64 // last sequence of the destination's channel
	// Epoch changes each time the cursor is moved by hand (a replay, an activation):
	// a write begun or a commit made under an older epoch moves no cursor.
	Epoch string
	// ReplayFrom is the cursor a replay asked for while the destination was not active:
	// its activation starts delivering after it.
	ReplayFrom string
	// Pending is the last setup check of a pending destination (nil otherwise).
	Pending *PendingCheck
	// RetriesQueued: retries asked for (AskRetry) wait for the lease holder.
	RetriesQueued bool
	// Control is the control version (ctlv): it grows with each change the lease holder
	// must read (control.go), so a holder knows whether the state it holds is current.
	Control int64
	// Done is what ended past Cursor, as the last holder committed it (state format 2,
	// DecodeDone; "" under format 1): a holder that takes over skips those.
	Done string
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

// LoadState reads a destination's state and its channel's sequence in one call of
// loadStateScript, so State.Sequence is the last channel event the state reflects (the
// card needs that): one command, where a MULTI of the two reads is four.
func (s *Store) LoadState(ctx context.Context, r Ref) (State, error) {
	v, err := loadStateScript.Run(ctx, s.rdb, []string{destKey(r.Account, r.ID), chanSeqKey(r.Account, DestinationChannel(r.ID))}).Slice()
	if err != nil {
		return State{}, err
	}
	if len(v) != 2 {
		return State{}, fmt.Errorf("state of %s: %d replies, want 2", r.ID, len(v))
	}
	pairs, _ := v[0].([]any)
	h := make(map[string]string, len(pairs)/2)
	for i := 0; i+1 < len(pairs); i += 2 {
		k, _ := pairs[i].(string)
		h[k], _ = pairs[i+1].(string)
	}
	if _, ok := h["status"]; !ok { // nothing, or only a lease (Forget, AcquireLeases)
		return State{}, destination.ErrNotFound
	}
	st := stateFrom(h)
	seq, _ := v[1].(string) // false (nil) when the channel has no counter
	st.Sequence, _ = strconv.ParseInt(seq, 10, 64)
	return st, nil
}

// loadStateScript answers a destination's hash (KEYS[1], HGETALL's pairs) and its
// channel's counter (KEYS[2]) read together.
var loadStateScript = redis.NewScript(`return {redis.call('HGETALL', KEYS[1]), redis.call('GET', KEYS[2])}`)

func stateFrom(h map[string]string) State {
	st := State{
		Status: h["status"], Cursor: h["cursor"], ExternalID: h["external_id"], Fingerprint: h["fingerprint"],
		Epoch: h["epoch"], ReplayFrom: h["replay_from"], Done: h["done"],
	}
	if ms, err := strconv.ParseInt(h["created_at"], 10, 64); err == nil {
		st.CreatedAt = time.UnixMilli(ms).UTC()
	}
	if st.Epoch == "" {
		st.Epoch = "0"
	}
	st.ConsecutiveFailures, _ = strconv.Atoi(h["consecutive_failures"])
	st.RetriesQueued = h["retries_queued"] != "" && h["retries_queued"] != "0"
	st.Control, _ = strconv.ParseInt(h["ctlv"], 10, 64)
	unmarshalIf(h["last_failure"], &st.LastFailure)
	unmarshalIf(h["last_delivery"], &st.LastDelivery)
	unmarshalIf(h["disabled"], &st.Disabled)
	unmarshalIf(h["failing"], &st.Failing)
	unmarshalIf(h["pending"], &st.Pending)
	if st.Disabled != nil && st.Disabled.By == "" {
		st.Disabled.By = DisabledByOperator // stored before "by" was: see disabledBy in luaPrelude
		if rejectionsReason.MatchString(st.Disabled.Reason) {
			st.Disabled.By = DisabledByRejections
		}
	}
	return st
}

// rejectionsReason is the reason Commit writes when the rejections disable a
// destination; it tells who disabled one stored before DisabledInfo.By existed.
var rejectionsReason = regexp.MustCompile(`^disabled after [0-9]+ rejected attempts in a row`)

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
  -- The channel's counter: a deleted destination's lives on a while (Forget), and is
  -- kept for good again once the id is made again, which numbers on from it. None left
  -- (a new id, or one whose counter expired): the channel starts at 1, and from state
  -- format 2 (ARGV[7]) born is the account channel's sequence now: every account entry
  -- at or below it is about an earlier destination of the id, never this one
  -- (ReadChannel serves those as resync.required).
  redis.call('PERSIST', KEYS[3])
  local born = 0
  if ARGV[7] == '1' and redis.call('EXISTS', KEYS[3]) == 0 then
    born = tonumber(redis.call('GET', KEYS[5]) or '0')
  end
  -- First sight: pending until its setup check passes; then it delivers what arrived
  -- from this point on.
  local last = redis.call('XREVRANGE', KEYS[6], '+', '-', 'COUNT', 1)[1]
  local cursor = '0-0'
  if last then cursor = last[1] end
  redis.call('HSET', KEYS[1], 'status', 'pending', 'cursor', cursor, 'consecutive_failures', 0,
             'external_id', ARGV[1], 'fingerprint', ARGV[2], 'created_at', now_ms)
  if born > 0 then redis.call('HSET', KEYS[1], 'born', born) end
  redis.call('PERSIST', KEYS[1]) -- a forgotten id's lease fields, made again (Forget)
  if ARGV[6] == '1' then
    emit_both('resync.required', now_ms, cutoff, {destination = ARGV[5], reason = 'the destination was added'})
  end
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
// (never changed after), starts its cursor at the end of the account's log, and makes
// it Pending (SetupChecked activates it). A destination with a status keeps it. A
// fingerprint that differs from the stored one appends resync.required to its channels.
// It returns "new", "redefined" or "same".
func (s *Store) Ensure(ctx context.Context, r Ref, externalID, fingerprint string, channelRetention time.Duration) (string, error) {
	res, err := s.EnsureMany(ctx, []Ensured{{Ref: r, ExternalID: externalID, Fingerprint: fingerprint}}, channelRetention)
	if err != nil {
		return "", err
	}
	return res[0], nil
}

// Ensured names one destination for EnsureMany: what Ensure takes. Announce: when it
// is new, resync.required goes to its channels in the same call, so the account's
// watchers load a snapshot that shows its card (a destination added while running).
type Ensured struct {
	Ref
	ExternalID, Fingerprint string
	Announce                bool
}

// EnsureMany is Ensure for many destinations, one pipelined round trip per master (a
// config of 100,000 destinations loads in seconds, not in 100,000 round trips). Each
// answer is Ensure's.
func (s *Store) EnsureMany(ctx context.Context, es []Ensured, channelRetention time.Duration) ([]string, error) {
	now := time.Now()
	born := "0" // the account channel's sequence a new channel is born at (ensureScript): format 2
	if s.stateFormat() >= CounterLifetime {
		born = "1"
	}
	// What every call shares is made once, and the calls' keys and arguments are cut from
	// one list each: a start ensures every destination, and this ran per destination.
	var nowMS, cutoff, bornArg, bounds any = now.UnixMilli(), now.Add(-channelRetention).UnixMilli(), born, s.boundsArg()
	const nKeys, nArgs = 6, 8
	keys, args := make([]string, nKeys*len(es)), make([]any, nArgs*len(es))
	accountKeys := map[string]*[3]string{} // the account channel's and counter's keys, and the log's
	calls := make([]call, len(es))
	for i, e := range es {
		var announce any = "0" // a constant in an interface: no allocation
		if e.Announce {
			announce = "1"
		}
		ak := accountKeys[e.Account]
		if ak == nil {
			ac := AccountChannel(e.Account)
			ak = &[3]string{chanKey(e.Account, ac), chanSeqKey(e.Account, ac), logKey(e.Account)}
			accountKeys[e.Account] = ak
		}
		dc := DestinationChannel(e.ID)
		k := keys[i*nKeys : (i+1)*nKeys : (i+1)*nKeys]
		// chanKeys' order (KEYS[1..5]), then the log.
		k[0], k[1], k[2], k[3], k[4], k[5] = destKey(e.Account, e.ID), chanKey(e.Account, dc), chanSeqKey(e.Account, dc), ak[0], ak[1], ak[2]
		a := args[i*nArgs : (i+1)*nArgs : (i+1)*nArgs]
		a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7] = e.ExternalID, e.Fingerprint, nowMS, cutoff, e.ID, announce, bornArg, bounds
		calls[i] = call{keys: k, args: a}
	}
	cmds, err := s.evalAll(ctx, ensureScript, calls, false)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(es))
	for i, c := range cmds {
		if out[i], err = c.Text(); err != nil {
			return nil, fmt.Errorf("destination %s: %w", es[i].ID, err)
		}
	}
	return out, nil
}

var statusScript = redis.NewScript(luaPrelude + luaHolders + `
local want, now_ms, cutoff, iso = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local operator, ack = ARGV[10] == '1', ARGV[11]
local status = redis.call('HGET', KEYS[1], 'status')
if not status then return redis.error_reply('UNKNOWN destination has no stored state') end
-- Our operators' disable sticks: only an operator (an admin token) changes it, also
-- after an operator paused it (the disable's record stays until an activation).
if not operator and disabled_by(KEYS[1]) == 'operator' then
  return redis.error_reply('FORBIDDEN disabled by an operator')
end
-- Checked before "already so": resuming an active destination is an error, not a no-op.
local since = ARGV[12]
if want == 'active' and ((since == 'since_disabled' and status ~= 'disabled') or (since == 'since_paused' and status ~= 'paused')) then
  return redis.error_reply('MISMATCH the destination is ' .. status)
end
if status == want and not (want == 'disabled' and operator and disabled_by(KEYS[1]) ~= 'operator') then
  return {0, tonumber(redis.call('GET', KEYS[3]) or '0'), ''}
end
local etype
if want == 'paused' then
  redis.call('HSET', KEYS[1], 'status', 'paused')
  etype = 'destination.paused'
elseif want == 'active' then
  local replay_from = redis.call('HGET', KEYS[1], 'replay_from')
  if replay_from then
    -- A replay asked for while not active starts now (or replaces the one in flight).
    replay_to(replay_from, KEYS[6], true)
    redis.call('HDEL', KEYS[1], 'replay_from')
  elseif since == '' and status ~= 'pending' then
    -- Events that arrived while paused or disabled are not delivered later.
    local last = redis.call('XREVRANGE', KEYS[6], '+', '-', 'COUNT', 1)[1]
    if last then redis.call('HSET', KEYS[1], 'cursor', last[1]) end
  end
  -- since_disabled / since_paused: the cursor stays where delivery stopped, and what
  -- ended past it (state format 2's done field) stays ended under the new epoch.
  local epoch = redis.call('HINCRBY', KEYS[1], 'epoch', 1)
  if since ~= '' and not replay_from then
    local rest = string.match(redis.call('HGET', KEYS[1], 'done') or '', '^[^|]*|(.+)$')
    if rest then redis.call('HSET', KEYS[1], 'done', epoch .. '|' .. rest) end
  end
  redis.call('HSET', KEYS[1], 'status', 'active', 'consecutive_failures', 0)
  redis.call('HDEL', KEYS[1], 'failing')
  redis.call('HDEL', KEYS[1], 'disabled')
  redis.call('HDEL', KEYS[1], 'pending')
  etype = 'destination.activated'
else
  -- An operator's disable of a destination the rejections disabled makes it theirs.
  redis.call('HSET', KEYS[1], 'status', 'disabled', 'disabled', cjson.encode({at = iso, reason = ARGV[5], by = 'operator'}))
  announce_disabled(KEYS[7], ARGV[9], ARGV[7], ARGV[6], ARGV[8], iso, ARGV[5])
  etype = 'destination.disabled'
end
local seq = emit_both(etype, now_ms, cutoff, {destination = ARGV[6], reason = ARGV[5]})
-- The lease holder, if any, reads the new status before its next write; a pause or a
-- disable waits for its answer (Ack) that none will start.
if want == 'active' then ack = '' end
control(KEYS[9], ARGV[6], 'status', ack)
local lease = ''
if ack ~= '' then
  -- The holder named in the hash, while its hold of the account (KEYS[8]) is live.
  local h = redis.call('HMGET', KEYS[1], 'holder', 'lease_token')
  local who, gen = split_holder(h[1])
  if who and live(KEYS[8], who) == gen then lease = who .. '|' .. (h[2] or '0') end
end
return {1, seq, lease}
`)

// ErrOperatorDisabled is returned when an account asks to pause or activate a
// destination our operators disabled: only an operator (an admin token) may.
var ErrOperatorDisabled = errors.New("disabled by an operator: only an admin token changes its status")

// StatusChange asks for a destination's status to change.
type StatusChange struct {
	Ref
	Status           string // Active, Paused or Disabled (Disabled: always an operator's)
	Reason           string // a disable's reason
	Operator         bool   // asked with an admin token; false: by the destination's account
	ChannelRetention time.Duration
	// Since, on an activation: "" (deliver what arrives from now on), SinceDisabled or
	// SincePaused (resume from where delivery stopped: what arrived meanwhile is sent,
	// in order). Naming a status the destination does not have is ErrSinceMismatch.
	Since string
}

// What an activation resumes from (StatusChange.Since).
const (
	SinceDisabled = "since_disabled"
	SincePaused   = "since_paused"
)

// ErrSinceMismatch is returned for an activation with Since naming a status the
// destination does not have (since_disabled on a paused one).
type ErrSinceMismatch struct{ Status string }

func (e ErrSinceMismatch) Error() string {
	return "the destination is " + e.Status + ", not what the replay names"
}

// StatusResult is what a status change did.
type StatusResult struct {
	Changed bool // false when the destination already had that status
	// Holder is the lease holder's token when the change was a pause or a disable and a
	// replica held the lease (0: none held it, so no write was under way): its answer
	// to the change waits under Ack (WaitAck).
	Holder int64
	Ack    string
}

// SetStatus changes a destination's status as an operator; see ChangeStatus.
func (s *Store) SetStatus(ctx context.Context, r Ref, status, reason string, channelRetention time.Duration) (changed bool, err error) {
	res, err := s.ChangeStatus(ctx, StatusChange{Ref: r, Status: status, Reason: reason, Operator: true, ChannelRetention: channelRetention})
	return res.Changed, err
}

// ChangeStatus pauses, activates or disables a destination and appends the matching
// channel event. Activating resets the count and moves the cursor to the end of the log.
// Disabling also writes destination.disabled to the account's outbox, in the same script.
// A destination an operator disabled answers ErrOperatorDisabled to an account. The
// change appends a control entry for the lease holder in the same step; a pause or a
// disable returns the holder's token and the ack to wait on (StatusResult.Holder), and
// the holder answers once no write can start (dispatch waits for it).
func (s *Store) ChangeStatus(ctx context.Context, c StatusChange) (StatusResult, error) {
	if c.Status != Active && c.Status != Paused && c.Status != Disabled {
		return StatusResult{}, fmt.Errorf("unknown status %q", c.Status)
	}
	if c.Since != "" && (c.Status != Active || (c.Since != SinceDisabled && c.Since != SincePaused)) {
		return StatusResult{}, fmt.Errorf("unknown activation %q", c.Since)
	}
	now := time.Now()
	noticeID := ""
	if c.Status == Disabled {
		noticeID = newNoticeID()
	}
	operator := "0"
	if c.Operator {
		operator = "1"
	}
	r := c.Ref
	ack := newNoticeID()
	keys := append(r.chanKeys(), logKey(r.Account), outboxKey(r.Account), holdersKey(r.Account), ctlKey(r.Account))
	res, err := statusScript.Run(ctx, s.rdb, keys, c.Status, now.UnixMilli(), now.Add(-c.ChannelRetention).UnixMilli(),
		now.UTC().Format(time.RFC3339Nano), boundText(c.Reason), r.ID, r.Account, r.Connector, noticeID, operator,
		ack, c.Since, s.boundsArg()).Slice()
	switch {
	case redis.HasErrorPrefix(err, "MISMATCH"):
		return StatusResult{}, ErrSinceMismatch{Status: strings.TrimPrefix(err.Error(), "MISMATCH the destination is ")}
	case redis.HasErrorPrefix(err, "UNKNOWN"):
		return StatusResult{}, destination.ErrNotFound
	case redis.HasErrorPrefix(err, "FORBIDDEN"):
		return StatusResult{}, ErrOperatorDisabled
	case err != nil:
		return StatusResult{}, err
	}
	if len(res) < 3 {
		return StatusResult{}, fmt.Errorf("status change: unexpected answer %v", res)
	}
	out := StatusResult{}
	if n, _ := res[0].(int64); n == 1 {
		out.Changed = true
	}
	if lease, _ := res[2].(string); lease != "" {
		_, tok, _ := strings.Cut(lease, "|")
		out.Holder, _ = strconv.ParseInt(tok, 10, 64)
		out.Ack = ack
	}
	return out, nil
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
	seq, err := emitScript.Run(ctx, s.rdb, r.chanKeys(), eventType, now.UnixMilli(), now.Add(-channelRetention).UnixMilli(), data, s.boundsArg()).Int64()
	if redis.HasErrorPrefix(err, "UNKNOWN") {
		return 0, destination.ErrNotFound
	}
	return seq, err
}

// forgetScript deletes a destination's keys (KEYS[3] on) and its hash's state (KEYS[1])
// but the lease's: its holder stays, its fencing token and control version move on.
// Those live ARGV[1] ms more. The channel's counter (KEYS[2]) lives ARGV[2] ms more,
// or, when ARGV[2] is 0 (before state format 2), is kept for good.
var forgetScript = redis.NewScript(`
local h = redis.call('HMGET', KEYS[1], 'holder', 'lease_token', 'ctlv')
redis.call('DEL', KEYS[1], unpack(KEYS, 3))
redis.call('HSET', KEYS[1], 'lease_token', tonumber(h[2] or '0') + 1, 'ctlv', tonumber(h[3] or '0') + 1)
if h[1] then redis.call('HSET', KEYS[1], 'holder', h[1]) end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
if tonumber(ARGV[2]) > 0 then redis.call('PEXPIRE', KEYS[2], ARGV[2]) end
return 0
`)

// forgottenTTL is how long a forgotten destination's lease fields outlive it unless the
// id is made again (Ensure keeps them then): far past any write or commit in flight, and
// any rolling upgrade. Its channel counter lives at least as long (deletedCounterLife).
const forgottenTTL = 24 * time.Hour

// Forget deletes everything Redis holds of one destination of r.Account: its state
// (the ExternalId with it), channel, attempt log, retries and chart: a deleted
// destination's. The account's log and channel stay. So does the destination channel's
// counter (a few bytes): a destination made again with the same id while it lives
// numbers its events on from it, so a follower's cursor from the deleted one never
// lands inside the new one's channel. From state format 2 on (CounterLifetime) the
// counter lives SetDeletedCounterLife's life (max(a day, delivery.channel_retention) in
// relay serve: past every cursor of the deleted channel a follower may still rightly
// hold) unless the id is made again, so deletes leave nothing for good; one made again
// after that starts its channel at 1, like any new destination (Ensure). Either way the
// account channel's pointers to the deleted one's events are served as resync.required,
// never as the new one's: they point at sequences the new channel never has, or at or
// below its born (ensureScript, ReadChannel).
// The lease stays, as three small fields for a day unless the id is made again: its
// holder, so a replica that took a new destination of the id before its create called
// Forget is still the one a pause asks, and no second replica takes it meanwhile; and
// its fencing token and control version, moved on, so every commit of a holder from
// before (the deleted destination's late one, or that early taker's, which then stops
// and frees the lease) is refused, and no two holders of one id ever share a token.
func (s *Store) Forget(ctx context.Context, r Ref) error {
	ch := DestinationChannel(r.ID)
	var counter time.Duration // kept for good
	if s.stateFormat() >= CounterLifetime {
		counter = s.deletedCounterLife()
	}
	return forgetScript.Run(ctx, s.rdb, []string{destKey(r.Account, r.ID), chanSeqKey(r.Account, ch),
		attemptsKey(r.Account, r.ID), retriesKey(r.Account, r.ID), minutesKey(r.Account, r.ID), chanKey(r.Account, ch)},
		forgottenTTL.Milliseconds(), counter.Milliseconds()).Err()
}

// CounterLifetime is the state format from which a deleted destination's channel
// counter expires (Forget). Releases before 0.3.0 keep it for good and count on it: one
// that made the id again would take over a counter that expires under its live
// destination, and its channel's next event would be refused (a sequence below the
// stream's last). Before the switch such a release may still run, or the roll go back,
// so the counter is kept; after it, no such release starts. From it on, too, a new
// channel records its born (ensureScript); a counter that never expires never starts a
// channel over, so under format 1 none is needed.
const CounterLifetime = 2
