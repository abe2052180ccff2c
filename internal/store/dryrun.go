package store

import (
	"context"
	"strconv"

	"github.com/mercamap/relay/internal/destination"
	"github.com/redis/go-redis/v9"
)

// ReplayCount is what a replay from a point would send, counted without sending.
type ReplayCount struct {
	// Target is the log id delivery would restart after ("0-0": the log's start);
	// Cursor is the destination's cursor now. A replay never moves the cursor forward,
	// so the count starts after the earlier of the two (Start).
	Target, Cursor, Start string
	// Known is false when the ordinal index cannot tell (an upgraded log, see
	// LagReading.Known): Events is then 0.
	Known bool
	// Events are the log's entries after Start, up to its last (before the
	// destination's event filter, as the card's lag); First and Last their log ids.
	Events      int64
	First, Last string
	Status      string // the destination's: a replay of one not active waits for its activation
}

// replayCountScript finds the replay's target as replayScript does (from the ordinal
// index, KEYS[3], or the log, KEYS[1], for a point older than the index) and counts the
// entries after it from positions, as lagScript does: a few reads of single entries,
// whatever the size of the log. KEYS[2] is the position hash, KEYS[4] the destination.
var replayCountScript = redis.NewScript(luaPrelude + `
local from_ms, after_id = ARGV[1], ARGV[2]
local h = redis.call('HMGET', KEYS[4], 'status', 'cursor')
if not h[1] then return redis.error_reply('UNKNOWN destination has no stored state') end
local target
if from_ms ~= '' then
  local before = '(' .. from_ms .. '-0'
  local prev = redis.call('XREVRANGE', KEYS[3], before, '-', 'COUNT', 1)[1] or
    redis.call('XREVRANGE', KEYS[1], before, '-', 'COUNT', 1)[1]
  target = prev and prev[1] or '0-0'
else
  target = after_id
end
local cursor = h[2] or '0-0'
local start = target
if h[1] == 'active' and id_after(target, cursor) then start = cursor end
local len, indexed = redis.call('XLEN', KEYS[1]), redis.call('XLEN', KEYS[3])
local head = tonumber(redis.call('HGET', KEYS[2], 'n') or '0')
local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)[1]
last = last and last[1] or ''
if len > indexed then
  local first = redis.call('XRANGE', KEYS[3], '-', '+', 'COUNT', 1)[1]
  first = first and first[1] or '+'
  if first == '+' or id_after(first, start) then
    return {target, cursor, start, 0, 0, '', last, h[1]}
  end
end
local nxt, n = redis.call('XRANGE', KEYS[3], '(' .. start, '+', 'COUNT', 1)[1], 0
if nxt then n = math.max(math.min(head - tonumber(nxt[2][2]) + 1, len), 1) end
if n == 0 then last = '' end
return {target, cursor, start, 1, n, nxt and nxt[1] or '', last, h[1]}
`)

// CountReplay counts what Replay with r would send, changing nothing: the same checks
// (ErrTooOld, ErrNoSuchEvent), then one script of O(1) reads.
func (s *Store) CountReplay(ctx context.Context, r Replay) (ReplayCount, error) {
	p := r.Point
	var fromMS, afterID string
	switch {
	case p.AfterEvent != "":
		id, err := s.findEvent(ctx, r.Account, p.AfterEvent)
		if err != nil {
			return ReplayCount{}, err
		}
		if EntryTime(id).Before(r.Oldest) {
			return ReplayCount{}, ErrTooOld{Oldest: r.Oldest}
		}
		afterID = id
	case p.From.Before(r.Oldest):
		return ReplayCount{}, ErrTooOld{Oldest: r.Oldest}
	default:
		fromMS = strconv.FormatInt(p.From.UnixMilli(), 10)
	}
	keys := []string{logKey(r.Account), posKey(r.Account), ordKey(r.Account), destKey(r.Account, r.ID)}
	res, err := replayCountScript.Run(ctx, s.rdb, keys, fromMS, afterID).Slice()
	switch {
	case redis.HasErrorPrefix(err, "UNKNOWN"):
		return ReplayCount{}, destination.ErrNotFound
	case err != nil:
		return ReplayCount{}, err
	}
	return ReplayCount{Target: toStr(res[0]), Cursor: toStr(res[1]), Start: toStr(res[2]), Known: toInt(res[3]) == 1,
		Events: toInt(res[4]), First: toStr(res[5]), Last: toStr(res[6]), Status: toStr(res[7])}, nil
}
