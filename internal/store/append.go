package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Entry is one accepted event as it is kept in an account's log.
type Entry struct {
	EventID       string // ce-id: the dedup key
	Type          string // short type, e.g. job.completed
	CEType        string // full ce-type
	Source        string
	Time          string // ce-time as sent
	Tenant        string
	Subject       string
	SchemaVersion string
	Data          []byte // the verified JSON body
	// TraceParent is the W3C traceparent of the span that stored the event (tracing on
	// only), so each destination's write continues its trace. Never sent to a bus.
	TraceParent string
}

func (e Entry) fields() []any {
	f := []any{
		"event_id", e.EventID, "type", e.Type, "ce_type", e.CEType, "source", e.Source,
		"time", e.Time, "tenant", e.Tenant, "subject", e.Subject,
		"schema_version", e.SchemaVersion, "data", e.Data,
	}
	if e.TraceParent != "" {
		f = append(f, "traceparent", e.TraceParent)
	}
	return f
}

// Append is one event to append to the logs of the accounts it belongs to.
type Append struct {
	Entry    Entry
	Accounts []string
}

// Appended says, per account of an Append in the same order, the log id the event got,
// or "" when the account had seen its ce-id already (a duplicate, appended nowhere).
type Appended []string

// Duplicate reports whether no account took the event.
func (a Appended) Duplicate() bool {
	for _, id := range a {
		if id != "" {
			return false
		}
	}
	return true
}

// appendScript does, for each account, the dedup SET NX on the ce-id and the XADD to the
// account's log, atomically. KEYS come in pairs (seen key, log key); ARGV is the dedup TTL
// in ms, the MINID that trims the log by age, then the entry's field/value pairs.
var appendScript = redis.NewScript(`
local ttl = ARGV[1]
local minid = ARGV[2]
local out = {}
for i = 1, #KEYS, 2 do
  if redis.call('SET', KEYS[i], '1', 'NX', 'PX', ttl) then
    out[#out + 1] = redis.call('XADD', KEYS[i + 1], 'MINID', '~', minid, '*', unpack(ARGV, 3))
  else
    out[#out + 1] = ''
  end
end
return out
`)

// AppendBatch appends several events in one round trip (a pipeline of one script call
// per event). Each event is atomic on its own: its dedup markers and log entries are
// written together or not at all. dedup is the lifetime of a ce-id marker; logMaxAge
// trims each log of entries older than that.
//
// The script touches the keys of several accounts at once, which one Redis server
// allows; on Redis Cluster each account would need its own call (still safe: the
// dedup marker is per account, so a retried event lands once in each).
func (s *Store) AppendBatch(ctx context.Context, batch []Append, dedup, logMaxAge time.Duration) ([]Appended, error) {
	if len(batch) == 0 {
		return nil, nil
	}
	ttl := strconv.FormatInt(dedup.Milliseconds(), 10)
	minID := strconv.FormatInt(time.Now().Add(-logMaxAge).UnixMilli(), 10)
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.Cmd, len(batch))
	for i, a := range batch {
		keys := make([]string, 0, 2*len(a.Accounts))
		for _, acct := range a.Accounts {
			keys = append(keys, seenKey(acct, a.Entry.EventID), logKey(acct))
		}
		args := append([]any{ttl, minID}, a.Entry.fields()...)
		cmds[i] = appendScript.EvalSha(ctx, pipe, keys, args...)
	}
	if _, err := pipe.Exec(ctx); err != nil && !redis.HasErrorPrefix(err, "NOSCRIPT") {
		return nil, fmt.Errorf("append %d events: %w", len(batch), err)
	} else if err != nil {
		if err := appendScript.Load(ctx, s.rdb).Err(); err != nil {
			return nil, fmt.Errorf("load append script: %w", err)
		}
		return s.AppendBatch(ctx, batch, dedup, logMaxAge)
	}
	out := make([]Appended, len(batch))
	for i, cmd := range cmds {
		ids, err := cmd.StringSlice()
		if err != nil {
			return nil, fmt.Errorf("append %s: %w", batch[i].Entry.EventID, err)
		}
		out[i] = ids
	}
	return out, nil
}

// LogEntry is one entry read back from an account's log.
type LogEntry struct {
	ID string // the stream id: arrival order
	Entry
}

// ReadLog returns up to count entries of an account's log after the stream id after
// ("0" for the start).
func (s *Store) ReadLog(ctx context.Context, acct, after string, count int64) ([]LogEntry, error) {
	start := "(" + after
	if after == "0" || after == "" {
		start = "-"
	}
	msgs, err := s.rdb.XRangeN(ctx, logKey(acct), start, "+", count).Result()
	if err != nil {
		return nil, err
	}
	out := make([]LogEntry, len(msgs))
	for i, m := range msgs {
		out[i] = LogEntry{ID: m.ID, Entry: entryFrom(m.Values)}
	}
	return out, nil
}

func entryFrom(v map[string]any) Entry {
	str := func(k string) string { s, _ := v[k].(string); return s }
	return Entry{
		EventID: str("event_id"), Type: str("type"), CEType: str("ce_type"), Source: str("source"),
		Time: str("time"), Tenant: str("tenant"), Subject: str("subject"),
		SchemaVersion: str("schema_version"), Data: []byte(str("data")), TraceParent: str("traceparent"),
	}
}

// LastLogID is the id of the newest entry of an account's log, "0-0" when it is empty.
func (s *Store) LastLogID(ctx context.Context, acct string) (string, error) {
	msgs, err := s.rdb.XRevRangeN(ctx, logKey(acct), "+", "-", 1).Result()
	if err != nil || len(msgs) == 0 {
		return "0-0", err
	}
	return msgs[0].ID, nil
}

// WaitLogs blocks up to block for new entries in the given accounts' logs after the ids
// in after (account → log id), and returns the accounts that have some with their newest id.
// It reads at most two entries per account, whatever the backlog: one to learn that the
// log grew, one to learn its newest id.
func (s *Store) WaitLogs(ctx context.Context, after map[string]string, block time.Duration) (map[string]string, error) {
	streams := make([]string, 0, 2*len(after))
	accts := make([]string, 0, len(after))
	for acct := range after {
		accts = append(accts, acct)
		streams = append(streams, logKey(acct))
	}
	for _, acct := range accts {
		streams = append(streams, after[acct])
	}
	res, err := s.rdb.XRead(ctx, &redis.XReadArgs{Streams: streams, Block: block, Count: 1}).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	pipe := s.rdb.Pipeline()
	newest := make(map[string]*redis.XMessageSliceCmd, len(res))
	for _, st := range res {
		acct := strings.TrimSuffix(strings.TrimPrefix(st.Stream, "relay:{"), "}:log")
		newest[acct] = pipe.XRevRangeN(ctx, st.Stream, "+", "-", 1)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, err
	}
	out := make(map[string]string, len(newest))
	for acct, cmd := range newest {
		if msgs := cmd.Val(); len(msgs) > 0 {
			out[acct] = msgs[0].ID
		}
	}
	return out, nil
}

// EntryTime is when an entry arrived, read from its stream id.
func EntryTime(id string) time.Time {
	ms, _ := strconv.ParseInt(strings.SplitN(id, "-", 2)[0], 10, 64)
	return time.UnixMilli(ms)
}

// CompareIDs orders two stream ids ("ms-seq"): -1, 0 or 1.
func CompareIDs(a, b string) int {
	am, as := splitID(a)
	bm, bs := splitID(b)
	switch {
	case am != bm:
		return cmpInt(am, bm)
	default:
		return cmpInt(as, bs)
	}
}

func splitID(id string) (ms, seq int64) {
	m, s, _ := strings.Cut(id, "-")
	ms, _ = strconv.ParseInt(m, 10, 64)
	seq, _ = strconv.ParseInt(s, 10, 64)
	return ms, seq
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
