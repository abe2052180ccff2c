package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
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

// xaddArgs is the XADD to log of an entry in its stored form (Entry.encoded), trimming
// entries older than minID: the entry goes into the command as it is (go-redis writes a
// []byte argument without copying it into a string), and never through Lua. log and minID come
// boxed: the same for a whole transaction, they are converted to interfaces once.
func xaddArgs(log, minID any, encoded []byte) []any {
	return []any{"xadd", log, "MINID", "~", minID, "*", entryField, encoded}
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

// An append of small entries is one call of appendScript per account (below). One with
// a large entry is one MULTI … EXEC per account (its keys share one slot), holding for each
// event, in order, a call of gateScript and a plain XADD of the entry; a last call of
// gateScript ends it. The entry is an argument of the XADD only: an argument passed to a
// script is copied into a Lua string, and Redis's Lua hashes every byte of every string
// it makes (about 100 µs of Redis CPU for a 64 KB body, docs/benchmarks.md).
//
// gateScript decides whether the XADD that follows it may land, and indexes the entry
// the XADD before it added. KEYS are the log, the log's hold key, the account's
// position hash, its ordinal index and its dedup hash (dedup.go); then, except in the
// last call, the event's marker as versions before the dedup buckets kept it (a key of
// its own). ARGV are the dedup window in ms, the transaction's time in ms, the
// fingerprint of the event before (” none: its gate call came just before this one's
// XADD) and the event's own (” in the last call).
//
// It first undoes what it did for a duplicate just before (the log key holds a string:
// delete it, put the held log back). Otherwise the event before, if any, was admitted:
// the XADD in between gave it the log's newest id, which no script of the transaction
// receives, so the script asks Redis for it without copying the entry (a consumer group
// on the log moved to "$": its last-delivered-id is the last id), counts the event (the
// position hash's n: its ordinal k), appends "<that id> k <k>" to the index and writes
// the id into the event's marker, so a replay after the event finds it with one lookup.
// Then, for a fingerprint no live bucket holds (nor, for a dedup window after the
// upgrade, an old marker key), it stores a pending marker ("n") and returns 1: the XADD
// appends to the log. For one seen already it rewrites the marker unchanged (a write of
// this connection, so a WAIT after it also covers the earlier write that stored the
// event, replication being in order), moves the log aside under the hold key and puts a
// string in its place, so the XADD fails with WRONGTYPE and writes nothing; it returns
// 0. The transaction runs whole and alone, so no client ever sees the log moved aside or
// a marker pending, and the log's last id and entries-added are those a duplicate never
// touched. (RENAME moves the log's consumer group with it.)
//
// The ordinal index (relay:{acct}:ord) holds one tiny entry per log entry appended
// since this version, under the log entry's own id, with its ordinal: a destination's
// backlog is the head ordinal (n) less the ordinal before the first index entry after
// its cursor, so lag costs two small reads whatever the backlog (lagScript). It is
// trimmed to the log's length (exactly, MAXLEN): the log is trimmed only at its own
// XADDs, so after each transaction the index holds exactly the log's entries, except
// entries stored before the index existed (older than its first entry).
//
// Each transaction loads the script itself (SCRIPT LOAD inside the MULTI): an EVALSHA
// that found no script would fail only when EXEC runs, after the XADD beside it, and a
// promoted replica starts with no scripts.
const gateSource = dedupLua + `
local log, held, pos, ord = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local b = dedup_open(KEYS[5], tonumber(ARGV[1]), tonumber(ARGV[2]))
local prev, fp = ARGV[3], ARGV[4]
if redis.call('TYPE', log).ok == 'string' then
  redis.call('DEL', log)
  if redis.call('EXISTS', held) == 1 then redis.call('RENAME', held, log) end
elseif prev ~= '' then
  -- The event before was admitted (else the log would be a string): index its entry.
  local r = redis.pcall('XGROUP', 'SETID', log, 'relay-head', '$')
  if type(r) == 'table' and r.err then redis.pcall('XGROUP', 'CREATE', log, 'relay-head', '$') end
  local id
  for _, g in ipairs(redis.call('XINFO', 'GROUPS', log)) do
    if g[2] == 'relay-head' then
      for i = 1, #g, 2 do if g[i] == 'last-delivered-id' then id = g[i + 1] end end
    end
  end
  local k = redis.call('HINCRBY', pos, 'n', 1)
  r = id and redis.pcall('XADD', ord, 'MAXLEN', redis.call('XLEN', log), id, 'k', k)
  if type(r) == 'string' then
    dedup_settle(b, prev, id)
  else -- the XADD stored nothing (the index has that id already): neither is the event
    dedup_settle(b, prev, nil)
    redis.call('HINCRBY', pos, 'n', -1)
  end
end
if fp == '' then return 1 end
local key, old = dedup_find(b, fp, KEYS[6])
if not old then
  dedup_add(b, fp)
  return 1
end
if key == KEYS[6] then redis.call('SET', key, old, 'XX', 'KEEPTTL') else redis.call('HSET', key, fp, old) end
if redis.call('EXISTS', log) == 1 then redis.call('RENAME', log, held) end
redis.call('SET', log, '')
return 0
`

var gateScript = redis.NewScript(gateSource)

// scriptEntryMax is the largest stored entry (encoded) an append takes through
// appendScript: one call, where the transaction above is seven commands. Past it the
// transaction's XADD keeps the entry out of Lua, whose strings cost Redis CPU per byte.
const scriptEntryMax = 4096

// appendScript is an account's whole append in one call, for entries of at most
// scriptEntryMax bytes: it writes exactly what the transaction above writes (the log
// entry, its dedup marker holding its log id, its ordinal and index entry), so replicas
// of either kind read the other's appends as their own. KEYS are the log, the position
// hash, the ordinal index and the dedup hash, then each event's marker key of the form
// before; ARGV the dedup window in ms, the time in ms, the log's MINID bound, then each
// event's fingerprint and stored entry. It answers the log's last id before the call
// (” for none), then each event's log id (” for a duplicate, whose marker it rewrites
// unchanged as the transaction does, so a WAIT after it covers the write that stored
// the event).
const appendSource = dedupLua + `
local log, pos, ord = KEYS[1], KEYS[2], KEYS[3]
local b = dedup_open(KEYS[4], tonumber(ARGV[1]), tonumber(ARGV[2]))
local last = redis.call('XREVRANGE', log, '+', '-', 'COUNT', 1)[1]
local out = {last and last[1] or ''}
for i = 1, (#ARGV - 3) / 2 do
  local fp, legacy = ARGV[2 + 2 * i], KEYS[4 + i]
  local key, old = dedup_find(b, fp, legacy)
  if old then
    if key == legacy then redis.call('SET', key, old, 'XX', 'KEEPTTL') else redis.call('HSET', key, fp, old) end
    out[#out + 1] = ''
  else
    local id = redis.call('XADD', log, 'MINID', '~', ARGV[3], '*', '` + entryField + `', ARGV[3 + 2 * i])
    local k = redis.call('HINCRBY', pos, 'n', 1)
    local r = redis.pcall('XADD', ord, 'MAXLEN', redis.call('XLEN', log), id, 'k', k)
    if type(r) == 'string' then
      dedup_add(b, fp, id)
    else -- the index has that id already (as the transaction's gate): neither is the event
      redis.call('HINCRBY', pos, 'n', -1)
    end
    out[#out + 1] = id
  end
end
return out
`

var appendScript = redis.NewScript(appendSource)

// byScript reports whether aa goes through appendScript: every entry small enough.
func (aa *accountAppends) byScript() bool {
	for _, z := range aa.encoded {
		if len(z) > scriptEntryMax {
			return false
		}
	}
	return true
}

// heldKey is where gateScript moves an account's log aside: it exists only inside an
// append's transaction.
func heldKey(acct string) string { return "relay:{" + acct + "}:log:held" }

// accountAppends is one account's share of a batch: its transaction.
type accountAppends struct {
	acct    string
	entries []*Entry
	encoded [][]byte  // each entry's stored form (Entry.encoded)
	ids     []*string // where each entry's log id goes ("" for a duplicate)
	after   string    // the log's last id before the transaction ("": not known)
}

// Run is what one append added to one account's log: Entries follow the entry After
// with nothing between them, in log order (a duplicate added nothing). After is the
// log's last entry when the append's transaction began, "" when the log had none.
type Run struct {
	Account string
	After   string
	Entries []LogEntry
}

// AppendBatch appends several events in one round trip per Redis master: one
// transaction per account (above), pipelined, so each stays in one account's slot.
// Each event's dedup marker and log entry are written together or not at all, so an
// event retried after a partial failure lands once in each account. With
// Options.MinReplicas it returns only once that many replicas hold every append (else
// a NotReplicatedError: nothing may be acked yet). dedup is the lifetime of a ce-id
// marker; logMaxAge trims each log of entries older than that.
func (s *Store) AppendBatch(ctx context.Context, batch []Append, dedup, logMaxAge time.Duration) ([]Appended, error) {
	out, _, err := s.AppendBatchRuns(ctx, batch, dedup, logMaxAge)
	return out, err
}

// AppendBatchRuns is AppendBatch that also answers, per account, the run of entries it
// added to the log and the id they follow: a replica that follows the account may take
// them into memory without reading them back (dispatch's feed), since nothing came
// between.
func (s *Store) AppendBatchRuns(ctx context.Context, batch []Append, dedup, logMaxAge time.Duration) ([]Appended, []Run, error) {
	if len(batch) == 0 {
		return nil, nil, nil
	}
	now := s.clock()
	window, nowMS := strconv.FormatInt(dedup.Milliseconds(), 10), strconv.FormatInt(now.UnixMilli(), 10)
	minID := strconv.FormatInt(now.Add(-logMaxAge).UnixMilli(), 10)
	out := make([]Appended, len(batch))
	var accts []*accountAppends
	byAcct := map[string]*accountAppends{}
	for i := range batch {
		a := &batch[i]
		out[i] = make(Appended, len(a.Accounts))
		z := a.Entry.encoded() // once, whatever the accounts
		for j, acct := range a.Accounts {
			aa := byAcct[acct]
			if aa == nil {
				aa = &accountAppends{acct: acct}
				byAcct[acct] = aa
				accts = append(accts, aa)
			}
			aa.entries = append(aa.entries, &a.Entry)
			aa.encoded = append(aa.encoded, z)
			aa.ids = append(aa.ids, &out[i][j])
		}
	}
	// One pipeline per master, the masters in parallel.
	var masters []redis.UniversalClient
	byMaster := map[redis.UniversalClient][]*accountAppends{}
	for _, aa := range accts {
		m, err := s.masterFor(ctx, logKey(aa.acct))
		if err != nil {
			s.refresh(ctx)
			return nil, nil, fmt.Errorf("append %d events: %w", len(batch), err)
		}
		if _, ok := byMaster[m]; !ok {
			masters = append(masters, m)
		}
		byMaster[m] = append(byMaster[m], aa)
	}
	errs := make([]error, len(masters))
	var wg sync.WaitGroup
	for i, m := range masters {
		wg.Go(func() { errs[i] = s.appendOn(ctx, m, byMaster[m], window, nowMS, minID) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		s.refresh(ctx)
		return nil, nil, fmt.Errorf("append %d events: %w", len(batch), err)
	}
	runs := make([]Run, 0, len(accts))
	for _, aa := range accts {
		r := Run{Account: aa.acct, After: aa.after}
		for n, e := range aa.entries {
			if id := *aa.ids[n]; id != "" {
				r.Entries = append(r.Entries, LogEntry{ID: id, Entry: *e})
			}
		}
		if len(r.Entries) > 0 {
			runs = append(runs, r)
		}
	}
	return out, runs, nil
}

// appendOn runs the appends of accts on one master in one pipeline, ending in WAIT
// with Options.MinReplicas, and sets each entry's log id: appendScript for an account
// whose entries are all small (one command), else its transaction. A script call that
// found no script (a restarted or promoted server) wrote nothing, and goes again with
// the script's source.
func (s *Store) appendOn(ctx context.Context, m redis.UniversalClient, accts []*accountAppends, window, nowMS, minID string) error {
	pipe := m.Pipeline()
	// Arguments shared by many commands are boxed once (each boxing of a string allocates).
	windowArg, nowArg, minIDArg := any(window), any(nowMS), any(minID)
	replies := make([]*redis.Cmd, len(accts))
	calls := make([][]any, len(accts)) // appendScript's arguments after the script, by account
	for k, aa := range accts {
		if aa.byScript() {
			calls[k] = aa.scriptArgs(windowArg, nowArg, minIDArg)
			replies[k] = pipe.Do(ctx, append([]any{"evalsha", appendScript.Hash()}, calls[k]...)...)
			continue
		}
		replies[k] = aa.transaction(ctx, pipe, windowArg, nowArg, minIDArg)
	}
	acked := s.wait(ctx, pipe)
	// A script call that found no script is run again below; any other failure ends it.
	if _, err := pipe.Exec(ctx); err != nil && !redis.HasErrorPrefix(err, "NOSCRIPT") {
		return err
	}
	if again := s.withSource(ctx, m, replies, calls); again != nil {
		acked = again
	}
	for k, aa := range accts {
		if err := replies[k].Err(); err != nil {
			return fmt.Errorf("append to account %s: %w", aa.acct, err)
		}
		read := aa.read
		if calls[k] != nil {
			read = aa.readScript
		}
		if err := read(replies[k]); err != nil {
			return err
		}
	}
	if acked != nil {
		if n, err := acked.Int(); err != nil || n < s.minReplicas {
			return &NotReplicatedError{Acked: n, Want: s.minReplicas}
		}
	}
	return nil
}

// wait queues WAIT on pipe with Options.MinReplicas (nil without).
func (s *Store) wait(ctx context.Context, pipe redis.Pipeliner) *redis.Cmd {
	if s.minReplicas == 0 {
		return nil
	}
	return pipe.Do(ctx, "wait", s.minReplicas, waitTimeout.Milliseconds())
}

// withSource runs again, with appendScript's source, the script calls that found no
// script, then WAIT (returned) when any ran; it sets their replies.
func (s *Store) withSource(ctx context.Context, m redis.UniversalClient, replies []*redis.Cmd, calls [][]any) *redis.Cmd {
	var again []int
	for k, r := range replies {
		if calls[k] != nil && redis.HasErrorPrefix(r.Err(), "NOSCRIPT") {
			again = append(again, k)
		}
	}
	if len(again) == 0 {
		return nil
	}
	pipe := m.Pipeline()
	for _, k := range again {
		replies[k] = pipe.Do(ctx, append([]any{"eval", appendSource}, calls[k]...)...)
	}
	acked := s.wait(ctx, pipe)
	_, _ = pipe.Exec(ctx) // each reply holds its own error
	return acked
}

// scriptArgs is appendScript's numkeys, KEYS and ARGV for aa.
func (aa *accountAppends) scriptArgs(window, now, minID any) []any {
	n := len(aa.entries)
	args := make([]any, 0, 1+4+n+3+2*n)
	args = append(args, 4+n, logKey(aa.acct), posKey(aa.acct), ordKey(aa.acct), dedupKey(aa.acct))
	for _, e := range aa.entries {
		args = append(args, seenKey(aa.acct, e.EventID))
	}
	args = append(args, window, now, minID)
	for i, e := range aa.entries {
		args = append(args, fingerprint(e.EventID), aa.encoded[i])
	}
	return args
}

// readScript sets the log ids from appendScript's reply.
func (aa *accountAppends) readScript(r *redis.Cmd) error {
	res, err := r.Slice()
	if err != nil {
		return err
	}
	if len(res) != 1+len(aa.entries) {
		return fmt.Errorf("append to account %s: %d replies, want %d", aa.acct, len(res), 1+len(aa.entries))
	}
	aa.after, _ = res[0].(string)
	for n := range aa.entries {
		id, ok := res[1+n].(string)
		if !ok {
			return fmt.Errorf("append %s: the script answered %v", aa.entries[n].EventID, res[1+n])
		}
		*aa.ids[n] = id
	}
	return nil
}

// transaction queues aa's append as one MULTI … EXEC on pipe (the gate calls and
// XADDs above) and returns its EXEC.
func (aa *accountAppends) transaction(ctx context.Context, pipe redis.Pipeliner, window, now, minID any) *redis.Cmd {
	sha := any(gateScript.Hash())
	log, held, pos, ord, dd := any(logKey(aa.acct)), any(heldKey(aa.acct)), any(posKey(aa.acct)), any(ordKey(aa.acct)), any(dedupKey(aa.acct))
	pipe.Do(ctx, "multi")
	pipe.Do(ctx, "script", "load", gateSource)
	// The log's last entry before this transaction: where its run starts (Run.After).
	pipe.Do(ctx, "xrevrange", log, "+", "-", "COUNT", 1)
	prev := any("") // the fingerprint of the event before, for its gate call to index it
	for i, e := range aa.entries {
		fp := any(fingerprint(e.EventID))
		pipe.Do(ctx, "evalsha", sha, 6, log, held, pos, ord, dd, seenKey(aa.acct, e.EventID), window, now, prev, fp)
		pipe.Do(ctx, xaddArgs(log, minID, aa.encoded[i])...)
		prev = fp
	}
	pipe.Do(ctx, "evalsha", sha, 5, log, held, pos, ord, dd, window, now, prev, "")
	return pipe.Do(ctx, "exec")
}

// read sets the log ids from the EXEC reply of aa's transaction: SCRIPT LOAD's answer,
// the log's last entry, then a gate and an XADD answer per entry, then the last gate's.
func (aa *accountAppends) read(exec *redis.Cmd) error {
	res, err := exec.Slice()
	if err != nil {
		return err
	}
	if len(res) != 3+2*len(aa.entries) {
		return fmt.Errorf("transaction of account %s: %d replies, want %d", aa.acct, len(res), 3+2*len(aa.entries))
	}
	for _, v := range []any{res[0], res[1], res[len(res)-1]} {
		if err, ok := v.(error); ok {
			return fmt.Errorf("transaction of account %s: %w", aa.acct, err)
		}
	}
	aa.after = lastID(res[1])
	for n, e := range aa.entries {
		gate, xadd := res[2+2*n], res[3+2*n]
		if err, ok := gate.(error); ok {
			return fmt.Errorf("append %s: %w", e.EventID, err)
		}
		if gate != int64(1) { // a duplicate: its XADD failed, as it must
			*aa.ids[n] = ""
			continue
		}
		id, ok := xadd.(string)
		if !ok {
			return fmt.Errorf("append %s: XADD answered %v", e.EventID, xadd)
		}
		*aa.ids[n] = id
	}
	return nil
}

// lastID is the id in an XREVRANGE … COUNT 1 reply; "" for none.
func lastID(v any) string {
	es, _ := v.([]any)
	if len(es) == 0 {
		return ""
	}
	e, _ := es[0].([]any)
	if len(e) == 0 {
		return ""
	}
	id, _ := e[0].(string)
	return id
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
	return logEntries(msgs)
}

// entryFrom reads an entry from its stream fields: one entryField, or, for an entry
// stored before that form, one field per Entry field.
func entryFrom(v map[string]any) (Entry, error) {
	str := func(k string) string { s, _ := v[k].(string); return s }
	if z, ok := v[entryField].(string); ok {
		return decodeEntry(z)
	}
	return Entry{
		EventID: str("event_id"), Type: str("type"), CEType: str("ce_type"), Source: str("source"),
		Time: str("time"), Tenant: str("tenant"), Subject: str("subject"),
		SchemaVersion: str("schema_version"), Data: []byte(str("data")), TraceParent: str("traceparent"),
	}, nil
}

// logEntries reads stream messages of a log back as entries.
func logEntries(msgs []redis.XMessage) ([]LogEntry, error) {
	out := make([]LogEntry, len(msgs))
	for i, m := range msgs {
		e, err := entryFrom(m.Values)
		if err != nil {
			return nil, fmt.Errorf("log entry %s: %w", m.ID, err)
		}
		out[i] = LogEntry{ID: m.ID, Entry: e}
	}
	return out, nil
}

// LogGroups splits accounts into the groups one FollowLogs may follow together: on one
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
