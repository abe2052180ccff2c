package store

import (
	"context"
	"crypto/sha256"
	"time"

	"github.com/redis/go-redis/v9"
)

// An account's dedup markers live in time buckets of small hashes, not in a key per
// event (a key with a TTL costs Redis about 168 B; a marker here about 35 B):
//
//   - A bucket opens when the newest is a quarter of the dedup window old (at least a
//     minute); it is dropped once the bucket after it is a window old, for then all its
//     markers are, and its keys expire on their own a window after their last marker.
//   - A bucket's markers are spread over shards, hashes small enough for Redis to keep
//     as listpacks (dedupPerShard on average, Redis's default bound 512): a marker's
//     shard is its fingerprint's first four bytes modulo the level's shard count. A
//     bucket opens with as many shards as the bucket before it needed; when they are
//     full it adds a level of four times as many, so a rate that grows costs a lookup
//     more, never a listpack turned into a hash table.
//   - A marker is the event's fingerprint (fingerprint: 96 bits of SHA-256 of its
//     ce-id) and, once the event is in the log, its log id: a replay after an event
//     finds it with a few HGETs.
//
// The account's dedup hash (dedupKey) says which buckets live ("live": their starts in
// ms, oldest first), each bucket's levels ("<start>": the shard counts, "1,4,16"), and
// how many markers the newest level holds ("<start>:n"). "legacy_until" is when markers
// of the form before (seenKey) have all expired: until then a lookup also reads the
// event's old key. Every call takes the time from its caller (the transaction's), so
// all the calls of one append see the same buckets. What a fingerprint collision does
// and how likely it is: docs/design.md, "Dedup".
const dedupLua = `
local dedup_per_shard, dedup_grow, dedup_max_shards = 256, 4, 4194304

-- dedup_read is the account's buckets as dd holds them: {dd, window, now, legacy,
-- n, buckets = {{start, levels = {shard counts}}, oldest first}}; legacy is nil when
-- the buckets have never been used for the account.
local function dedup_read(dd, window, now)
  local all = redis.call('HGETALL', dd) -- a few fields: one read, not two
  local h = {}
  for i = 1, #all, 2 do h[all[i]] = all[i + 1] end
  local b = {dd = dd, window = window, now = now, legacy = tonumber(h['legacy_until']), n = 0, buckets = {}}
  local newest
  for start in string.gmatch(h['live'] or '', '%d+') do
    local levels = {}
    for size in string.gmatch(h[start] or '1', '%d+') do levels[#levels + 1] = tonumber(size) end
    b.buckets[#b.buckets + 1] = {start = start, levels = levels}
    newest = start
  end
  if newest then b.n = tonumber(h[newest .. ':n']) or 0 end
  return b
end

local function dedup_shard(b, bucket, level, fp)
  return b.dd .. ':' .. bucket.start .. ':' .. level .. ':' .. ((struct.unpack('>I4', fp)) % bucket.levels[level])
end

-- dedup_open is dedup_read, then the buckets made current for now: those wholly older
-- than the window dropped, a new one opened when the newest is a bucket length old.
-- now_s is now as the caller wrote it (a bucket's start, in the keys).
local function dedup_open(dd, window, now_s)
  local now = tonumber(now_s)
  local b = dedup_read(dd, window, now)
  local changed = false
  if not b.legacy then
    b.legacy = now + window
    redis.call('HSET', dd, 'legacy_until', b.legacy)
  end
  while #b.buckets > 1 and tonumber(b.buckets[2].start) + window < now do
    local gone = table.remove(b.buckets, 1)
    redis.call('HDEL', dd, gone.start, gone.start .. ':n')
    changed = true
  end
  local cur = b.buckets[#b.buckets]
  if not cur or now >= tonumber(cur.start) + math.max(math.floor(window / 4), 60000) then
    local held = b.n
    if cur then
      for i = 1, #cur.levels - 1 do held = held + cur.levels[i] * dedup_per_shard end
      redis.call('HDEL', dd, cur.start .. ':n')
    end
    local size = 1
    while size * dedup_per_shard < held and size < dedup_max_shards do size = size * 2 end
    b.buckets[#b.buckets + 1] = {start = now_s, levels = {size}}
    b.n = 0
    redis.call('HSET', dd, now_s, size, now_s .. ':n', 0)
    changed = true
  end
  if changed then
    local starts = {}
    for i, bucket in ipairs(b.buckets) do starts[i] = bucket.start end
    redis.call('HSET', dd, 'live', table.concat(starts, ' '))
    redis.call('PEXPIRE', dd, 2 * window + 120000)
  end
  return b
end

-- dedup_find is the shard holding fp's marker and the marker's value (nil when no live
-- marker has it), newest first; until legacy_until, legacy (the event's key of the form
-- before, when given) is looked at last.
local function dedup_find(b, fp, legacy)
  for i = #b.buckets, 1, -1 do
    local bucket = b.buckets[i]
    for level = #bucket.levels, 1, -1 do
      local key = dedup_shard(b, bucket, level, fp)
      local v = redis.call('HGET', key, fp)
      if v then return key, v end
    end
  end
  if legacy and (not b.legacy or b.now < b.legacy) then
    local v = redis.call('GET', legacy)
    if v then return legacy, v end
  end
  return nil, nil
end

-- dedup_add stores a marker for fp in the newest bucket (dedup_open made one), adding a
-- level first when the newest is full: the event's log id v, or pending ("n") when v
-- is nil.
local function dedup_add(b, fp, v)
  local cur = b.buckets[#b.buckets]
  local size = cur.levels[#cur.levels]
  if b.n >= size * dedup_per_shard then
    cur.levels[#cur.levels + 1] = math.min(size * dedup_grow, dedup_max_shards)
    b.n = 0
    redis.call('HSET', b.dd, cur.start, table.concat(cur.levels, ','), cur.start .. ':n', 0)
  end
  local key = dedup_shard(b, cur, #cur.levels, fp)
  redis.call('HSET', key, fp, v or 'n')
  redis.call('PEXPIRE', key, b.window + 60000)
  redis.call('HINCRBY', b.dd, cur.start .. ':n', 1)
  b.n = b.n + 1
end

-- dedup_settle writes the log id into the pending marker of fp that dedup_add stored in
-- this transaction (nil: the event was not stored after all, the marker goes).
local function dedup_settle(b, fp, id)
  local cur = b.buckets[#b.buckets]
  local key = dedup_shard(b, cur, #cur.levels, fp)
  if id then redis.call('HSET', key, fp, id) else redis.call('HDEL', key, fp) end
end
`

// dedupKey is the account's dedup hash; its shards are keys under the same name.
func dedupKey(acct string) string { return "relay:{" + acct + "}:dd" }

// fingerprint is what a dedup marker keeps of a ce-id: 96 bits of its SHA-256.
func fingerprint(ceID string) string {
	sum := sha256.Sum256([]byte(ceID))
	return string(sum[:12])
}

// markerScript is the log id a ce-id's marker holds: KEYS the account's dedup hash and
// the event's key of the form before; ARGV now (ms) and the fingerprint. It answers
// false when no marker holds an id.
var markerScript = redis.NewScript(dedupLua + `
local b = dedup_read(KEYS[1], 0, tonumber(ARGV[1]))
local _, v = dedup_find(b, ARGV[2], KEYS[2])
if v == 'n' then return false end
return v
`)

// marker is the value of ceID's dedup marker in acct ("" none): a log id, or "1" for a
// marker stored before markers held one.
func (s *Store) marker(ctx context.Context, acct, ceID string) (string, error) {
	v, err := markerScript.Run(ctx, s.rdb, []string{dedupKey(acct), seenKey(acct, ceID)},
		s.clock().UnixMilli(), fingerprint(ceID)).Text()
	if err == redis.Nil {
		return "", nil
	}
	return v, err
}

// clock is the time the store writes with: time.Now unless a test moved it.
func (s *Store) clock() time.Time {
	if s.now != nil {
		return s.now()
	}
	return time.Now()
}
