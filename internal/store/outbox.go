package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// OperatorEvent is the body of destination.disabled as the scripts write it to the
// account's outbox and the platform's mailer receives it.
type OperatorEvent struct {
	ID          string    `json:"id"` // stable for this one event: the mailer dedups on it
	Type        string    `json:"type"`
	Destination string    `json:"destination"`
	Account     string    `json:"account"`
	Connector   string    `json:"connector"`
	At          time.Time `json:"at"` // when the destination was disabled
	Reason      string    `json:"reason"`
	LastFailure *Failure  `json:"last_failure"` // the card's: null when it has none
	// On destination.failing: the rejections in a row so far and how many more disable
	// the destination.
	ConsecutiveFailures int `json:"consecutive_failures,omitempty"`
	RejectionsLeft      int `json:"rejections_left,omitempty"`
}

// OutboxEntry is one operator event waiting in an account's outbox.
type OutboxEntry struct {
	StreamID string // the entry's id in the outbox stream, for AckOutbox
	ID       string // the event's own id: the AMQP message-id the mailer dedups on
	Type     string // the routing key
	Body     []byte
}

// outboxGroup is the consumer group every replica's drainer reads the outboxes through.
const outboxGroup = "relay"

// newNoticeID returns a fresh operator event id. It is random, not derived from what
// Redis holds, so a rebuilt Redis never issues an id the mailer has already seen.
func newNoticeID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // crypto/rand.Read does not fail on Linux
	return "opev_" + hex.EncodeToString(b)
}

var takeOutboxScript = redis.NewScript(`
local key, group, me = KEYS[1], ARGV[1], ARGV[2]
local stale, n = tonumber(ARGV[3]), tonumber(ARGV[4])
if redis.call('EXISTS', key) == 0 then return {} end
redis.pcall('XGROUP', 'CREATE', key, group, '0') -- BUSYGROUP when it exists: fine
local ids = {}
for _, p in ipairs(redis.call('XPENDING', key, group, '-', '+', n)) do
  if p[2] == me or p[3] >= stale then table.insert(ids, p[1]) end
end
local out = {}
if #ids > 0 then
  -- Claimed by me with its idle time reset: no other drainer takes it while I publish.
  for _, e in ipairs(redis.call('XCLAIM', key, group, me, 0, unpack(ids))) do
    if e then table.insert(out, e) end
  end
end
if #out < n then
  local fresh = redis.call('XREADGROUP', 'GROUP', group, me, 'COUNT', n - #out, 'STREAMS', key, '>')
  if fresh then
    for _, e in ipairs(fresh[1][2]) do table.insert(out, e) end
  end
end
-- Consumers that hold nothing and were not seen for stale ms are gone replicas'.
-- Removing one is harmless: a consumer is created again by its next read.
for _, c in ipairs(redis.call('XINFO', 'CONSUMERS', key, group)) do
  local f = {}
  for i = 1, #c, 2 do f[c[i]] = c[i + 1] end
  if f.name ~= me and f.pending == 0 and f.idle >= stale then
    redis.call('XGROUP', 'DELCONSUMER', key, group, f.name)
  end
end
return out
`)

// TakeOutbox claims up to n entries of acct's outbox for consumer, in one script: the
// ones it already holds (a publish that failed), the ones another consumer has held
// for stale or longer (a replica that died mid-publish), then ones no one has read.
// Each is held by consumer from then on, so another drainer takes it only once it has
// been left for stale: while held, nobody else publishes it.
func (s *Store) TakeOutbox(ctx context.Context, acct, consumer string, stale time.Duration, n int) ([]OutboxEntry, error) {
	res, err := takeOutboxScript.Run(ctx, s.rdb, []string{outboxKey(acct)},
		outboxGroup, consumer, stale.Milliseconds(), n).Slice()
	if err != nil {
		return nil, err
	}
	out := make([]OutboxEntry, 0, len(res))
	for _, r := range res {
		e, ok := r.([]any)
		if !ok || len(e) != 2 {
			return nil, fmt.Errorf("outbox of %s: unexpected entry %v", acct, r)
		}
		entry := OutboxEntry{StreamID: str(e[0])}
		fields, _ := e[1].([]any)
		for i := 0; i+1 < len(fields); i += 2 {
			switch v := str(fields[i+1]); str(fields[i]) {
			case "id":
				entry.ID = v
			case "type":
				entry.Type = v
			case "body":
				entry.Body = []byte(v)
			}
		}
		out = append(out, entry)
	}
	return out, nil
}

// AckOutbox removes an entry the broker has confirmed.
func (s *Store) AckOutbox(ctx context.Context, acct, streamID string) error {
	key := outboxKey(acct)
	pipe := s.rdb.TxPipeline()
	pipe.XAck(ctx, key, outboxGroup, streamID)
	pipe.XDel(ctx, key, streamID)
	_, err := pipe.Exec(ctx)
	return err
}

// Outbox lists the entries waiting in acct's outbox, held by a drainer or not, oldest first.
func (s *Store) Outbox(ctx context.Context, acct string) ([]OutboxEntry, error) {
	msgs, err := s.rdb.XRange(ctx, outboxKey(acct), "-", "+").Result()
	if err != nil {
		return nil, err
	}
	out := make([]OutboxEntry, len(msgs))
	for i, m := range msgs {
		out[i] = OutboxEntry{StreamID: m.ID, ID: str(m.Values["id"]), Type: str(m.Values["type"]),
			Body: []byte(str(m.Values["body"]))}
	}
	return out, nil
}

// OutboxLens returns how many entries wait in each account's outbox, in one round trip.
func (s *Store) OutboxLens(ctx context.Context, accts []string) ([]int64, error) {
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.IntCmd, len(accts))
	for i, a := range accts {
		cmds[i] = pipe.XLen(ctx, outboxKey(a))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	out := make([]int64, len(accts))
	for i, c := range cmds {
		out[i] = c.Val()
	}
	return out, nil
}

var leaveOutboxScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local ok, held = pcall(redis.call, 'XPENDING', KEYS[1], ARGV[1], '-', '+', 1, ARGV[2])
if not ok or #held > 0 then return 0 end
return redis.pcall('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], ARGV[2])
`)

// LeaveOutbox removes consumer from acct's outbox group when it holds no entry (a
// replica that stops). One that still holds some keeps them, for another to take over.
func (s *Store) LeaveOutbox(ctx context.Context, acct, consumer string) error {
	return leaveOutboxScript.Run(ctx, s.rdb, []string{outboxKey(acct)}, outboxGroup, consumer).Err()
}
