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

// lagScript reads, for each destination of one account (KEYS[4..]), its cursor, status
// and failures (and, when disabled, who disabled it: disabled_by), and from the ordinal index (see gateSource) the first index entry after
// the cursor: its id is the oldest undelivered entry (the millisecond part: when Redis
// stored it) and its ordinal k puts the backlog at head − k + 1, head being the
// position hash's n, clamped to the log's length. KEYS[1..3] are the log, the position
// hash and the index; all keys share the account's hash tag. Each destination costs one
// HMGET and one XRANGE … COUNT 1 of an index entry, whatever its backlog; only ids and
// numbers travel back.
var lagScript = redis.NewScript(luaPrelude + `
local len, indexed = redis.call('XLEN', KEYS[1]), redis.call('XLEN', KEYS[3])
local head = tonumber(redis.call('HGET', KEYS[2], 'n') or '0')
-- first: the oldest index entry when the log also holds entries older than the index.
local first
if len > indexed then
  first = redis.call('XRANGE', KEYS[3], '-', '+', 'COUNT', 1)[1]
  first = first and first[1] or '+'
end
local out = {}
for i = 4, #KEYS do
  local h = redis.call('HMGET', KEYS[i], 'cursor', 'status', 'consecutive_failures')
  local by = ''
  if h[2] == 'disabled' then by = disabled_by(KEYS[i]) end
  if not h[1] then
    out[#out + 1] = {}
  elseif first and (first == '+' or id_after(first, h[1])) then
    -- Entries older than the index may wait after the cursor: not to be counted.
    out[#out + 1] = {h[1], h[2] or '', h[3] or '0', 0, '', 0, by}
  else
    local nxt, n = redis.call('XRANGE', KEYS[3], '(' .. h[1], '+', 'COUNT', 1)[1], 0
    if nxt then n = math.max(math.min(head - tonumber(nxt[2][2]) + 1, len), 1) end
    out[#out + 1] = {h[1], h[2] or '', h[3] or '0', 1, nxt and nxt[1] or '', n, by}
  end
end
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
		f, _ := r.([]any)
		if len(f) < 6 {
			out = append(out, LagReading{})
			continue
		}
		rd := LagReading{Found: true, Cursor: toStr(f[0]), Status: toStr(f[1]),
			ConsecutiveFailures: int(toInt(f[2])), Known: toInt(f[3]) == 1, Next: toStr(f[4]), Events: toInt(f[5])}
		if len(f) > 6 {
			rd.DisabledBy = toStr(f[6])
		}
		out = append(out, rd)
	}
	return out, nil
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

// DestinationLag reads one destination's position (for its card), like the sampler.
func (s *Store) DestinationLag(ctx context.Context, r Ref) (LagReading, error) {
	readings, err := LagCmd{lagScript.Run(ctx, s.rdb, lagKeys(r.Account, []string{r.ID}))}.Result()
	if err != nil {
		return LagReading{}, err
	}
	if len(readings) != 1 || !readings[0].Found {
		return LagReading{}, ErrUnknownDestination
	}
	return readings[0], nil
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
