package store

import (
	"context"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// trimScript drops from an account's log (and its ordinal index) the entries older
// than a replay window that every destination has passed: KEYS are the log, the index,
// the account's trim mark and the destinations' hashes; ARGV the oldest time the window
// keeps (ms) and how long the mark stands (ms). A destination with no cursor holds
// everything. The mark makes one replica's trim stand for all of them for a while:
// the others answer -1 at once. It answers the entries dropped, 0 when nothing was old
// enough. Both are trimmed exactly, so the index holds the log's entries.
var trimScript = redis.NewScript(luaPrelude + `
if not redis.call('SET', KEYS[3], '1', 'NX', 'PX', ARGV[2]) then return -1 end
local first = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', 1)[1]
local keep = ARGV[1] .. '-0'
if not first or not id_after(keep, first[1]) then return 0 end
for i = 4, #KEYS do
  local c = redis.call('HGET', KEYS[i], 'cursor')
  if not c or c == '0-0' then return 0 end
  -- the cursor is the last entry delivered: everything after it stays
  local m, q = string.match(c, '^(%d+)-(%d+)$')
  local next = m .. '-' .. (tonumber(q) + 1)
  if id_after(keep, next) then keep = next end
end
local before = redis.call('XLEN', KEYS[1])
redis.call('XTRIM', KEYS[1], 'MINID', keep)
redis.call('XTRIM', KEYS[2], 'MINID', keep)
return before - redis.call('XLEN', KEYS[1])
`)

// trimKey marks the account's log as trimmed by some replica until it expires: the
// others' trims do nothing meanwhile.
func trimKey(acct string) string { return "relay:{" + acct + "}:trim" }

// TrimLog drops from acct's log the entries older than window that every one of the
// account's destinations (ids) has delivered: the log keeps the replay window, and
// beyond it only what some destination still has to deliver. Replicas share the work:
// the first to trim an account holds it for every (the others' calls do nothing until
// then). It returns the entries dropped.
func (s *Store) TrimLog(ctx context.Context, acct string, ids []string, window, every time.Duration) (int64, error) {
	keys := make([]string, 0, 3+len(ids))
	keys = append(keys, logKey(acct), ordKey(acct), trimKey(acct))
	for _, id := range ids {
		keys = append(keys, destKey(acct, id))
	}
	n, err := trimScript.Run(ctx, s.rdb, keys, strconv.FormatInt(s.clock().Add(-window).UnixMilli(), 10), every.Milliseconds()).Int64()
	return max(n, 0), err
}
