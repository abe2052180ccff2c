package store

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/mercamap/relay/internal/destination"
	"github.com/redis/go-redis/v9"
)

// A retry writes one ended message again, outside the ordered stream: the API queues
// it (AskRetry) in the destination's list relay:{acct}:retries:<id>, and the lease
// holder's worker takes it between ordered deliveries (NextRetry), writes it and
// records the outcome (RetryDone). A retry never moves the cursor and never changes the
// count of rejections in a row, the last failure or the last delivery: those are the
// ordered stream's.

func retriesKey(acct, id string) string { return "relay:{" + acct + "}:retries:" + id }

// MaxQueuedRetries bounds a destination's queue of retries not yet carried out.
const MaxQueuedRetries = 100

// RetryRequest is one retry asked for and not yet carried out.
type RetryRequest struct {
	Attempt int64  `json:"attempt"`  // the attempt-log line that recorded the request
	RetryOf int64  `json:"retry_of"` // the attempt whose message is written again
	LogID   string `json:"log_id"`   // the event's entry in the account's log
	EventID string `json:"event_id"`
}

// Errors of AskRetry.
var (
	ErrNoSuchAttempt  = errors.New("the destination's attempt log holds no such attempt")
	ErrRetryQueueFull = errors.New("too many retries are waiting for this destination")
	ErrEventGone      = errors.New("the account's log no longer holds the attempt's event")
)

// ErrNotRetryable is returned for an attempt that did not end a message of the log:
// the reason says what it was.
type ErrNotRetryable struct{ Reason string }

func (e ErrNotRetryable) Error() string { return e.Reason }

// ErrNotActive is returned for a retry asked of a destination that is not active.
type ErrNotActive struct{ Status string }

func (e ErrNotActive) Error() string { return "the destination is " + e.Status + ", not active" }

// logTimeMargin is how far past an attempt's time (the relay's clock) its event's log
// id (Redis's clock) is looked for: the clocks of two machines disagree a little.
const logTimeMargin = time.Minute

var askRetryScript = redis.NewScript(luaPrelude + `
local now_ms, retry_of, log_id, event_id, most = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4], tonumber(ARGV[5])
local status = redis.call('HGET', KEYS[1], 'status')
if not status then return redis.error_reply('UNKNOWN destination has no stored state') end
if status ~= 'active' then return redis.error_reply('NOTACTIVE ' .. status) end
if redis.call('LLEN', KEYS[3]) >= most then return redis.error_reply('FULL retry queue full') end
local n = redis.call('HINCRBY', KEYS[1], 'attempts', 1)
add_attempt(KEYS[2], n, now_ms, event_id, 'retry_queued',
  'retry of attempt ' .. retry_of .. ' asked for', 'retry_of', retry_of)
redis.call('RPUSH', KEYS[3], cjson.encode({attempt = n, retry_of = retry_of, log_id = log_id, event_id = event_id}))
redis.call('HINCRBY', KEYS[1], 'retries_queued', 1)
control(KEYS[4], ARGV[6], 'retry', '')
return n
`)

// AskRetry queues the message of attempt n of a destination's attempt log to be
// written again by the destination's lease holder. The attempt must have ended a
// message (delivered, rejected or expired) whose event the account's log still holds,
// and the destination must be active (ErrNotActive). The request is a line
// ("retry_queued") in the attempt log; the returned request names it.
func (s *Store) AskRetry(ctx context.Context, r Ref, n int64) (RetryRequest, error) {
	ns := strconv.FormatInt(n, 10) + "-0"
	msgs, err := s.rdb.XRange(ctx, attemptsKey(r.Account, r.ID), ns, ns).Result()
	if err != nil {
		return RetryRequest{}, err
	}
	if len(msgs) == 0 {
		return RetryRequest{}, ErrNoSuchAttempt
	}
	line := attemptOf(msgs[0])
	eventID, outcome, at := line.EventID, line.Outcome, line.At.UnixMilli()
	switch {
	case strings.HasPrefix(eventID, "relay.test."):
		return RetryRequest{}, ErrNotRetryable{"attempt " + strconv.FormatInt(n, 10) + " wrote a test event, which is not kept: send a new test"}
	case outcome == KindNotTaken:
		return RetryRequest{}, ErrNotRetryable{"attempt " + strconv.FormatInt(n, 10) + " was not taken: the relay tries that message again on its own until it ends; retry the attempt that ended it"}
	case outcome != KindDelivered && outcome != KindRejected && outcome != KindExpired:
		return RetryRequest{}, ErrNotRetryable{"attempt " + strconv.FormatInt(n, 10) + " is a " + outcome + " line, not a message"}
	}
	logID, err := s.findEventFrom(ctx, r.Account, eventID, strconv.FormatInt(at+logTimeMargin.Milliseconds(), 10))
	if errors.Is(err, ErrNoSuchEvent) {
		return RetryRequest{}, ErrEventGone
	}
	if err != nil {
		return RetryRequest{}, err
	}
	keys := []string{destKey(r.Account, r.ID), attemptsKey(r.Account, r.ID), retriesKey(r.Account, r.ID), ctlKey(r.Account)}
	a, err := askRetryScript.Run(ctx, s.rdb, keys, time.Now().UnixMilli(), n, logID, eventID, MaxQueuedRetries, r.ID, s.boundsArg()).Int64()
	switch {
	case redis.HasErrorPrefix(err, "UNKNOWN"):
		return RetryRequest{}, destination.ErrNotFound
	case redis.HasErrorPrefix(err, "NOTACTIVE"):
		return RetryRequest{}, ErrNotActive{Status: strings.TrimPrefix(err.Error(), "NOTACTIVE ")}
	case redis.HasErrorPrefix(err, "FULL"):
		return RetryRequest{}, ErrRetryQueueFull
	case err != nil:
		return RetryRequest{}, err
	}
	return RetryRequest{Attempt: a, RetryOf: n, LogID: logID, EventID: eventID}, nil
}

var nextRetryScript = redis.NewScript(luaPrelude + `
if redis.call('HGET', KEYS[1], 'lease_token') ~= ARGV[1] then
  return redis.error_reply('STALE lease token superseded')
end
if redis.call('HGET', KEYS[1], 'status') ~= 'active' then return false end
local head = redis.call('LINDEX', KEYS[2], 0)
if not head then
  redis.call('HDEL', KEYS[1], 'retries_queued')
  return false
end
return head
`)

// NextRetry returns the oldest retry queued for the destination, if the lease holder
// (token) may write now (its own write fence is dispatch's): nil when none waits or the
// destination is not active. It stays queued until RetryDone, so a holder that dies
// meanwhile leaves it to the next (at least once, like any write).
func (s *Store) NextRetry(ctx context.Context, r Ref, token int64) (*RetryRequest, error) {
	head, err := nextRetryScript.Run(ctx, s.rdb, []string{destKey(r.Account, r.ID), retriesKey(r.Account, r.ID)},
		strconv.FormatInt(token, 10), time.Now().UnixMilli()).Text()
	switch {
	case errors.Is(err, redis.Nil):
		return nil, nil
	case redis.HasErrorPrefix(err, "STALE"):
		return nil, ErrStaleLease
	case err != nil:
		return nil, err
	}
	var req RetryRequest
	if err := json.Unmarshal([]byte(head), &req); err != nil {
		return nil, err
	}
	return &req, nil
}

// RetryDone is the outcome of one retry.
type RetryDone struct {
	Ref
	Token            int64
	Request          RetryRequest
	Kind             string // KindDelivered, KindRejected, KindNotTaken, or KindExpired (the event is gone)
	MessageID        string
	Message          string
	ChannelRetention time.Duration
}

var retryDoneScript = redis.NewScript(luaPrelude + `
local token, now_ms, cutoff, dest_id = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local attempt, retry_of, log_id, event_id = tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[7], ARGV[8]
local kind, message_id, message = ARGV[9], ARGV[10], ARGV[11]
if redis.call('HGET', KEYS[1], 'lease_token') ~= token then
  return redis.error_reply('STALE lease token superseded')
end
local head = redis.call('LINDEX', KEYS[6], 0)
if head and cjson.decode(head).attempt == attempt then
  redis.call('LPOP', KEYS[6])
  if redis.call('HINCRBY', KEYS[1], 'retries_queued', -1) <= 0 then redis.call('HDEL', KEYS[1], 'retries_queued') end
end
local text = 'retry of attempt ' .. retry_of .. ': ' .. message
local n = redis.call('HINCRBY', KEYS[1], 'attempts', 1)
add_attempt(KEYS[7], n, now_ms, event_id, kind, text,
  'retry_of', retry_of, 'retry', attempt)
return {n, emit_both('delivery.retried', now_ms, cutoff, {destination = dest_id, event_id = event_id,
  message_id = message_id, class = kind, message = text, attempt = n, retry_of = retry_of, retry = attempt})}
`)

// RetryDone records a retry's outcome, in one step: it leaves the queue, its write mark
// is cleared, a line in the attempt log (its own number, retry_of the attempt retried,
// retry the request's line) and delivery.retried on the destination's channels. The
// card's state is left as it was. ErrStaleLease when token is no longer the lease's:
// nothing is written, and the next holder carries the retry out again.
func (s *Store) RetryDone(ctx context.Context, d RetryDone) (attempt int64, err error) {
	now := time.Now()
	q := d.Request
	keys := append(d.Ref.chanKeys(), retriesKey(d.Account, d.ID), attemptsKey(d.Account, d.ID))
	res, err := retryDoneScript.Run(ctx, s.rdb, keys, strconv.FormatInt(d.Token, 10), now.UnixMilli(),
		now.Add(-d.ChannelRetention).UnixMilli(), d.ID, q.Attempt, q.RetryOf, q.LogID, q.EventID,
		d.Kind, d.MessageID, boundText(d.Message), s.boundsArg()).Int64Slice()
	switch {
	case redis.HasErrorPrefix(err, "STALE"):
		return 0, ErrStaleLease
	case err != nil:
		return 0, err
	}
	return res[0], nil
}

// LogEntryAt reads one entry of an account's log by its id; ErrNoSuchEvent when the
// log no longer holds it.
func (s *Store) LogEntryAt(ctx context.Context, acct, id string) (LogEntry, error) {
	msgs, err := s.rdb.XRange(ctx, logKey(acct), id, id).Result()
	if err != nil {
		return LogEntry{}, err
	}
	if len(msgs) == 0 {
		return LogEntry{}, ErrNoSuchEvent
	}
	es, err := logEntries(msgs)
	if err != nil {
		return LogEntry{}, err
	}
	return es[0], nil
}
