package store

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// LagReading is where one destination stands in its account's log, all read in one
// script call from positions (lagScript): never by counting log entries.
type LagReading struct {
	Found               bool   // false: the destination has no stored state
	Cursor              string // log id of the last event that ended at the destination
	Status              string
	ConsecutiveFailures int
	// Known is false when the backlog cannot be read from positions: the cursor is
	// before the ordinal index's first entry and the log still holds entries stored
	// before the index began (an upgraded log, until those age out, or until the
	// destination delivers one newer event). Events and Next are then 0, "".
	Known  bool
	Next   string // log id of the oldest entry after the cursor; "" when none
	Events int64  // entries of the log after the cursor (before the event filter)
	// DisabledBy, for a disabled destination, is who disabled it: DisabledByOperator or
	// DisabledByRejections (as the card's disabled.by); "" otherwise.
	DisabledBy string
}

// luaLag reads lag readings from positions (see gateSource): lag_base reads, once per
// account, the log's and the ordinal index's lengths, the head ordinal (the position
// hash's n) and, when the log also holds entries older than the index, the index's first
// id ('+': the index is empty); lag_reading reads one destination's cursor, status and
// failures (and, when disabled, who disabled it: disabled_by) and the first index entry
// after its cursor: its id is the oldest undelivered entry (the millisecond part: when
// Redis stored it) and its ordinal k puts the backlog at head − k + 1, clamped to the
// log's length. A destination costs one HMGET and one XRANGE … COUNT 1 of an index
// entry, whatever its backlog; only ids and numbers travel back. It needs luaPrelude
// (id_after, disabled_by) before it; lagScript and readCardScript share it.
const luaLag = `
local function lag_base(logkey, poskey, ordkey)
  local base = {len = redis.call('XLEN', logkey), indexed = redis.call('XLEN', ordkey), ord = ordkey,
    head = tonumber(redis.call('HGET', poskey, 'n') or '0')}
  if base.len > base.indexed then
    local first = redis.call('XRANGE', ordkey, '-', '+', 'COUNT', 1)[1]
    base.first = first and first[1] or '+'
  end
  return base
end

-- lag_reading is {cursor, status, failures, known (1/0), next id, events, disabled by},
-- or {} for a destination with no cursor (LagCmd.Result decodes it).
local function lag_reading(base, destkey)
  local h = redis.call('HMGET', destkey, 'cursor', 'status', 'consecutive_failures')
  if not h[1] then return {} end
  local by = ''
  if h[2] == 'disabled' then by = disabled_by(destkey) end
  if base.first and (base.first == '+' or id_after(base.first, h[1])) then
    -- Entries older than the index may wait after the cursor: not to be counted.
    return {h[1], h[2] or '', h[3] or '0', 0, '', 0, by}
  end
  local nxt, n = redis.call('XRANGE', base.ord, '(' .. h[1], '+', 'COUNT', 1)[1], 0
  if nxt then n = math.max(math.min(base.head - tonumber(nxt[2][2]) + 1, base.len), 1) end
  return {h[1], h[2] or '', h[3] or '0', 1, nxt and nxt[1] or '', n, by}
end
`

// lagScript reads the lag of each destination of one account (KEYS[4..]): KEYS[1..3]
// are the log, the position hash and the index; all keys share the account's hash tag.
var lagScript = redis.NewScript(luaPrelude + luaLag + `
local base = lag_base(KEYS[1], KEYS[2], KEYS[3])
local out = {}
for i = 4, #KEYS do out[#out + 1] = lag_reading(base, KEYS[i]) end
return out
`)

// LagCmd is one account's queued lag script; read it after the pipeline ran.
type LagCmd struct{ cmd *redis.Cmd }

// QueueLag queues the lag script for one account's destinations (ids) on pipe: one
// script per account, so each touches one cluster slot.
func (s *Store) QueueLag(ctx context.Context, pipe redis.Pipeliner, acct string, ids []string) LagCmd {
	return LagCmd{lagScript.EvalSha(ctx, pipe, lagKeys(acct, ids))}
}

func lagKeys(acct string, ids []string) []string {
	keys := make([]string, 0, len(ids)+3)
	keys = append(keys, logKey(acct), posKey(acct), ordKey(acct))
	for _, id := range ids {
		keys = append(keys, destKey(acct, id))
	}
	return keys
}

// Pipeline returns a pipeline on the store's client, for QueueLag.
func (s *Store) Pipeline() redis.Pipeliner { return s.rdb.Pipeline() }

// LoadLagScript makes sure Redis has the lag script, so pipelined EVALSHA calls find it.
func (s *Store) LoadLagScript(ctx context.Context) error {
	return lagScript.Load(ctx, s.rdb).Err()
}

// Result decodes the script's answer: one reading per destination, in order.
func (c LagCmd) Result() ([]LagReading, error) {
	v, err := c.cmd.Slice()
	if err != nil {
		return nil, err
	}
	out := make([]LagReading, 0, len(v))
	for _, r := range v {
		out = append(out, lagReadingOf(r))
	}
	return out, nil
}

// lagReadingOf decodes one of lag_reading's answers.
func lagReadingOf(v any) LagReading {
	f, _ := v.([]any)
	if len(f) < 6 {
		return LagReading{}
	}
	rd := LagReading{Found: true, Cursor: toStr(f[0]), Status: toStr(f[1]),
		ConsecutiveFailures: int(toInt(f[2])), Known: toInt(f[3]) == 1, Next: toStr(f[4]), Events: toInt(f[5])}
	if len(f) > 6 {
		rd.DisabledBy = toStr(f[6])
	}
	return rd
}

func toStr(v any) string {
	s, _ := v.(string)
	return s
}

func toInt(v any) int64 {
	switch v := v.(type) {
	case int64:
		return v
	case string:
		n, _ := strconv.ParseInt(v, 10, 64)
		return n
	}
	return 0
}

// IDTime is the time in a log id ("<ms>-<seq>"): when Redis stored the entry.
func IDTime(id string) time.Time {
	ms, _, _ := strings.Cut(id, "-")
	n, err := strconv.ParseInt(ms, 10, 64)
	if err != nil {
		return time.Time{}
	}
	return time.UnixMilli(n).UTC()
}
