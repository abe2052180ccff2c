// Package registry keeps the destinations and accounts the API made, in Redis beside the
// logs: a hash of each kind's definitions (a destination's ExternalId pinned at
// creation), a count of destinations per account, the Idempotency-Keys of recent
// creates, and a stream of changes every replica follows so a create or a delete
// reaches each one at once, with no polling per destination. The
// config file is the other source; both share one id space (the caller checks the
// file's ids, Create checks the registry's, atomically).
package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/mercamap/relay/internal/destination"
)

// The registry's keys share one hash tag, so every script touches one Cluster slot.
const (
	destsKey   = "relay:{registry}:dests"   // hash: id → Record (JSON)
	countKey   = "relay:{registry}:count"   // hash: account → how many destinations the API made for it
	changesKey = "relay:{registry}:changes" // stream: op (put|delete), id
	idemPrefix = "relay:{registry}:idem:"   // string per account and Idempotency-Key: the id it made
)

// changesKept bounds the change stream: a replica further behind than this reloads the
// whole registry (Follow).
const changesKept = 10000

// IdempotencyTTL is how long a create's Idempotency-Key answers with the destination it
// made.
const IdempotencyTTL = 24 * time.Hour

// Record is one destination the API made, as stored.
//
// Fields are only ever added, each optional (omitempty, its zero the old meaning), so the
// releases of a roll read each other's records: a record of the previous release reads
// with the new fields zero, and the previous release's encoding/json ignores the fields
// it does not know. (What it cannot do is keep them: a change the previous release makes
// to a record writes it back without them.)
type Record struct {
	ID         string    `json:"id"`
	Account    string    `json:"account"`
	Connector  string    `json:"connector"`
	BusARN     string    `json:"bus_arn,omitempty"`
	StreamARN  string    `json:"stream_arn,omitempty"`
	RoleARN    string    `json:"role_arn,omitempty"`
	KMSKeyARN  string    `json:"kms_key_arn,omitempty"`
	ProjectID  string    `json:"project_id,omitempty"`
	TopicID    string    `json:"topic_id,omitempty"`
	Events     []string  `json:"events,omitempty"`
	ExternalID string    `json:"external_id,omitempty"` // AWS: issued at creation, never changed
	CreatedAt  time.Time `json:"created_at"`
	// Since 0.3.0: the destination's window and rate cap (destination.Destination's
	// InFlight and MaxRate); absent, the relay's default window and no cap.
	InFlight int     `json:"in_flight,omitempty"`
	MaxRate  float64 `json:"max_rate,omitempty"`
}

// Destination is the record as the engine takes it: managed by the API, its ExternalId
// pinned.
func (r Record) Destination() destination.Destination {
	return destination.Destination{ID: r.ID, Account: r.Account, Connector: destination.Connector(r.Connector),
		BusARN: r.BusARN, StreamARN: r.StreamARN, RoleARN: r.RoleARN, KMSKeyARN: r.KMSKeyARN,
		ProjectID: r.ProjectID, TopicID: r.TopicID, Events: r.Events, PinnedExternalID: r.ExternalID,
		ManagedBy: destination.ManagedByAPI, CreatedAt: r.CreatedAt, InFlight: r.InFlight, MaxRate: r.MaxRate}
}

// Errors of Create, Update and Delete, beside destination.ErrNotFound (an account's
// methods answer it too).
var (
	ErrExists = errors.New("the id is taken")
	ErrCapped = errors.New("the account has as many destinations as it may")
)

// Registry reads and writes the API's destinations.
type Registry struct {
	rdb redis.UniversalClient
}

// New returns a Registry on rdb (the store's client).
func New(rdb redis.UniversalClient) *Registry { return &Registry{rdb: rdb} }

var createScript = redis.NewScript(`
if ARGV[4] ~= '' then
  local made = redis.call('GET', KEYS[4])
  if made then return {'IDEM', made} end
end
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then return {'EXISTS'} end
local n = tonumber(redis.call('HGET', KEYS[2], ARGV[2]) or '0')
if n >= tonumber(ARGV[5]) then return {'CAPPED'} end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
redis.call('HINCRBY', KEYS[2], ARGV[2], 1)
redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[7], '*', 'op', 'put', 'id', ARGV[1])
if ARGV[4] ~= '' then redis.call('SET', KEYS[4], ARGV[1], 'PX', ARGV[6]) end
return {'OK'}
`)

// Create stores rec unless its id is taken (ErrExists) or its account already has
// most destinations in the registry (ErrCapped). With an Idempotency-Key its account
// used before (within IdempotencyTTL), nothing is made and the id it made comes back
// with made false.
func (g *Registry) Create(ctx context.Context, rec Record, idemKey string, most int) (id string, made bool, err error) {
	b, err := json.Marshal(rec)
	if err != nil {
		return "", false, err
	}
	idem := ""
	if idemKey != "" {
		idem = idemPrefix + rec.Account + ":" + idemKey
	}
	keys := []string{destsKey, countKey, changesKey, idem}
	if idem == "" {
		keys[3] = idemPrefix + "-" // unused, named so the script's keys stay in the slot
	}
	res, err := createScript.Run(ctx, g.rdb, keys, rec.ID, rec.Account, string(b), idem, most,
		IdempotencyTTL.Milliseconds(), changesKept).StringSlice()
	if err != nil {
		return "", false, err
	}
	switch res[0] {
	case "IDEM":
		return res[1], false, nil
	case "EXISTS":
		return "", false, ErrExists
	case "CAPPED":
		return "", false, ErrCapped
	}
	return rec.ID, true, nil
}

var putScript = redis.NewScript(`
local exists = redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1
if exists ~= (ARGV[5] == 'existing') then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[3], '*', 'op', ARGV[4], 'id', ARGV[1])
return 1
`)

// put stores rec under id in hash and appends op to the change stream: only over an
// existing record (destination.ErrNotFound otherwise), or only where there is none
// (ErrExists).
func (g *Registry) put(ctx context.Context, hash, op, id string, rec any, existing bool) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	mode, refused := "new", ErrExists
	if existing {
		mode, refused = "existing", destination.ErrNotFound
	}
	n, err := putScript.Run(ctx, g.rdb, []string{hash, changesKey}, id, string(b), changesKept, op, mode).Int()
	if err == nil && n == 0 {
		err = refused
	}
	return err
}

// Update replaces the stored record of rec.ID (destination.ErrNotFound when there is none).
func (g *Registry) Update(ctx context.Context, rec Record) error {
	return g.put(ctx, destsKey, "put", rec.ID, rec, true)
}

var deleteScript = redis.NewScript(`
local rec = redis.call('HGET', KEYS[1], ARGV[1])
if not rec then return 0 end
redis.call('HDEL', KEYS[1], ARGV[1])
local acct = cjson.decode(rec).account
if redis.call('HINCRBY', KEYS[2], acct, -1) <= 0 then redis.call('HDEL', KEYS[2], acct) end
redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[2], '*', 'op', 'delete', 'id', ARGV[1])
return 1
`)

// Delete removes id's record (destination.ErrNotFound when there is none).
func (g *Registry) Delete(ctx context.Context, id string) error {
	n, err := deleteScript.Run(ctx, g.rdb, []string{destsKey, countKey, changesKey}, id, changesKept).Int()
	if err == nil && n == 0 {
		err = destination.ErrNotFound
	}
	return err
}

// Get reads id's record (destination.ErrNotFound when there is none).
func (g *Registry) Get(ctx context.Context, id string) (Record, error) {
	s, err := g.rdb.HGet(ctx, destsKey, id).Result()
	if errors.Is(err, redis.Nil) {
		return Record{}, destination.ErrNotFound
	}
	if err != nil {
		return Record{}, err
	}
	var rec Record
	if err := json.Unmarshal([]byte(s), &rec); err != nil {
		return Record{}, fmt.Errorf("registry record %s: %w", id, err)
	}
	return rec, nil
}

// Count is how many destinations the registry holds for acct.
func (g *Registry) Count(ctx context.Context, acct string) (int, error) {
	n, err := g.rdb.HGet(ctx, countKey, acct).Int()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	return n, err
}

// All reads every record (HSCAN, a thousand a round trip), and the change stream's
// position before the read: following from there misses nothing.
func (g *Registry) All(ctx context.Context) ([]Record, string, error) {
	var out []Record
	from, err := g.scan(ctx, func(n int) { out = make([]Record, 0, n) }, func(rec *Record) { out = append(out, *rec) })
	if err != nil {
		return nil, "", err
	}
	return out, from, nil
}

// Destinations is All as the engine takes it: every record made into its Destination
// (Record.Destination) as it is decoded, each record decoded once and no list of the
// records kept beside the destinations (a start with 100,000 of them reads this).
func (g *Registry) Destinations(ctx context.Context) ([]destination.Destination, string, error) {
	var out []destination.Destination
	from, err := g.scan(ctx, func(n int) { out = make([]destination.Destination, 0, n) },
		func(rec *Record) { out = append(out, rec.Destination()) })
	if err != nil {
		return nil, "", err
	}
	return out, from, nil
}

// scan reads the change stream's position, then every record in turn (HSCAN, a thousand
// a round trip), handing each to take as decoded: the Record is take's only for the
// call (the next one is decoded into it). Before the first, sized is told how many
// records the hash holds when it holds any (a hint: the hash may change during the
// scan). One decoding buffer serves every record, and no Record is allocated per record.
func (g *Registry) scan(ctx context.Context, sized func(n int), take func(*Record)) (string, error) {
	// One round trip, in order: the position first, so following from it misses nothing.
	pipe := g.rdb.Pipeline()
	lastCmd := pipe.XRevRangeN(ctx, changesKey, "+", "-", 1)
	countCmd := pipe.HLen(ctx, destsKey)
	if _, err := pipe.Exec(ctx); err != nil {
		return "", err
	}
	from := "0-0"
	if last := lastCmd.Val(); len(last) == 1 {
		from = last[0].ID
	}
	if n := countCmd.Val(); n > 0 {
		sized(int(n)) // none: the list stays nil, as before
	}
	var rec Record
	var buf []byte
	iter := g.rdb.HScan(ctx, destsKey, 0, "", 1000).Iterator()
	for iter.Next(ctx) {
		id := iter.Val()
		if !iter.Next(ctx) {
			break
		}
		// encoding/json keeps nothing of its input: the buffer is the next record's.
		buf = append(buf[:0], iter.Val()...)
		rec = Record{}
		if err := json.Unmarshal(buf, &rec); err != nil {
			return "", fmt.Errorf("registry record %s: %w", id, err)
		}
		take(&rec)
	}
	return from, iter.Err()
}

// Change is one entry of the change stream, with the record as it is now (nil:
// deleted): a destination's (Record), or an account's (Account, with IsAccount).
type Change struct {
	ID        string
	Record    *Record
	IsAccount bool
	Account   *AccountRecord
}

// Next waits up to block for changes after position from and returns them with the new
// position. A position older than what the stream keeps returns reload true: read All
// again.
func (g *Registry) Next(ctx context.Context, from string, block time.Duration) (changes []Change, next string, reload bool, err error) {
	first, err := g.rdb.XRangeN(ctx, changesKey, "-", "+", 1).Result()
	if err != nil {
		return nil, from, false, err
	}
	if from != "0-0" && len(first) == 1 && idBefore(from, first[0].ID) {
		return nil, from, true, nil
	}
	res, err := g.rdb.XRead(ctx, &redis.XReadArgs{Streams: []string{changesKey, from}, Count: 1000, Block: block}).Result()
	if errors.Is(err, redis.Nil) {
		return nil, from, false, nil
	}
	if err != nil {
		return nil, from, false, err
	}
	next = from
	for _, s := range res {
		for _, m := range s.Messages {
			next = m.ID
			id, _ := m.Values["id"].(string)
			c := Change{ID: id}
			op, _ := m.Values["op"].(string)
			c.IsAccount = op == "put_account" || op == "delete_account"
			if op == "put_account" {
				rec, err := g.GetAccount(ctx, id)
				switch {
				case err == nil:
					c.Account = &rec
				case !errors.Is(err, destination.ErrNotFound):
					return nil, from, false, err
				}
			}
			if op == "put" {
				rec, err := g.Get(ctx, id)
				switch {
				case err == nil:
					c.Record = &rec
				case !errors.Is(err, destination.ErrNotFound):
					return nil, from, false, err
				}
			}
			changes = append(changes, c)
		}
	}
	return changes, next, false, nil
}

// idBefore reports whether stream id a is older than b, by their position only (a
// trimmed position before the oldest kept).
func idBefore(a, b string) bool {
	am, as := splitID(a)
	bm, bs := splitID(b)
	return am < bm || (am == bm && as < bs)
}

func splitID(id string) (uint64, uint64) {
	ms, seq, _ := strings.Cut(id, "-")
	m, _ := strconv.ParseUint(ms, 10, 64)
	s, _ := strconv.ParseUint(seq, 10, 64)
	return m, s
}
