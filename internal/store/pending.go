package store

import (
	"context"
	"encoding/json"
	"time"

	"github.com/redis/go-redis/v9"
)

// PendingCheck is what a pending destination's last setup check found: what is
// missing, in the check's words, and when the next check runs. The card shows it.
type PendingCheck struct {
	At        time.Time `json:"at"`
	Message   string    `json:"message"`
	NextCheck time.Time `json:"next_check"`
}

var setupCheckedScript = redis.NewScript(luaPrelude + `
local passed, iso, now_ms, cutoff, dest_id, check = ARGV[1] == '1', ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5], ARGV[6]
local status = redis.call('HGET', KEYS[1], 'status')
if not status then return redis.error_reply('UNKNOWN destination has no stored state') end
if status ~= 'pending' then return status end
if not passed then
  redis.call('HSET', KEYS[1], 'pending', check)
  return status
end
-- The cursor stays at the point the destination was added: what arrived since is sent.
redis.call('HINCRBY', KEYS[1], 'epoch', 1)
redis.call('HSET', KEYS[1], 'status', 'active', 'consecutive_failures', 0)
redis.call('HDEL', KEYS[1], 'pending')
emit_both('destination.activated', now_ms, cutoff, {destination = dest_id, reason = 'the setup check passed'})
control(KEYS[6], dest_id, 'setup', '')
return 'active'
`)

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
		return "", ErrUnknownDestination
	}
	return res, err
}
