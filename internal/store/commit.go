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

	"github.com/mercamap/relay/internal/destination"
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
	// Epoch is State.Epoch as the worker read it ("": not checked). Under another (a
	// replay or an activation moved the cursor since), the commit moves no cursor.
	Epoch string
	// Done is, from state format 2 on, what ended past Cursor (EncodeDone): written with
	// the cursor, so a replica that takes over sends again only what was unfinished.
	// "" under format 1, whose readers know only the cursor: nothing is written then.
	Done string

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

// commitOne is the commit of one outcome, a Lua function over KEYS and ARGV (see
// Store.Commit for what they hold): it returns the Committed fields, or 'STALE' (the
// lease token is another's) or 'UNKNOWN' (no stored state).
const commitOne = `
local function commit_one()
  local token, kind, cursor = ARGV[1], ARGV[2], ARGV[3]
  local event_id, message_id, message = ARGV[4], ARGV[5], ARGV[6]
  local now_ms, iso = tonumber(ARGV[7]), ARGV[8]
  local disable_after, cutoff, attempts_cutoff = tonumber(ARGV[9]), tonumber(ARGV[10]), tonumber(ARGV[11])
  local dest_id, is_test = ARGV[12], ARGV[13] == '1'
  local acct, connector, notice_id = ARGV[14], ARGV[15], ARGV[16]
  local epoch, warn_after, done = ARGV[17], ARGV[18], ARGV[19]
  -- One read of the hash, and its changes gathered in set / del, written by apply().
  local h = redis.call('HMGET', KEYS[1], 'lease_token', 'status', 'epoch', 'cursor', 'consecutive_failures',
    'last_failure', 'last_delivery', 'disabled', 'failing', 'pending', 'attempts', 'chart_minute', 'run', 'arun')
  if token ~= '0' and h[1] ~= token then return 'STALE' end
  local status = h[2]
  if not status then return 'UNKNOWN' end
  local stored_cursor, last_failure, last_delivery, disabled_json, failing, pending = h[4], h[6], h[7], h[8], h[9], h[10]
  local set, del = {}, {}
  local function apply()
    if #set > 0 then redis.call('HSET', KEYS[1], unpack(set)); set = {} end
    if #del > 0 then redis.call('HDEL', KEYS[1], unpack(del)); del = {} end
  end
  local function put(field, value) set[#set + 1] = field; set[#set + 1] = value end
  local same_epoch = epoch == '' or (h[3] or '0') == epoch
  if cursor ~= '' and same_epoch and id_after(cursor, stored_cursor or '0-0') then
    stored_cursor = cursor
    put('cursor', cursor)
  end
  -- State format 2: what ended past the cursor, named with the cursor it counts from
  -- (a cursor moved by hand leaves it unread). Commits of one holder come in order, so
  -- the last one at the stored cursor says the most.
  if done ~= '' and same_epoch and cursor == stored_cursor then
    put('done', done)
  end
  if kind == 'skip' then
    apply()
    return {status, 0, tonumber(redis.call('GET', KEYS[3]) or '0'), stored_cursor, 0}
  end
  local failures = tonumber(h[5] or '0')
  local was_failures, was_failing = failures, failing
  if kind == 'delivered' then
    -- A write in flight when the destination stopped may land after it: the count the
    -- card shows for a disable stays (an activation resets it).
    if status == 'active' or is_test then
      failures = 0
      if failing then del[#del + 1] = 'failing' end -- the run of failures ends
      failing = false
    end
    last_delivery = cjson.encode({at = iso, event_id = event_id})
    put('last_delivery', last_delivery)
  elseif kind == 'rejected' then
    -- While paused or disabled nothing counts (a write in flight when it happened).
    if status == 'active' or is_test then failures = failures + 1 end
    last_failure = cjson.encode({at = iso, event_id = event_id, class = 'rejected', message = message})
    put('last_failure', last_failure)
  elseif kind == 'not_taken' then
    last_failure = cjson.encode({at = iso, event_id = event_id, class = 'not_taken', message = message})
    put('last_failure', last_failure)
  end
  local chart_minute = h[12]
` + MinuteCountLua /* the chart's per-minute count (minutes.go) */ + `
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
  -- The line also holds what the outcome's channel event says (emit_outcome): the bus's
  -- message id (m, always there, so lines share their field names), a test (t), and the
  -- count of failures in a row (f) and the failing warning (g) when they changed.
  local n = tonumber(h[11] or '0') + 1
  put('attempts', n)
  local more = {'m', short_id(message_id)}
  if is_test then more[#more + 1] = 't'; more[#more + 1] = '1' end
  if failures ~= was_failures then more[#more + 1] = 'f'; more[#more + 1] = failures end
  if failing ~= was_failing then more[#more + 1] = 'g'; more[#more + 1] = failing or '' end
  add_attempt(KEYS[6], n, now_ms, event_id, kind, message, unpack(more))
  if n % 32 == 0 then
    trim_old(KEYS[6], function(e) return tonumber(e[2][2]) < attempts_cutoff end)
  end
  local seq, run = emit_outcome(now_ms, cutoff, dest_id, n, h[13], h[14])
  put('run', run)
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
      state_json(status, failures, last_failure, last_delivery, disabled_json, failing, pending))
  end
  apply()
  return {status, disabled, seq, stored_cursor, warned}
end
`

var commitScript = redis.NewScript(luaPrelude + commitOne + `
local r = commit_one()
flush_account()
if r == 'STALE' then return redis.error_reply('STALE lease token superseded') end
if r == 'UNKNOWN' then return redis.error_reply('UNKNOWN destination has no stored state') end
return r
`)

// commitKeys and commitArgs are how many keys and arguments one commit takes (the
// bounds argument, last, apart).
const commitKeys, commitArgs = 7, 19

// commitBatchScript runs several commits of one account in one call: KEYS and ARGV are
// theirs one after the other (commitKeys and commitArgs each), then the bounds. Each
// commit sees the ones before it applied; each answers as commitScript would, or
// {'STALE'} / {'UNKNOWN'}.
var commitBatchScript = redis.NewScript(`
local KEYS_IN, ARGV_IN = KEYS, ARGV
local KEYS, ARGV = {}, {ARGV_IN[#ARGV_IN]}
` + luaPrelude + commitOne + `
local out = {}
for i = 0, (#ARGV_IN - 1) / 19 - 1 do
  for k = 1, 7 do KEYS[k] = KEYS_IN[i * 7 + k] end
  for a = 1, 19 do ARGV[a] = ARGV_IN[i * 19 + a] end
  ARGV[20] = ARGV_IN[#ARGV_IN]
  local r = commit_one()
  if type(r) == 'string' then r = {r} end
  out[#out + 1] = r
end
flush_account()
return out
`)

// Commit records one attempt atomically: the cursor, the count, the last failure or
// delivery, the attempt log and the channel events, and, when it disables the
// destination, destination.disabled in the account's outbox — or nothing, when the lease
// token is stale (ErrStaleLease). Commits of other destinations made at the same moment
// share its round trip to Redis (group.go).
func (s *Store) Commit(ctx context.Context, c Commit) (Committed, error) {
	keys, args := s.commitCall(c, time.Now())
	reply, err := s.commits.run(ctx, s, commitScript, &scriptCall{keys: keys, args: append(args, s.boundsArg())})
	switch {
	case redis.HasErrorPrefix(err, "STALE"):
		return Committed{}, ErrStaleLease
	case redis.HasErrorPrefix(err, "UNKNOWN"):
		return Committed{}, destination.ErrNotFound
	case err != nil:
		return Committed{}, err
	}
	return committedFrom(reply)
}

// CommitBatch records the outcomes of cs, all of one account, in one script call, in
// order: the group commit of the delivery engine (dispatch's committer). Each answer is
// Commit's, with its error (ErrStaleLease, destination.ErrNotFound) in errs; err is for
// the call as a whole (Redis unreachable: none was recorded).
func (s *Store) CommitBatch(ctx context.Context, cs []Commit) (res []Committed, errs []error, err error) {
	now := time.Now()
	keys := make([]string, 0, commitKeys*len(cs))
	args := make([]any, 0, commitArgs*len(cs)+1)
	for _, c := range cs {
		k, a := s.commitCall(c, now)
		keys, args = append(keys, k...), append(args, a...)
	}
	reply, err := commitBatchScript.Run(ctx, s.rdb, keys, append(args, s.boundsArg())...).Slice()
	if err != nil {
		return nil, nil, err
	}
	if len(reply) != len(cs) {
		return nil, nil, fmt.Errorf("commit batch: %d answers for %d commits", len(reply), len(cs))
	}
	res, errs = make([]Committed, len(cs)), make([]error, len(cs))
	for i, r := range reply {
		if one, ok := r.([]any); ok && len(one) == 1 {
			switch one[0] {
			case "STALE":
				errs[i] = ErrStaleLease
			default:
				errs[i] = destination.ErrNotFound
			}
			continue
		}
		res[i], errs[i] = committedFrom(r)
	}
	return res, errs, nil
}

// commitCall is the keys and arguments (without the bounds) of one commit.
func (s *Store) commitCall(c Commit, now time.Time) ([]string, []any) {
	// In whole ms: the channel keeps the time once, in ms, and builds the card's times
	// from it (outcomeData), so they must be the same.
	now = now.Truncate(time.Millisecond)
	keys := append(c.Ref.chanKeys(), attemptsKey(c.Account, c.ID), outboxKey(c.Account))
	test := "0"
	if c.Test {
		test = "1"
	}
	noticeID := "" // only a rejection can disable
	if c.Kind == KindRejected {
		noticeID = newNoticeID()
	}
	// The relay's own message id for the event is derived again when it is read (lua.go,
	// short_id): '=' stands for it; one that only looks like '=' is kept marked.
	messageID := c.MessageID
	switch messageID {
	case destination.MessageID(c.ID, c.EventID):
		messageID = "="
	case "=":
		messageID = "\x04="
	}
	return keys, []any{
		strconv.FormatInt(c.Token, 10), c.Kind, c.Cursor, c.EventID, messageID, boundText(c.Message),
		now.UnixMilli(), now.UTC().Format(time.RFC3339Nano), c.DisableAfter,
		now.Add(-c.ChannelRetention).UnixMilli(), now.Add(-c.AttemptsRetention).UnixMilli(), c.ID, test,
		c.Account, c.Connector, noticeID, c.Epoch, joinInts(c.WarnAfter), c.Done,
	}
}

func committedFrom(reply any) (Committed, error) {
	res, _ := reply.([]any)
	if len(res) < 5 {
		return Committed{}, fmt.Errorf("commit: unexpected answer %v", reply)
	}
	status, _ := res[0].(string)
	disabled, _ := res[1].(int64)
	seq, _ := res[2].(int64)
	cursor, _ := res[3].(string)
	warned, _ := res[4].(int64)
	return Committed{Status: status, Disabled: disabled == 1, Sequence: seq, Cursor: cursor, Warned: warned == 1}, nil
}

func joinInts(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}
