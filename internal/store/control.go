package store

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// The control stream. A destination's state lives in Redis, but its lease holder keeps
// what it needs to deliver (status, cursor, epoch, ExternalId) in memory and reads the
// hash only when told it changed. Every script that changes what the holder acts on (a
// status change, a replay, a queued retry, a setup check) appends an entry to the
// account's control stream in the same step (control in luaPrelude); the holder's log
// follower reads it with the log (FollowLogs), so it costs no round trip of its own.
// A status change that must stop writes (a pause, a disable) also names an ack key: the
// holder answers there once no write can start (Ack), and the asker waits (WaitAck).

// ctlKey is the account's control stream; ackKey one status change's answer.
func ctlKey(acct string) string     { return "relay:{" + acct + "}:ctl" }
func ackKey(acct, id string) string { return "relay:{" + acct + "}:ack:" + id }
func isCtlKey(key string) bool      { return strings.HasSuffix(key, "}:ctl") }
func accountOfKey(key string) string {
	return key[strings.IndexByte(key, '{')+1 : strings.IndexByte(key, '}')]
}

// What a control entry says changed (Control.Kind).
const (
	ControlStatus = "status" // paused, disabled, activated: Control.Ack may ask for an answer
	ControlReplay = "replay" // the cursor moved
	ControlRetry  = "retry"  // a retry was queued
	ControlSetup  = "setup"  // a setup check ran elsewhere (it may have activated it)
	ControlCount  = "count"  // a test send changed the count of rejections in a row
)

// Control is one entry of an account's control stream.
type Control struct {
	Account     string
	Destination string
	Kind        string
	Version     int64  // the hash's ctlv after the change
	Ack         string // the ack key's id, "" when no answer is awaited
}

// Notify appends a control entry for a change made outside the scripts that append
// their own (a test send's commit), so the holder reads the state again.
func (s *Store) Notify(ctx context.Context, r Ref, kind string) error {
	return notifyScript.Run(ctx, s.rdb, []string{destKey(r.Account, r.ID), ctlKey(r.Account)}, r.ID, kind).Err()
}

var notifyScript = redis.NewScript(luaPrelude + `
if redis.call('HEXISTS', KEYS[1], 'status') == 0 then return 0 end
return control(KEYS[2], ARGV[1], ARGV[2], '')
`)

// Ack is the lease holder's answer to a status change that named ack: from now on it
// starts no write to the destination; inFlight says whether one it started has not
// ended yet. The answer lives a minute.
func (s *Store) Ack(ctx context.Context, acct, ack string, token int64, inFlight bool) error {
	v := strconv.FormatInt(token, 10) + "|0"
	if inFlight {
		v = strconv.FormatInt(token, 10) + "|1"
	}
	pipe := s.rdb.TxPipeline()
	pipe.RPush(ctx, ackKey(acct, ack), v)
	pipe.PExpire(ctx, ackKey(acct, ack), time.Minute)
	_, err := pipe.Exec(ctx)
	return err
}

// ErrNoAck is returned by WaitAck when no holder answered within the wait.
var ErrNoAck = errors.New("the lease holder did not answer")

// WaitAck waits up to wait for the lease holder's answer to a status change (Ack): the
// holder's lease token and whether a write was in flight.
func (s *Store) WaitAck(ctx context.Context, acct, ack string, wait time.Duration) (token int64, inFlight bool, err error) {
	res, err := s.rdb.BLPop(ctx, wait, ackKey(acct, ack)).Result()
	if errors.Is(err, redis.Nil) {
		return 0, false, ErrNoAck
	}
	if err != nil {
		return 0, false, err
	}
	tok, flag, _ := strings.Cut(res[1], "|")
	token, _ = strconv.ParseInt(tok, 10, 64)
	return token, flag == "1", nil
}

// Followed is what one FollowLogs read brought: new log entries by account, and
// control entries, in stream order.
type Followed struct {
	Entries  map[string][]LogEntry
	Controls []Control
}

// FollowPoint is where a follower of an account stands: the last log and control ids
// it has seen.
type FollowPoint struct {
	Log, Ctl string
	// SkipLog leaves the log out of the next read (its control stream is read): the
	// follower's replica appends to it itself and hands its entries over, so a read of
	// them would only wake the follower for what it has.
	SkipLog bool
}

// Wake appends an entry that names no destination to acct's control stream: a
// follower blocked reading it returns at once, and every follower skips it. Dispatch's
// log watcher wakes its follower so when the accounts it reads change.
func (s *Store) Wake(ctx context.Context, acct string) error {
	return s.rdb.XAdd(ctx, &redis.XAddArgs{Stream: ctlKey(acct), MaxLen: 1000, Approx: true,
		Values: []any{"d", "", "k", "wake", "v", 0, "a", ""}}).Err()
}

// FollowStart is where a follower of acct starts: the end of its log and of its control
// stream.
func (s *Store) FollowStart(ctx context.Context, acct string) (FollowPoint, error) {
	pipe := s.rdb.Pipeline()
	l := pipe.XRevRangeN(ctx, logKey(acct), "+", "-", 1)
	c := pipe.XRevRangeN(ctx, ctlKey(acct), "+", "-", 1)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return FollowPoint{}, err
	}
	p := FollowPoint{Log: "0-0", Ctl: "0-0"}
	if m := l.Val(); len(m) > 0 {
		p.Log = m[0].ID
	}
	if m := c.Val(); len(m) > 0 {
		p.Ctl = m[0].ID
	}
	return p, nil
}

// FollowLogs blocks up to block for new entries in the logs and control streams of the
// given accounts (one group of LogGroups: one slot on Redis Cluster), after the points
// in at, and returns up to count entries per stream: one read for every destination of
// those accounts. at is updated to where the next read starts. A block below zero does
// not block.
func (s *Store) FollowLogs(ctx context.Context, at map[string]FollowPoint, block time.Duration, count int64) (Followed, error) {
	streams := make([]string, 0, 4*len(at))
	ids := make([]string, 0, 2*len(at))
	for acct, p := range at {
		if !p.SkipLog {
			streams = append(streams, logKey(acct))
			ids = append(ids, p.Log)
		}
		streams = append(streams, ctlKey(acct))
		ids = append(ids, p.Ctl)
	}
	streams = append(streams, ids...)
	res, err := s.rdb.XRead(ctx, &redis.XReadArgs{Streams: streams, Block: block, Count: count}).Result()
	var out Followed
	if errors.Is(err, redis.Nil) {
		return out, nil
	}
	if err != nil {
		return out, err
	}
	out.Entries = map[string][]LogEntry{}
	for _, st := range res {
		if len(st.Messages) == 0 {
			continue
		}
		acct := accountOfKey(st.Stream)
		p := at[acct]
		last := st.Messages[len(st.Messages)-1].ID
		if isCtlKey(st.Stream) {
			p.Ctl = last
			for _, m := range st.Messages {
				v, _ := strconv.ParseInt(str(m.Values["v"]), 10, 64)
				out.Controls = append(out.Controls, Control{Account: acct, Destination: str(m.Values["d"]),
					Kind: str(m.Values["k"]), Version: v, Ack: str(m.Values["a"])})
			}
		} else {
			p.Log = last
			es, err := logEntries(st.Messages)
			if err != nil {
				return out, err
			}
			out.Entries[acct] = es
		}
		at[acct] = p
	}
	return out, nil
}
