package store

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// LagProbe asks where one destination stands in its account's log. Since is the cursor
// the caller saw last time ("" for a first look): the script counts the entries between
// it and the current cursor, so a caller can keep a destination's backlog up to date
// without counting the whole backlog again.
type LagProbe struct {
	ID    string
	Since string
}

// LagReading is what the lag script read for one destination, all in one script call.
type LagReading struct {
	Found               bool   // false: the destination has no stored state
	Cursor              string // log id of the last event that ended at the destination
	Status              string
	ConsecutiveFailures int
	Next                string // log id of the oldest entry after the cursor; "" when none
	// Count is, with Since set, the entries in (Since, Cursor]; with Since empty, the
	// entries after Cursor. Both are counted up to the script's cap.
	Count int64
}

// LogHead is an account log's size and the number of entries ever appended to it
// (Redis's entries-added, which trimming does not lower).
type LogHead struct {
	Length, Added int64
}

// lagScript reads one account's log head and, for each destination (KEYS[2..]), its
// cursor, status, failures, the oldest entry after the cursor, and a count of entries
// (see LagReading.Count), in chunks of 500 up to ARGV[1]. All keys share the account's
// hash tag. Only numbers and ids travel back.
var lagScript = redis.NewScript(`
local log, cap = KEYS[1], tonumber(ARGV[1])
local len, added = 0, 0
if redis.call('EXISTS', log) == 1 then
  local info = redis.call('XINFO', 'STREAM', log)
  for i = 1, #info, 2 do
    if info[i] == 'length' then len = info[i + 1] end
    if info[i] == 'entries-added' then added = info[i + 1] end
  end
end
local function count(from, to)
  local n, start = 0, '(' .. from
  while n < cap do
    local batch = redis.call('XRANGE', log, start, to, 'COUNT', math.min(500, cap - n))
    if #batch == 0 then break end
    n = n + #batch
    start = '(' .. batch[#batch][1]
  end
  return n
end
local out = {len, added}
for i = 2, #KEYS do
  local h = redis.call('HMGET', KEYS[i], 'cursor', 'status', 'consecutive_failures')
  if not h[1] then
    out[#out + 1] = {}
  else
    local nxt = redis.call('XRANGE', log, '(' .. h[1], '+', 'COUNT', 1)[1]
    local since, n = ARGV[i], 0
    if since == '' then
      if nxt then n = count(h[1], '+') end
    elseif since ~= h[1] then
      n = count(since, h[1])
    end
    out[#out + 1] = {h[1], h[2] or '', h[3] or '0', nxt and nxt[1] or '', n}
  end
end
return out
`)

// LagCmd is one account's queued lag script; read it after the pipeline ran.
type LagCmd struct{ cmd *redis.Cmd }

// QueueLag queues the lag script for one account's destinations on pipe (one script per
// account, so each touches one cluster slot). Counting stops at limit entries.
func (s *Store) QueueLag(ctx context.Context, pipe redis.Pipeliner, acct string, probes []LagProbe, limit int64) LagCmd {
	keys := make([]string, 0, len(probes)+1)
	args := make([]any, 0, len(probes)+1)
	keys = append(keys, logKey(acct))
	args = append(args, limit)
	for _, p := range probes {
		keys = append(keys, destKey(acct, p.ID))
		args = append(args, p.Since)
	}
	return LagCmd{lagScript.EvalSha(ctx, pipe, keys, args...)}
}

// Pipeline returns a pipeline on the store's client, for QueueLag.
func (s *Store) Pipeline() redis.Pipeliner { return s.rdb.Pipeline() }

// LoadLagScript makes sure Redis has the lag script, so pipelined EVALSHA calls find it.
func (s *Store) LoadLagScript(ctx context.Context) error {
	return lagScript.Load(ctx, s.rdb).Err()
}

// Result decodes the script's answer: the log head and one reading per probe, in order.
func (c LagCmd) Result() (LogHead, []LagReading, error) {
	v, err := c.cmd.Slice()
	if err != nil {
		return LogHead{}, nil, err
	}
	if len(v) < 2 {
		return LogHead{}, nil, fmt.Errorf("lag script: %d values", len(v))
	}
	head := LogHead{Length: toInt(v[0]), Added: toInt(v[1])}
	out := make([]LagReading, 0, len(v)-2)
	for _, r := range v[2:] {
		f, _ := r.([]any)
		if len(f) < 5 {
			out = append(out, LagReading{})
			continue
		}
		out = append(out, LagReading{Found: true, Cursor: toStr(f[0]), Status: toStr(f[1]),
			ConsecutiveFailures: int(toInt(f[2])), Next: toStr(f[3]), Count: toInt(f[4])})
	}
	return head, out, nil
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

// DestinationLag reads one destination's position (for its card): the oldest entry after
// its cursor and the entries after it, counted up to limit.
func (s *Store) DestinationLag(ctx context.Context, r Ref, limit int64) (LagReading, error) {
	_, readings, err := LagCmd{lagScript.Run(ctx, s.rdb, []string{logKey(r.Account), destKey(r.Account, r.ID)}, limit, "")}.Result()
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
