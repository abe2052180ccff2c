package store

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/mercamap/relay/internal/ratelimit"
)

// Limiter is a ratelimit.Limiter whose buckets live in Redis, in the account's slot,
// so every replica spends from the same ones: the API's action, replay and test limits
// and the STS budget hold for an account whatever the replica count. Each decision is
// one script call on Redis's own clock (replicas' clocks may differ).
type Limiter struct{ s *Store }

// Limiter returns the store's shared limiter.
func (s *Store) Limiter() *Limiter { return &Limiter{s: s} }

// bucketKey is one limit's bucket: a hash of its level and when it was last brought up
// to date, gone once it would be full again.
func bucketKey(acct, key string) string { return "relay:{" + acct + "}:rl:" + key }

// spendScript spends ARGV[1] tokens from every bucket of KEYS, or from none. ARGV then
// holds each bucket's count and period in milliseconds. It answers {1, now} when it
// spent (now: Redis's clock in ms, what a refund is given), or {0, wait in ms, the
// 1-based index of the bucket that waits longest}.
var spendScript = redis.NewScript(luaNow + `
local n = tonumber(ARGV[1])
local levels, wait, empty = {}, 0, 0
for i, key in ipairs(KEYS) do
  local cap, per = tonumber(ARGV[2 * i]), tonumber(ARGV[2 * i + 1])
  local h = redis.call('HMGET', key, 'l', 't')
  local level, at = tonumber(h[1]), tonumber(h[2])
  if not level or not at then level, at = cap, now end
  if now > at then level = math.min(cap, level + cap * (now - at) / per) end
  levels[i] = level
  if level < n then
    local w = math.ceil((n - level) * per / cap)
    if w > wait then wait, empty = w, i end
  end
end
if wait > 0 then return {0, wait, empty} end
for i, key in ipairs(KEYS) do
  redis.call('HSET', key, 'l', string.format('%.6f', levels[i] - n), 't', now)
  redis.call('PEXPIRE', key, ARGV[2 * i + 1]) -- full again by then: a missing bucket is full
end
return {1, now}
`)

// refundScript gives ARGV[1] tokens, spent at ARGV[2] (Redis ms, the spend's now), back
// to each bucket of KEYS that cannot have refilled them since: spent less than their
// refill time ago (ratelimit.Refundable). ARGV then holds each bucket's count and period
// in milliseconds, as for spendScript. A missing bucket is full: it gets nothing; one
// full again is deleted, as if it had expired. The hash keeps spendScript's fields and
// form, so any release's spend reads it.
var refundScript = redis.NewScript(luaNow + `
local n, spent = tonumber(ARGV[1]), tonumber(ARGV[2])
for i, key in ipairs(KEYS) do
  local cap, per = tonumber(ARGV[2 * i + 1]), tonumber(ARGV[2 * i + 2])
  local h = redis.call('HMGET', key, 'l', 't')
  local level, at = tonumber(h[1]), tonumber(h[2])
  if level and at and now >= spent and now - spent < n * per / cap then
    if now > at then level = math.min(cap, level + cap * (now - at) / per) end
    level = level + n
    if level >= cap then
      redis.call('DEL', key)
    else
      redis.call('HSET', key, 'l', string.format('%.6f', level), 't', now)
      redis.call('PEXPIRE', key, per)
    end
  end
end
return 0
`)

// Spend spends n tokens from every bucket of limits, all of account's, or from none.
func (l *Limiter) Spend(ctx context.Context, account string, n int, limits ...ratelimit.Limit) (ratelimit.Verdict, error) {
	if len(limits) == 0 {
		return ratelimit.Verdict{OK: true}, nil
	}
	keys, args, err := bucketArgs(account, limits, n)
	if err != nil {
		return ratelimit.Verdict{}, err
	}
	res, err := spendScript.Run(ctx, l.s.rdb, keys, args...).Int64Slice()
	if err != nil {
		return ratelimit.Verdict{}, err
	}
	if len(res) > 1 && res[0] == 1 {
		return ratelimit.Verdict{OK: true, At: time.UnixMilli(res[1])}, nil
	}
	if len(res) < 3 || res[2] < 1 || int(res[2]) > len(limits) {
		return ratelimit.Verdict{}, fmt.Errorf("the spend script answered %v", res)
	}
	return ratelimit.Verdict{Wait: time.Duration(res[1]) * time.Millisecond, Empty: limits[res[2]-1]}, nil
}

// Refund gives back n tokens a Spend of limits took at spent (its Verdict.At, Redis's
// clock) for an action that was then refused; see ratelimit.Limiter. One script: each
// bucket is decided in the same step as every replica's spends from it.
func (l *Limiter) Refund(ctx context.Context, account string, n int, spent time.Time, limits ...ratelimit.Limit) error {
	if len(limits) == 0 || spent.IsZero() {
		return nil
	}
	keys, args, err := bucketArgs(account, limits, n, spent.UnixMilli())
	if err != nil {
		return err
	}
	return refundScript.Run(ctx, l.s.rdb, keys, args...).Err()
}

// bucketArgs are the KEYS and ARGV of a spend or a refund of n tokens from limits:
// first n and then lead, then each bucket's count and period in milliseconds.
func bucketArgs(account string, limits []ratelimit.Limit, n int, lead ...any) ([]string, []any, error) {
	keys := make([]string, len(limits))
	args := append([]any{n}, lead...)
	for i, lim := range limits {
		if lim.Rate.Count < 1 || lim.Rate.Per <= 0 {
			return nil, nil, fmt.Errorf("limit %s: a rate of %d per %s", lim.Key, lim.Rate.Count, lim.Rate.Per)
		}
		keys[i] = bucketKey(account, lim.Key)
		args = append(args, lim.Rate.Count, max(lim.Rate.Per.Milliseconds(), 1))
	}
	return keys, args, nil
}
