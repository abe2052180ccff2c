package store

// luaPrelude holds the helpers every state-changing script shares. Each script that
// changes a destination appends its channel events in the same call, so a channel never
// shows a change that did not happen, nor misses one that did.
const luaPrelude = `
-- The count bounds (Store.Bounds): the last argument of a script that appends to a
-- channel or an attempt log is 'bounds:<channel events>:<attempt lines>'. Without it
-- nothing is trimmed by count.
local chan_max, attempts_max = 0, 0
do
  local c, a = string.match(ARGV[#ARGV] or '', '^bounds:(%d+):(%d+)$')
  if c then chan_max, attempts_max = tonumber(c), tonumber(a) end
end

-- xadd_kept appends an entry with id to stream, keeping about its newest most entries
-- (MAXLEN ~: Redis drops whole nodes, cheap); most 0: no count bound.
local function xadd_kept(stream, most, id, ...)
  if most > 0 then return redis.call('XADD', stream, 'MAXLEN', '~', most, id, ...) end
  return redis.call('XADD', stream, id, ...)
end

-- An attempt line is stored short (attemptline.go reads it back exactly): the outcome
-- as a digit, the message empty when it is the outcome's own word, and a Fetcher ce-id
-- (fetcher.job.<status>.<lowercase uuid>) as a byte for its status and the uuid's 16
-- bytes. About 48 bytes a line instead of 116.
local outcome_code = {delivered = '0', rejected = '1', not_taken = '2', expired = '3', replayed = '4', retry_queued = '5'}
local status_code = {completed = '\1', failed = '\2'}
local hx = '[0-9a-f]'
local uuid_hex = string.rep(hx, 8) .. '%-' .. string.rep(hx, 4) .. '%-' .. string.rep(hx, 4) .. '%-' ..
  string.rep(hx, 4) .. '%-' .. string.rep(hx, 12) -- a lowercase uuid, as a pattern
local uuid_form = '^fetcher%.job%.(%l+)%.(' .. uuid_hex .. ')$'
local function byte_of(h) return string.char(tonumber(h, 16)) end
local function short_event_id(id)
  local status, u = string.match(id, uuid_form)
  if status then
    local raw = string.gsub(string.gsub(u, '%-', ''), '..', byte_of)
    return (status_code[status] or ('\3' .. status)) .. raw
  end
  local b = string.byte(id, 1)
  if b and b <= 4 then return '\4' .. id end -- kept as it is, marked so it reads back so
  return id
end
-- short_id is a message id in its short form (longMessageID reads it back): '=' is the
-- relay's own id for the destination and the event (destination.MessageID: the caller
-- sends '=' for it, and the reader derives it again); a uuid as the byte 1 and its 16
-- bytes, 32 hex digits as 2 and their 16 bytes, decimal digits (Kinesis's sequence
-- numbers, Pub/Sub's ids) as 3 and two to a byte (an odd count ends in the nibble f);
-- an id whose first byte is 4 or below marked by a 4; any other as it is.
local uuid_only = '^' .. uuid_hex .. '$'
local function short_id(id)
  if id == '=' or id == '\4=' then return id end -- the caller marked a plain '=' itself
  if string.match(id, uuid_only) then return '\1' .. string.gsub(string.gsub(id, '%-', ''), '..', byte_of) end
  if #id == 32 and string.match(id, '^' .. hx .. '+$') then return '\2' .. string.gsub(id, '..', byte_of) end
  if #id >= 8 and string.match(id, '^%d+$') then
    if #id % 2 == 1 then id = id .. 'f' end
    return '\3' .. string.gsub(id, '..', byte_of)
  end
  local b = string.byte(id, 1)
  if b and b <= 4 then return '\4' .. id end
  return id
end
local function short_message(outcome, message)
  if message == outcome then return '' end
  if message == '' or string.byte(message, 1) == 0 then return '\0' .. message end
  return message
end

-- add_attempt appends line n to the attempt log key, within the count bound, in its
-- short form; more: further field-value pairs (a retry's retry_of and retry).
local function add_attempt(key, n, at, event_id, outcome, message, ...)
  return xadd_kept(key, attempts_max, n .. '-0', 'at', at, 'event_id', short_event_id(event_id),
    'outcome', outcome_code[outcome] or outcome, 'message', short_message(outcome, message), ...)
end

local function dec(s)
  if s and s ~= '' then return cjson.decode(s) end
  return cjson.null
end

-- state_of is the part of a card a channel event carries (a watcher applies it whole),
-- from the hash's fields as stored: status, consecutive_failures, then the JSON of
-- last_failure, last_delivery, disabled, failing and pending (false: absent).
local function state_of(status, failures, last_failure, last_delivery, disabled, failing, pending)
  return {status = status or 'active', consecutive_failures = tonumber(failures or '0'),
          last_failure = dec(last_failure), last_delivery = dec(last_delivery), disabled = dec(disabled),
          failing = dec(failing), pending = dec(pending)}
end

-- state_json is state_of already encoded, from the stored JSON fields as they are:
-- nothing is decoded and encoded again (the commit's hot path).
local function raw(s)
  if s and s ~= '' then return s end
  return 'null'
end
local function state_json(status, failures, last_failure, last_delivery, disabled, failing, pending)
  return '{"status":' .. cjson.encode(status or 'active') .. ',"consecutive_failures":' .. tonumber(failures or '0') ..
    ',"last_failure":' .. raw(last_failure) .. ',"last_delivery":' .. raw(last_delivery) .. ',"disabled":' ..
    raw(disabled) .. ',"failing":' .. raw(failing) .. ',"pending":' .. raw(pending) .. '}'
end

-- card_state is the card state of the destination hash destkey, as stored now.
local function card_state(destkey)
  local h = redis.call('HMGET', destkey, 'status', 'consecutive_failures', 'last_failure', 'last_delivery', 'disabled', 'failing', 'pending')
  return state_of(h[1], h[2], h[3], h[4], h[5], h[6], h[7])
end

-- trim_old drops from stream its oldest entries for which old(entry) holds, up to the
-- first that does not: it looks only when the first entry is old, and scans at most 256
-- (entries past the 256th may still be kept), so the work is bounded.
local function trim_old(stream, old)
  local first = redis.call('XRANGE', stream, '-', '+', 'COUNT', 1)[1]
  if not first or not old(first) then return end
  local scanned = redis.call('XRANGE', stream, '-', '+', 'COUNT', 256)
  local keep = (tonumber(string.match(scanned[#scanned][1], '^(%d+)')) + 1) .. '-0'
  for _, e in ipairs(scanned) do
    if not old(e) then keep = e[1]; break end
  end
  redis.call('XTRIM', stream, 'MINID', keep)
end

-- run_span is how long after its first event a run may take more (emit_outcome): a
-- sixteenth of the channel's retention (now_ms - cutoff), so that a run older than
-- that beyond the cutoff holds no event retention keeps.
local function run_span(now_ms, cutoff) return math.floor((now_ms - cutoff) / 16) end

-- trim_channel keeps a channel to about its newest chan_max events and drops the
-- events older than cutoff (ms), every 32nd event (seq): bounded work, off the common
-- path. An entry is kept while an event it holds is (a run, emit_outcome, holds every
-- event up to the next entry, for at most run_span), and either trim drops whole
-- entries from the oldest, so what stays is gap-free and a reader's cursor before it
-- is expired (ReadChannel).
local function trim_channel(stream, seq, now_ms, cutoff)
  if seq % 32 ~= 0 then return end
  if chan_max > 0 and seq > chan_max then
    local holder = redis.call('XREVRANGE', stream, (seq - chan_max + 1) .. '-0', '-', 'COUNT', 1)[1]
    if holder then redis.call('XTRIM', stream, 'MINID', '~', holder[1]) end
  end
  local span = run_span(now_ms, cutoff)
  trim_old(stream, function(e)
    local at = tonumber(e[2][4])
    if e[2][2] == 'r' then return at < cutoff - span end
    return at < cutoff
  end)
end

-- emit appends one event to a channel with the next gap-free sequence, within the
-- channel's bounds (trim_channel); after its type and time come its fields (data, or a
-- pointer's).
local function emit(stream, seqkey, etype, now_ms, cutoff, ...)
  local seq = redis.call('INCR', seqkey)
  redis.call('XADD', stream, seq .. '-0', 'type', etype, 'at', now_ms, ...)
  trim_channel(stream, seq, now_ms, cutoff)
  return seq
end

-- emit_both appends a happening to the destination's channel and a pointer to it to the
-- account's channel: the destination's id and the event's sequence there (ReadChannel
-- serves the event it points at), so the account channel holds no second copy. KEYS[1]
-- is the destination hash, KEYS[2..5] the two channels and their counters. The event
-- carries state: a table, or JSON (state_json), or when nil the card's
-- state as stored.
local flush_account -- below: writes the account pointers a commit batch gathered

local function emit_both(etype, now_ms, cutoff, fields, state)
  flush_account()
  local data
  if type(state) == 'string' then
    data = cjson.encode(fields)
    data = string.sub(data, 1, -2) .. ',"state":' .. state .. '}'
  else
    fields.state = state or card_state(KEYS[1])
    data = cjson.encode(fields)
  end
  local seq = emit(KEYS[2], KEYS[3], etype, now_ms, cutoff, 'data', data)
  if type(fields.destination) == 'string' and fields.destination ~= '' then
    emit(KEYS[4], KEYS[5], etype, now_ms, cutoff, 'd', fields.destination, 's', seq)
  else
    emit(KEYS[4], KEYS[5], etype, now_ms, cutoff, 'data', data)
  end
  return seq
end

-- A run's cache is a field of the destination hash, "<next>:<from>:<start>": the run
-- the channel's last entry is goes on with the event numbered next whose other number
-- (attempt line, or destination sequence) is from, and it began at start (ms). It
-- saves reading the channel's last entry on every outcome. It can only be out of date
-- towards "no": every other event of the channel moves its counter past next.
local function run_goes_on(cache, seq, v, since)
  local nx, from, start = string.match(cache or '', '^(%d+):(%d+):(%d+)$')
  return nx ~= nil and tonumber(nx) == seq and tonumber(from) == v and tonumber(start) >= since, start
end

-- emit_outcome records a delivery's outcome on both channels without a copy of it: the
-- attempt line n (add_attempt, written before) holds what the event says, and
-- ReadChannel builds the event from it (outcomeData). The destination's channel holds
-- runs: an entry {type 'r', at, a = n} stands for its own sequence and every one after
-- it up to the next entry, the k-th of them attempt line n + k. A run grows without a
-- write while outcomes follow one another (the common case) for up to run_span; any
-- other event, or an attempt line of no event between, starts a new one. run and arun
-- are the destination's caches of its runs on the two channels (the hash's run and
-- arun fields); it returns the sequence and the new run cache. The account's pointers
-- wait in pending, sequences not yet taken, until the script ends or another account
-- event comes (flush_account).
local pending = {}
local function emit_outcome(now_ms, cutoff, dest_id, n, run, arun)
  local since = now_ms - run_span(now_ms, cutoff)
  local seq = redis.call('INCR', KEYS[3])
  local on, start = run_goes_on(run, seq, n, since)
  if not on then
    redis.call('XADD', KEYS[2], seq .. '-0', 'type', 'r', 'at', now_ms, 'a', n)
    start = now_ms
  end
  trim_channel(KEYS[2], seq, now_ms, cutoff)
  pending[#pending + 1] = {key = KEYS[4], seqkey = KEYS[5], hash = KEYS[1], d = dest_id, s = seq,
    at = now_ms, cutoff = cutoff, since = since, arun = arun}
  return seq, (seq + 1) .. ':' .. (n + 1) .. ':' .. start
end

-- flush_account writes the account pointers pending holds, all one account's, as one
-- entry at the first one's sequence: a run of one destination's events ({type 'r', at,
-- d, s}: it stands for s and the destination's sequences after it, up to the account's
-- next entry), grown without a write when the account's last entry is that
-- destination's run and this continues it (the destination's arun cache says so); or,
-- for several destinations' events, a pack ({type 'p', at, p}: p the pointers
-- "<destination>\0<sequence>" joined by \0, one account sequence each). A pack leaves
-- every cache out of date, which is safe: the account's counter has moved past them.
flush_account = function()
  if #pending == 0 then return end
  -- The account's sequences are taken here, with the entry that holds them: a script
  -- that failed before this leaves neither, never sequences that no entry holds.
  local top = redis.call('INCRBY', pending[1].seqkey, #pending)
  for i, p in ipairs(pending) do p.aseq = top - #pending + i end
  local first, last, one = pending[1], pending[#pending], true
  for i = 2, #pending do
    if pending[i].d ~= first.d or pending[i].s ~= first.s + i - 1 then one = false; break end
  end
  if one then
    local on, start = run_goes_on(first.arun, first.aseq, first.s, first.since)
    if not on then
      redis.call('XADD', first.key, first.aseq .. '-0', 'type', 'r', 'at', first.at, 'd', first.d, 's', first.s)
      start = first.at
    end
    redis.call('HSET', first.hash, 'arun', (last.aseq + 1) .. ':' .. (last.s + 1) .. ':' .. start)
  else
    local parts = {}
    for _, p in ipairs(pending) do parts[#parts + 1] = p.d .. '\0' .. p.s end
    redis.call('XADD', first.key, first.aseq .. '-0', 'type', 'p', 'at', first.at, 'p', table.concat(parts, '\0'))
  end
  for _, p in ipairs(pending) do trim_channel(p.key, p.aseq, p.at, p.cutoff) end
  pending = {}
end

-- announce_disabled appends destination.disabled to the account's outbox, for
-- notify.Drainer to publish: the body the platform's mailer reads (OperatorEvent), with
-- the id it dedups on. KEYS[1] is the destination hash, its last failure the card's.
local function announce_disabled(outbox, id, acct, dest_id, connector, iso, reason)
  local body = cjson.encode({id = id, type = 'destination.disabled', destination = dest_id, account = acct,
    connector = connector, at = iso, reason = reason, last_failure = dec(redis.call('HGET', KEYS[1], 'last_failure'))})
  redis.call('XADD', outbox, '*', 'id', id, 'type', 'destination.disabled', 'body', body)
end

-- disabled_by says who disabled the destination (destkey): 'operator' or 'rejections'.
-- One disabled before the field existed is the rejections' when its reason is theirs.
local function disabled_by(destkey)
  local d = dec(redis.call('HGET', destkey, 'disabled'))
  if d == cjson.null then return '' end
  if type(d.by) == 'string' and d.by ~= '' then return d.by end
  if type(d.reason) == 'string' and string.match(d.reason, '^disabled after %d+ rejected attempts in a row') then
    return 'rejections'
  end
  return 'operator'
end

-- control tells the destination's lease holder, on whichever replica, that its stored
-- state changed (ControlKinds): it bumps the hash's control version (ctlv) and appends
-- to the account's control stream ctlkey, which the holder's log follower reads with
-- the log (a holder that missed the entry learns at its next renewal that the stream
-- moved, and compares ctlv). ack names a key the asker waits on for the holder's answer
-- ('' none). KEYS[1] is the hash.
local function control(ctlkey, dest_id, kind, ack)
  local v = redis.call('HINCRBY', KEYS[1], 'ctlv', 1)
  redis.call('XADD', ctlkey, 'MAXLEN', '~', 1000, '*', 'd', dest_id, 'k', kind, 'v', v, 'a', ack or '')
  return v
end

-- id_after reports whether stream id a comes after b.
local function id_after(a, b)
  local am, as = string.match(a, '^(%d+)-(%d+)$')
  local bm, bs = string.match(b, '^(%d+)-(%d+)$')
  am, as, bm, bs = tonumber(am), tonumber(as), tonumber(bm), tonumber(bs)
  return am > bm or (am == bm and as > bs)
end

-- replay_to points the destination (KEYS[1]) at log id target for a replay, one replay
-- in flight: the hash keeps the running replay's point (replay_point) and the log's last
-- id when it began (replay_end); it runs while the cursor is before that end. A replay
-- asked while one runs replaces it instead of starting over:
--   - target between the running point and the cursor: delivery goes on from the cursor
--     (what lies between was sent again by the running replay; the rest comes in order);
--   - target before the running point: the cursor moves back to it, the end stays;
--   - target past the cursor: what follows it comes anyway; an activation (exact) moves
--     the cursor to it, as it always did, a replay of an active destination does not.
-- With none running it starts one: the cursor moves to target (only back, unless exact).
-- Returns the id delivery goes on after, the replaced replay's point ('' none) and
-- whether the cursor moved (the caller then changes the epoch).
local function replay_to(target, logkey, exact)
  local h = redis.call('HMGET', KEYS[1], 'cursor', 'replay_point', 'replay_end')
  local cursor = h[1] or '0-0'
  if h[2] and h[3] and id_after(h[3], cursor) then
    if not id_after(h[2], target) and not id_after(target, cursor) then return cursor, h[2], false end
    if exact or id_after(cursor, target) then
      redis.call('HSET', KEYS[1], 'cursor', target, 'replay_point', target)
      return target, h[2], true
    end
    return cursor, h[2], false
  end
  local last = redis.call('XREVRANGE', logkey, '+', '-', 'COUNT', 1)[1]
  local head = '0-0'
  if last then head = last[1] end
  if exact or id_after(cursor, target) then redis.call('HSET', KEYS[1], 'cursor', target) end
  redis.call('HSET', KEYS[1], 'replay_point', target, 'replay_end', head)
  return target, '', true
end
`

// luaNow sets now to Redis's clock in milliseconds: every replica's scripts agree on it.
const luaNow = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
`
