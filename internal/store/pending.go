package store

import (
	"context"
	"encoding/json"
	"time"

	"github.com/mercamap/relay/internal/destination"
	"github.com/redis/go-redis/v9"
)

// PendingCheck is what a pending destination's last setup check found: what is
// missing, in the check's words, and when the next check runs. The card shows it.
type PendingCheck struct {
	At        time.Time `json:"at"`
	Message   string    `json:"message"`
	NextCheck time.Time `json:"next_check"`
	// Security is true when the check refused the destination for a security reason,
	// not a setup step missing (the role lets a wrong ExternalId in): a status-only view
	// shows it as refused, not "being set up". Reason is that reason's code
	// (failures.ReasonExternalIDNotEnforced); omitted when there is none.
	Security bool   `json:"security"`
	Reason   string `json:"reason,omitempty"`
}

var setupCheckedScript = redis.NewScript(luaPrelude + `
local passed, iso, now_ms, cutoff, dest_id, check = ARGV[1] == '1', ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5], ARGV[6]
local status = redis.call('HGET', KEYS[1], 'status')
if not status then return redis.error_reply('UNKNOWN destination has no stored state') end
if status ~= 'pending' then return status end
if not passed then
  -- A security refusal the check recorded (SetupRefusal) marks the card's pending.
  local reason = redis.call('HGET', KEYS[1], 'pending_reason')
  if reason and reason ~= '' then
    local c = cjson.decode(check)
    c.security, c.reason = true, reason
    check = cjson.encode(c)
  end
  redis.call('HSET', KEYS[1], 'pending', check)
  return status
end
-- The cursor stays at the point the destination was added: what arrived since is sent.
redis.call('HINCRBY', KEYS[1], 'epoch', 1)
redis.call('HSET', KEYS[1], 'status', 'active', 'consecutive_failures', 0)
redis.call('HDEL', KEYS[1], 'pending', 'pending_reason')
emit_both('destination.activated', now_ms, cutoff, {destination = dest_id, reason = 'the setup check passed'})
control(KEYS[6], dest_id, 'setup', '')
return 'active'
`)

var setupRefusalScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], 'status') ~= 'pending' then return 0 end
local reason = ARGV[1]
if reason == '' then redis.call('HDEL', KEYS[1], 'pending_reason') else redis.call('HSET', KEYS[1], 'pending_reason', reason) end
-- The card's last check says it at once, so the channel event that follows carries it.
local raw = redis.call('HGET', KEYS[1], 'pending')
if raw then
  local c = cjson.decode(raw)
  if reason == '' then c.security, c.reason = false, nil else c.security, c.reason = true, reason end
  redis.call('HSET', KEYS[1], 'pending', cjson.encode(c))
end
return 1
`)

// SetupRefusal records why a pending destination's setup check refused it, before
// SetupChecked stores the check: reason is a security reason's code
// (failures.ReasonExternalIDNotEnforced), which SetupChecked then puts in the card's
// pending (security true), or "" for a refusal that is a setup step missing. The card's
// pending already stored is marked (or unmarked) at once. Only a
// definite refusal is recorded: a check that could not run leaves the last one. A
// destination no longer pending is left as it is; one that passes its check drops it.
func (s *Store) SetupRefusal(ctx context.Context, r Ref, reason string) error {
	return setupRefusalScript.Run(ctx, s.rdb, []string{destKey(r.Account, r.ID)}, reason).Err()
}

// SetupChecked records a pending destination's setup check. A check that passed makes
// it active, its cursor still at the point it was added (the events that arrived
// meanwhile are delivered, in order), with destination.activated on its channels; one
// that failed is stored for the card (nothing counts). It returns the status after:
// a destination no longer pending (paused or disabled meanwhile) is left as it is.
func (s *Store) SetupChecked(ctx context.Context, r Ref, passed bool, check PendingCheck, channelRetention time.Duration) (string, error) {
	check.Message = boundText(check.Message)
	data, err := json.Marshal(check)
	if err != nil {
		return "", err
	}
	p := "0"
	if passed {
		p = "1"
	}
	now := time.Now()
	res, err := setupCheckedScript.Run(ctx, s.rdb, append(r.chanKeys(), ctlKey(r.Account)), p, now.UTC().Format(time.RFC3339Nano), now.UnixMilli(),
		now.Add(-channelRetention).UnixMilli(), r.ID, data, s.boundsArg()).Text()
	if redis.HasErrorPrefix(err, "UNKNOWN") {
		return "", destination.ErrNotFound
	}
	return res, err
}

var repentScript = redis.NewScript(luaPrelude + `
local status = redis.call('HGET', KEYS[1], 'status')
if not status then return redis.error_reply('UNKNOWN destination has no stored state') end
if status ~= 'active' and status ~= 'pending' then return status end
redis.call('HSET', KEYS[1], 'status', 'pending', 'pending', ARGV[4])
emit_both('resync.required', tonumber(ARGV[1]), tonumber(ARGV[2]), {destination = ARGV[3], reason = 'the destination was changed: its setup is checked again'})
control(KEYS[6], ARGV[3], 'status', '')
return 'pending'
`)

// Repend sends an active or pending destination back to pending, with check as what the
// card shows until its setup check passes again: its role changed, and delivery waits
// for the new one to be checked. The lease holder reads the change with its account's
// control stream. A paused or disabled one keeps its status (an activation checks it).
// It returns the status after.
func (s *Store) Repend(ctx context.Context, r Ref, check PendingCheck, channelRetention time.Duration) (string, error) {
	check.Message = boundText(check.Message)
	data, err := json.Marshal(check)
	if err != nil {
		return "", err
	}
	now := time.Now()
	res, err := repentScript.Run(ctx, s.rdb, append(r.chanKeys(), ctlKey(r.Account)), now.UnixMilli(),
		now.Add(-channelRetention).UnixMilli(), r.ID, data, s.boundsArg()).Text()
	if redis.HasErrorPrefix(err, "UNKNOWN") {
		return "", destination.ErrNotFound
	}
	return res, err
}
