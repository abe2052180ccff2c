package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
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

// appendScript appends an event to one account's log: the dedup SET NX on the ce-id and
// the XADD, atomically. KEYS are the seen key and the log key (one account, one slot);
// ARGV is the dedup TTL in ms, the MINID that trims the log by age, then the entry's
// field/value pairs. It returns the log id, or "" for a duplicate. A duplicate rewrites
// its marker unchanged (value and TTL kept): a write of this connection, so a WAIT after
// it also covers the earlier write that stored the event (replication is in order).
var appendScript = redis.NewScript(`
if redis.call('SET', KEYS[1], '1', 'NX', 'PX', ARGV[1]) then
  return redis.call('XADD', KEYS[2], 'MINID', '~', ARGV[2], '*', unpack(ARGV, 3))
end
redis.call('SET', KEYS[1], '1', 'XX', 'KEEPTTL')
return ''
`)

// AppendBatch appends several events in one round trip per Redis master: one script
// call per event and account, pipelined, so every call stays in one account's slot.
// Each call is atomic: the account's dedup marker and log entry are written together or
// not at all, so an event retried after a partial failure lands once in each account.
// With Options.MinReplicas it returns only once that many replicas hold every append
// (else a NotReplicatedError: nothing may be acked yet). dedup is the lifetime of a
// ce-id marker; logMaxAge trims each log of entries older than that.
func (s *Store) AppendBatch(ctx context.Context, batch []Append, dedup, logMaxAge time.Duration) ([]Appended, error) {
	if len(batch) == 0 {
		return nil, nil
	}
	ttl := strconv.FormatInt(dedup.Milliseconds(), 10)
	minID := strconv.FormatInt(time.Now().Add(-logMaxAge).UnixMilli(), 10)
	var calls []call
	for _, a := range batch {
		args := append([]any{ttl, minID}, a.Entry.fields()...)
		for _, acct := range a.Accounts {
			calls = append(calls, call{keys: []string{seenKey(acct, a.Entry.EventID), logKey(acct)}, args: args})
		}
	}
	cmds, err := s.evalAll(ctx, appendScript, calls, true)
	if err != nil {
		return nil, fmt.Errorf("append %d events: %w", len(batch), err)
	}
	out := make([]Appended, len(batch))
	k := 0
	for i, a := range batch {
		out[i] = make(Appended, len(a.Accounts))
		for j := range a.Accounts {
			if out[i][j], err = cmds[k].Text(); err != nil {
				return nil, fmt.Errorf("append %s: %w", a.Entry.EventID, err)
			}
			k++
		}
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

// LogGroups splits accounts into the groups one WaitLogs may follow together: on one
// server a single group, on Redis Cluster one group per hash slot (a blocking read may
// not span slots). Groups come in slot order, accounts sorted within each.
func (s *Store) LogGroups(accts []string) [][]string {
	sorted := slices.Clone(accts)
	slices.Sort(sorted)
	bySlot := map[int][]string{}
	var slots []int
	for _, acct := range slices.Compact(sorted) {
		sl := s.slotOf(logKey(acct))
		if _, ok := bySlot[sl]; !ok {
			slots = append(slots, sl)
		}
		bySlot[sl] = append(bySlot[sl], acct)
	}
	slices.Sort(slots)
	out := make([][]string, len(slots))
	for i, sl := range slots {
		out[i] = bySlot[sl]
	}
	return out
}

// WaitLogs blocks up to block for new entries in the given accounts' logs after the ids
// in after (account → log id), and returns the accounts that have some with their newest id.
// The accounts must be one group of LogGroups (one slot on Redis Cluster).
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
	pipe := s.rdb.Pipeline() // on a cluster: one slot, so one master and one round trip
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
