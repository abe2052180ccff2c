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
local uuid_form = '^fetcher%.job%.(%l+)%.(' .. string.rep(hx, 8) .. '%-' .. string.rep(hx, 4) .. '%-' ..
  string.rep(hx, 4) .. '%-' .. string.rep(hx, 4) .. '%-' .. string.rep(hx, 12) .. ')$'
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

-- emit appends one event to a channel with the next gap-free sequence, keeping about
-- chan_max events; after its type and time come its fields (data, or a pointer's). Every
-- 32nd event it also trims the channel of events older than cutoff (ms): bounded work,
-- off the common path. Either trim drops the oldest only, so what stays is gap-free and
-- a reader's cursor before it is expired (ReadChannel).
local function emit(stream, seqkey, etype, now_ms, cutoff, ...)
  local seq = redis.call('INCR', seqkey)
  xadd_kept(stream, chan_max, seq .. '-0', 'type', etype, 'at', now_ms, ...)
  if seq % 32 ~= 0 then return seq end
  local first = redis.call('XRANGE', stream, '-', '+', 'COUNT', 1)[1]
  if first and tonumber(first[2][4]) < cutoff then
    local old = redis.call('XRANGE', stream, '-', '+', 'COUNT', 256)
    local keep = nil
    for _, e in ipairs(old) do
      if tonumber(e[2][4]) >= cutoff then keep = e[1]; break end
    end
    if not keep then keep = (tonumber(string.match(old[#old][1], '^(%d+)')) + 1) .. '-0' end
    redis.call('XTRIM', stream, 'MINID', keep)
  end
  return seq
end

-- emit_both appends a happening to the destination's channel and a pointer to it to the
-- account's channel: the destination's id and the event's sequence there (ReadChannel
-- serves the event it points at), so the account channel holds no second copy. KEYS[1]
-- is the destination hash, KEYS[2..5] the two channels and their counters. The event
-- carries state: a table, or JSON (state_json), or when nil the card's
-- state as stored.
local function emit_both(etype, now_ms, cutoff, fields, state)
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

-- emit_outcome appends a delivery's outcome to the destination's channel in a short
-- form: after its type and time, the fields its data is built from (outcomeData in
-- channel.go: e the event id and x the sentence in the attempt line's short forms
-- (short_event_id, short_message), m the bus's message id, t a test, f the
-- count of failures in a row and g the failing warning, those two only when they
-- changed); and a pointer to it to the account's channel, as emit_both does.
local function emit_outcome(etype, now_ms, cutoff, dest_id, ...)
  local seq = emit(KEYS[2], KEYS[3], etype, now_ms, cutoff, ...)
  emit(KEYS[4], KEYS[5], etype, now_ms, cutoff, 'd', dest_id, 's', seq)
  return seq
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
-- state changed (ControlKinds): it bumps the hash's control version (ctlv, which the
-- lease renewal returns: a holder that missed the stream entry learns it there) and
-- appends to the account's control stream ctlkey, which the holder's log follower reads
-- with the log. ack names a key the asker waits on for the holder's answer ('' none);
-- lease is the lease as stored now ("owner|token", '' none). KEYS[1] is the hash.
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
