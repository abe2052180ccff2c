package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"
)

// Outcome kinds a commit records.
const (
	KindDelivered = "delivered"
	KindRejected  = "rejected"
	KindNotTaken  = "not_taken"
	KindExpired   = "expired" // the message outlived its age limit: ends, not counted
	KindSkip      = "skip"    // filtered out: only the cursor moves
)

// Commit is the outcome of one attempt at one destination.
type Commit struct {
	Ref
	Token     int64  // the lease's fencing token; 0 for a test send (no lease, no cursor)
	Kind      string // one of the Kind constants
	Cursor    string // log id the message ends at ("" leaves the cursor: not taken, test)
	EventID   string
	MessageID string
	Message   string // the sentence the card shows
	Test      bool   // a send-a-test attempt
	// Wrote is the log id whose write (begun with BeginWrite) this commit ends: its
	// in-flight mark is cleared. "" for a commit that ends no write.
	Wrote string
	// Epoch is State.Epoch as the worker read it ("": not checked). Under another (a
	// replay or an activation moved the cursor since), the commit moves no cursor.
	Epoch string
	// Next is the log id whose write the worker starts after this commit ("" none): the
	// commit then also runs BeginWrite's fence for it, in the same script, after the
	// commit's own changes (a commit that disables the destination refuses it), and
	// Committed.Began says what it answered.
	Next string

	DisableAfter int
	// WarnAfter are the counts of rejections in a row at which destination.failing goes
	// to the outbox, each once per run of failures (config delivery.warn_after).
	WarnAfter         []int
	ChannelRetention  time.Duration
	AttemptsRetention time.Duration
}

// Committed is what a commit left behind.
type Committed struct {
	Status   string // the destination's status after the commit
	Disabled bool   // this commit disabled the destination (the count reached DisableAfter)
	Sequence int64  // the destination channel's sequence after the commit
	Cursor   string // the stored cursor after the commit: past this message when an
	// activation skipped the events that arrived while the destination was stopped
	Warned bool // this commit wrote destination.failing to the outbox
	// Began is the write fence's answer for Commit.Next, as BeginWrite's: "ok" (the
	// write may start; it is marked in flight), "paused", "disabled", "moved",
	// "skipped"; "" when the commit named no Next.
	Began string
}

// Failing is what a card shows once the rejections in a row reached a warning
// threshold: the count and how many more disable the destination (null after a
// delivery or an activation).
type Failing struct {
	At                  time.Time `json:"at"`
	ConsecutiveFailures int       `json:"consecutive_failures"`
	RejectionsLeft      int       `json:"rejections_left"`
	Message             string    `json:"message"` // the last failure in words
}

// MaxFailureText is the most bytes of a failure sentence or a disable reason the store
// keeps. The card carries them, and so does each of the destination's channel events,
// which goes out live only while it is under the broadcast limit (64 KiB by default): a
// bus's 70 KB error must not turn every later event into a pointer.
const MaxFailureText = 2048

// boundText is s cut to at most MaxFailureText bytes, on a character boundary, ending
// in "…" when it was cut: the head, which names the code, is what a reader needs.
func boundText(s string) string {
	if len(s) <= MaxFailureText {
		return s
	}
	cut := MaxFailureText - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// ErrStaleLease is returned when the commit's fencing token is no longer the
// destination's: another replica holds the lease now.
var ErrStaleLease = errors.New("lease token superseded: another replica delivers for this destination")

var commitScript = redis.NewScript(luaPrelude + `
local token, kind, cursor = ARGV[1], ARGV[2], ARGV[3]
local event_id, message_id, message = ARGV[4], ARGV[5], ARGV[6]
local now_ms, iso = tonumber(ARGV[7]), ARGV[8]
local disable_after, cutoff, attempts_cutoff = tonumber(ARGV[9]), tonumber(ARGV[10]), tonumber(ARGV[11])
local dest_id, is_test = ARGV[12], ARGV[13] == '1'
local acct, connector, notice_id, wrote = ARGV[14], ARGV[15], ARGV[16], ARGV[17]
local epoch, warn_after, next_entry = ARGV[18], ARGV[19], ARGV[20]
-- One read of the hash, and its changes gathered in set / del, written by apply().
local h = redis.call('HMGET', KEYS[1], 'lease_token', 'writing', 'status', 'epoch', 'cursor', 'consecutive_failures',
  'last_failure', 'last_delivery', 'disabled', 'failing', 'pending', 'attempts')
if token ~= '0' and h[1] ~= token then
  return redis.error_reply('STALE lease token superseded')
end
local status = h[3]
if not status then return redis.error_reply('UNKNOWN destination has no stored state') end
local stored_cursor, last_failure, last_delivery, disabled_json, failing, pending = h[5], h[7], h[8], h[9], h[10], h[11]
local set, del = {}, {}
local function apply()
  if #set > 0 then redis.call('HSET', KEYS[1], unpack(set)); set = {} end
  if #del > 0 then redis.call('HDEL', KEYS[1], unpack(del)); del = {} end
end
local function put(field, value) set[#set + 1] = field; set[#set + 1] = value end
-- This write ended; a later write's mark (begun before this commit ran) stays.
if wrote ~= '' and h[2] and string.sub(h[2], 1, #wrote + 1) == wrote .. '|' then del[#del + 1] = 'writing' end
local same_epoch = epoch == '' or (h[4] or '0') == epoch
if cursor ~= '' and same_epoch and id_after(cursor, stored_cursor or '0-0') then
  stored_cursor = cursor
  put('cursor', cursor)
end
-- The next write's fence, once this commit's changes are written.
local function begin_next()
  apply()
  if next_entry == '' then return '' end
  return begin_write(next_entry, now_ms, epoch)
end
if kind == 'skip' then
  local began = begin_next()
  return {status, 0, tonumber(redis.call('GET', KEYS[3]) or '0'), stored_cursor, 0, began}
end
local failures = tonumber(h[6] or '0')
local etype
local fields = {destination = dest_id, event_id = event_id, message_id = message_id, message = message, test = is_test}
if kind == 'delivered' then
  failures = 0
  failing = false -- the run of failures ends
  del[#del + 1] = 'failing'
  last_delivery = cjson.encode({at = iso, event_id = event_id})
  put('last_delivery', last_delivery)
  etype = 'delivery.succeeded'
elseif kind == 'rejected' then
  -- While paused or disabled nothing counts (a write in flight when it happened).
  if status == 'active' or is_test then failures = failures + 1 end
  last_failure = cjson.encode({at = iso, event_id = event_id, class = 'rejected', message = message})
  put('last_failure', last_failure)
  etype = 'delivery.rejected'
elseif kind == 'not_taken' then
  last_failure = cjson.encode({at = iso, event_id = event_id, class = 'not_taken', message = message})
  put('last_failure', last_failure)
  etype = 'delivery.not_taken'
else
  etype = 'message.expired'
end
fields.class = kind
` + MinuteCountLua /* the chart's per-minute count (minutes.go): one line, carry it into the new engine */ + `
put('consecutive_failures', failures)
-- A warning threshold reached: destination.failing, once per threshold per run of
-- failures (a delivery or an activation ends the run; the count only climbs by one).
local warned = 0
if kind == 'rejected' and status == 'active' and failures < disable_after then
  for t in string.gmatch(warn_after, '%d+') do
    if tonumber(t) == failures then
      local f = {at = iso, consecutive_failures = failures, rejections_left = disable_after - failures, message = message}
      failing = cjson.encode(f)
      put('failing', failing)
      local body = cjson.encode({id = notice_id, type = 'destination.failing', destination = dest_id, account = acct,
        connector = connector, at = iso, reason = failures .. ' rejected attempts in a row; ' .. f.rejections_left ..
        ' more disable the destination; last: ' .. message, consecutive_failures = failures,
        rejections_left = f.rejections_left, last_failure = dec(last_failure)})
      redis.call('XADD', KEYS[7], '*', 'id', notice_id, 'type', 'destination.failing', 'body', body)
      warned = 1
    end
  end
end
-- The attempt log: kept longer than channel events, for the card's attempts page.
local n = tonumber(h[12] or '0') + 1
put('attempts', n)
add_attempt(KEYS[6], n, 'at', now_ms, 'event_id', event_id, 'outcome', kind, 'message', message)
local first = nil
if n % 32 == 0 then first = redis.call('XRANGE', KEYS[6], '-', '+', 'COUNT', 1)[1] end
if first and tonumber(first[2][2]) < attempts_cutoff then
  local old = redis.call('XRANGE', KEYS[6], '-', '+', 'COUNT', 256)
  -- Trim only what was scanned: entries past the 256th may still be within retention.
  local keep = (tonumber(string.match(old[#old][1], '^(%d+)')) + 1) .. '-0'
  for _, e in ipairs(old) do
    if tonumber(e[2][2]) >= attempts_cutoff then keep = e[1]; break end
  end
  redis.call('XTRIM', KEYS[6], 'MINID', keep)
end
local seq = emit_both(etype, now_ms, cutoff, fields,
  state_of(status, failures, last_failure, last_delivery, disabled_json, failing, pending))
local disabled = 0
if kind == 'rejected' and failures >= disable_after and status == 'active' then
  local reason = 'disabled after ' .. failures .. ' rejected attempts in a row; last: ' .. message
  status, disabled_json, failing = 'disabled', cjson.encode({at = iso, reason = reason, by = 'rejections'}), false
  put('status', status)
  put('disabled', disabled_json)
  del[#del + 1] = 'failing'
  apply() -- announce_disabled reads the card's last failure
  announce_disabled(KEYS[7], notice_id, acct, dest_id, connector, iso, reason)
  disabled = 1
  seq = emit_both('destination.disabled', now_ms, cutoff, {destination = dest_id, reason = reason},
    state_of(status, failures, last_failure, last_delivery, disabled_json, failing, pending))
end
local began = begin_next()
return {status, disabled, seq, stored_cursor, warned, began}
`)

// Commit records one attempt atomically: the cursor, the count, the last failure or
// delivery, the attempt log and the channel events, and, when it disables the
// destination, destination.disabled in the account's outbox — or nothing, when the lease
// token is stale (ErrStaleLease). Commits of other destinations made at the same moment
// share its round trip to Redis (group.go).
func (s *Store) Commit(ctx context.Context, c Commit) (Committed, error) {
	now := time.Now()
	keys := append(c.Ref.chanKeys(), attemptsKey(c.Account, c.ID), outboxKey(c.Account))
	test := "0"
	if c.Test {
		test = "1"
	}
	noticeID := "" // only a rejection can disable
	if c.Kind == KindRejected {
		noticeID = newNoticeID()
	}
	reply, err := s.commits.run(ctx, s, commitScript, &scriptCall{keys: keys, args: []any{
		strconv.FormatInt(c.Token, 10), c.Kind, c.Cursor, c.EventID, c.MessageID, boundText(c.Message),
		now.UnixMilli(), now.UTC().Format(time.RFC3339Nano), c.DisableAfter,
		now.Add(-c.ChannelRetention).UnixMilli(), now.Add(-c.AttemptsRetention).UnixMilli(), c.ID, test,
		c.Account, c.Connector, noticeID, c.Wrote, c.Epoch, joinInts(c.WarnAfter), c.Next, s.boundsArg(),
	}})
	res, _ := reply.([]any)
	switch {
	case redis.HasErrorPrefix(err, "STALE"):
		return Committed{}, ErrStaleLease
	case redis.HasErrorPrefix(err, "UNKNOWN"):
		return Committed{}, ErrUnknownDestination
	case err != nil:
		return Committed{}, err
	case len(res) < 6:
		return Committed{}, fmt.Errorf("commit: unexpected answer %v", reply)
	}
	status, _ := res[0].(string)
	disabled, _ := res[1].(int64)
	seq, _ := res[2].(int64)
	cursor, _ := res[3].(string)
	warned, _ := res[4].(int64)
	began, _ := res[5].(string)
	return Committed{Status: status, Disabled: disabled == 1, Sequence: seq, Cursor: cursor, Warned: warned == 1, Began: began}, nil
}

func joinInts(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}
