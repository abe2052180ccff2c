package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Leases are held per replica and account, not per destination, so nothing is renewed
// per destination. Each account has one small hash of its holders (holdersKey): field
// owner, value "gen|expiry" (ms, Redis's clock). A destination is held by the replica
// its hash names in field holder ("owner|gen") while that replica's entry in the
// account's hash has the same gen and has not expired. A replica renews one entry per
// account it holds anything of; one that dies loses all its destinations of the account
// when its entry expires (a lease TTL, as before), and one that comes back after its
// entry expired starts a new gen, so it holds nothing of the old one. Taking a
// destination bumps its fencing token (lease_token): every commit checks it, so a
// replica that lost its lease (a paused process, a network split) never commits again.
// Taking stays per destination: one account's destinations spread over the replicas.

// luaHolders reads an account's holders hash against Redis's clock: live(holders, who)
// is who's gen while its entry has not expired, else nil; split_holder parses a
// destination's holder field ("owner|gen").
const luaHolders = luaNow + `
local function live(holders, who)
  local v = redis.call('HGET', holders, who)
  if not v then return nil end
  local gen, exp = string.match(v, '^(.*)|(%d+)$')
  if gen and tonumber(exp) > now then return gen end
  return nil
end
local function split_holder(h)
  if not h then return nil, nil end
  return string.match(h, '^(.*)|([^|]*)$')
end
-- keep_hash keeps the holders hash while anyone renews (and lets an abandoned account's go).
local function keep_hash(holders, ttl)
  if redis.call('PTTL', holders) < 2 * ttl then redis.call('PEXPIRE', holders, 2 * ttl) end
end
`

// acquireScript takes owner's leases of one account's destinations: KEYS[1] is the
// holders hash, the rest destination hashes; ARGV owner, ttl (ms), a new gen used when
// owner holds nothing live in the account. It renews owner's entry, and answers the gen
// held, then for each destination its fencing token (0: another's) and control version.
var acquireScript = redis.NewScript(luaHolders + `
local owner, ttl = ARGV[1], tonumber(ARGV[2])
local gen = live(KEYS[1], owner) or ARGV[3]
redis.call('HSET', KEYS[1], owner, gen .. '|' .. (now + ttl))
keep_hash(KEYS[1], ttl)
local mine = owner .. '|' .. gen
local out = {gen}
for i = 2, #KEYS do
  local h = redis.call('HMGET', KEYS[i], 'holder', 'lease_token', 'ctlv')
  local tok = 0
  if h[1] == mine then
    tok = tonumber(h[2])
  else
    local who, g = split_holder(h[1])
    if not who or live(KEYS[1], who) ~= g then
      tok = redis.call('HINCRBY', KEYS[i], 'lease_token', 1)
      redis.call('HSET', KEYS[i], 'holder', mine)
    end
  end
  out[#out + 1] = tok
  out[#out + 1] = tonumber(h[3] or '0')
end
return out
`)

// renewScript renews owner's entry of one account if it is still gen's and live: KEYS
// the holders hash and the account's control stream; ARGV owner, gen, ttl (ms), and the
// stream's last id at the hold's last renewal (empty: none). It answers 1 (renewed) or 0
// (lost: everything owner held there may be another's now); the stream's last id; and
// what changed since the id given: 1 when it cannot say (more than 256 entries, or the
// entry given was trimmed, so some went unseen), else 0 and the destinations the entries
// since name. So a holder learns of a change it missed by reading only the destinations
// changed. Expired entries of others go.
var renewScript = redis.NewScript(luaHolders + `
local owner, gen, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3])
local held = 0
if live(KEYS[1], owner) == gen then
  redis.call('HSET', KEYS[1], owner, gen .. '|' .. (now + ttl))
  keep_hash(KEYS[1], ttl)
  held = 1
end
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local _, exp = string.match(all[i + 1], '^(.*)|(%d+)$')
  if not exp or tonumber(exp) <= now then redis.call('HDEL', KEYS[1], all[i]) end
end
local last = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', 1)
local id = ''
if last[1] then id = last[1][1] end
local since, every, names = ARGV[4], 0, {}
if since ~= '' and id ~= since then
  if #redis.call('XRANGE', KEYS[2], since, since) == 0 then
    every = 1
  else
    local es = redis.call('XRANGE', KEYS[2], '(' .. since, '+', 'COUNT', 257)
    if #es > 256 then
      every = 1
    else
      for _, e in ipairs(es) do
        local f = e[2]
        for j = 1, #f, 2 do
          if f[j] == 'd' and f[j + 1] ~= '' then names[#names + 1] = f[j + 1] end
        end
      end
    end
  end
end
return {held, id, every, names}
`)

// releaseScript ends owner's hold of one account (KEYS[1], the holders hash) if it is
// still gen's (ARGV owner, gen): every destination it held there is free at once.
var releaseScript = redis.NewScript(`
local v = redis.call('HGET', KEYS[1], ARGV[1])
if v and string.match(v, '^(.*)|%d+$') == ARGV[2] then return redis.call('HDEL', KEYS[1], ARGV[1]) end
return 0
`)

// unleaseScript frees destinations of one account that owner's hold gen still names
// (KEYS destination hashes; ARGV[1] owner, ARGV[1 + i] the gen of KEYS[i]): each is
// free at once, not only when the whole hold ends.
var unleaseScript = redis.NewScript(`
local n = 0
for i = 1, #KEYS do
  if redis.call('HGET', KEYS[i], 'holder') == ARGV[1] .. '|' .. ARGV[i + 1] then
    n = n + redis.call('HDEL', KEYS[i], 'holder')
  end
end
return n
`)

// freeScript answers, for each destination hash (KEYS[2] on; KEYS[1] the holders hash),
// 1 when owner (ARGV[1]) may take it now: no live replica holds it, or owner itself
// does (a worker it stopped for a redefinition: taken back at once, not after the TTL).
var freeScript = redis.NewScript(luaHolders + `
local out = {}
for i = 2, #KEYS do
  local who, g = split_holder(redis.call('HGET', KEYS[i], 'holder'))
  if not who or who == ARGV[1] or live(KEYS[1], who) ~= g then out[#out + 1] = 1 else out[#out + 1] = 0 end
end
return out
`)

// leasesPerCall is how many destinations one acquire or free script takes.
const leasesPerCall = 256

// Lease is what taking one lease answered.
type Lease struct {
	Token   int64  // the fencing token; 0 when another replica holds the lease
	Control int64  // the destination's control version (State.Control) now
	Gen     string // the holder's gen in the account (Hold.Gen): renewed as one
}

// Hold is a replica's hold of one account: what it renews, and what it releases.
type Hold struct {
	Account string
	Gen     string
}

// Renewal is what renewing one Hold answered.
type Renewal struct {
	Held bool // false: the hold lapsed, every lease of it may be another's now
	// LastControl is the account's control stream's last id: when it moved since the
	// last renewal, a change may have been missed. Changed names the destinations the
	// entries since the id given name; Every says it cannot tell (too many, or some
	// trimmed unseen): every destination of the hold may have changed.
	LastControl string
	Changed     []string
	Every       bool
}

// AcquireLeases takes owner's leases of refs where free (or owner's already), one
// script call per account and up to leasesPerCall destinations, pipelined per Redis
// master; it renews owner's hold of each account on the way.
func (s *Store) AcquireLeases(ctx context.Context, refs []Ref, owner string, ttl time.Duration) ([]Lease, error) {
	gen := newGen()
	cmds, where, err := s.perAccount(ctx, acquireScript, refs, true, func() []any { return []any{owner, ttl.Milliseconds(), gen} })
	if err != nil {
		return nil, err
	}
	out := make([]Lease, len(refs))
	for i, w := range where {
		a, _ := cmds[w.call].Slice()
		if len(a) == 0 {
			continue
		}
		g, _ := a[0].(string)
		at := 1 + 2*w.at
		if at+1 < len(a) {
			tok, _ := a[at].(int64)
			ctl, _ := a[at+1].(int64)
			out[i] = Lease{Token: tok, Control: ctl, Gen: g}
		}
	}
	return out, nil
}

// LeasesFree reports, for each destination, whether owner may take its lease now: no
// live replica holds it, or owner itself does.
func (s *Store) LeasesFree(ctx context.Context, refs []Ref, owner string) ([]bool, error) {
	cmds, where, err := s.perAccount(ctx, freeScript, refs, false, func() []any { return []any{owner} })
	if err != nil {
		return nil, err
	}
	out := make([]bool, len(refs))
	for i, w := range where {
		a, _ := cmds[w.call].Int64Slice()
		out[i] = w.at < len(a) && a[w.at] == 1
	}
	return out, nil
}

// placed is where perAccount answers refs[i]: which call, which position in it.
type placed struct{ call, at int }

// perAccount runs script once per account and up to leasesPerCall of refs, KEYS the
// account's holders hash and its destinations' hashes, ARGV args(); pipelined per master.
func (s *Store) perAccount(ctx context.Context, script *redis.Script, refs []Ref, wait bool, args func() []any) ([]*redis.Cmd, []placed, error) {
	var calls []call
	where := make([]placed, len(refs))
	open := map[string]int{} // account → its call still taking destinations
	for i, r := range refs {
		c, ok := open[r.Account]
		if !ok || len(calls[c].keys) > leasesPerCall {
			c = len(calls)
			calls = append(calls, call{keys: []string{holdersKey(r.Account)}, args: args()})
			open[r.Account] = c
		}
		where[i] = placed{call: c, at: len(calls[c].keys) - 1}
		calls[c].keys = append(calls[c].keys, destKey(r.Account, r.ID))
	}
	if len(calls) == 0 {
		return nil, where, nil
	}
	cmds, err := s.evalAll(ctx, script, calls, wait)
	return cmds, where, err
}

// RenewHolds renews owner's holds, one script call per account pipelined per master:
// one call per account however many of its destinations owner holds. since[i] is the
// control stream's last id holds[i]'s last renewal answered ("" none: nothing is said
// of what changed).
func (s *Store) RenewHolds(ctx context.Context, holds []Hold, since []string, owner string, ttl time.Duration) ([]Renewal, error) {
	if len(holds) == 0 {
		return nil, nil
	}
	calls := make([]call, len(holds))
	for i, h := range holds {
		calls[i] = call{keys: []string{holdersKey(h.Account), ctlKey(h.Account)}, args: []any{owner, h.Gen, ttl.Milliseconds(), since[i]}}
	}
	cmds, err := s.evalAll(ctx, renewScript, calls, true)
	if err != nil {
		return nil, err
	}
	out := make([]Renewal, len(holds))
	for i, c := range cmds {
		a, err := c.Slice()
		if err != nil || len(a) < 4 {
			return nil, fmt.Errorf("lease renewal of account %s: %v (answer %v)", holds[i].Account, err, a)
		}
		held, _ := a[0].(int64)
		last, _ := a[1].(string)
		every, _ := a[2].(int64)
		out[i] = Renewal{Held: held == 1, LastControl: last, Every: every == 1}
		names, _ := a[3].([]any)
		for _, n := range names {
			if id, ok := n.(string); ok {
				out[i].Changed = append(out[i].Changed, id)
			}
		}
	}
	return out, nil
}

// ReleaseHolds ends owner's holds, one round trip per Redis master: a replica stopping
// frees every destination it held at once, so its successor need not wait them out.
func (s *Store) ReleaseHolds(ctx context.Context, holds []Hold, owner string) error {
	if len(holds) == 0 {
		return nil
	}
	calls := make([]call, len(holds))
	for i, h := range holds {
		calls[i] = call{keys: []string{holdersKey(h.Account)}, args: []any{owner, h.Gen}}
	}
	_, err := s.evalAll(ctx, releaseScript, calls, false)
	return err
}

// Held is one destination's lease as its holder knows it: the destination and the gen
// of the hold it belongs to.
type Held struct {
	Ref
	Gen string
}

// ReleaseLeases frees leases owner holds while keeping its holds: a destination whose
// worker ended here (redefined, removed, stopped) is free for any replica at once,
// while owner's other leases of the account stay. One script call per account and up
// to leasesPerCall of them, pipelined per master; a lease another took since is left.
func (s *Store) ReleaseLeases(ctx context.Context, leases []Held, owner string) error {
	var calls []call
	open := map[string]int{} // account → its call still taking leases
	for _, l := range leases {
		c, ok := open[l.Account]
		if !ok || len(calls[c].keys) >= leasesPerCall {
			c = len(calls)
			calls = append(calls, call{args: []any{owner}})
			open[l.Account] = c
		}
		calls[c].keys = append(calls[c].keys, destKey(l.Account, l.ID))
		calls[c].args = append(calls[c].args, l.Gen)
	}
	if len(calls) == 0 {
		return nil
	}
	_, err := s.evalAll(ctx, unleaseScript, calls, false)
	return err
}

// ControlVersions reads each destination's control version (State.Control): a holder
// whose account's control stream moved since its last renewal compares them with the
// state in hand. One pipeline.
func (s *Store) ControlVersions(ctx context.Context, refs []Ref) ([]int64, error) {
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.StringCmd, len(refs))
	for i, r := range refs {
		cmds[i] = pipe.HGet(ctx, destKey(r.Account, r.ID), "ctlv")
	}
	if len(refs) > 0 {
		if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
			return nil, err
		}
	}
	out := make([]int64, len(refs))
	for i, c := range cmds {
		out[i], _ = c.Int64()
	}
	return out, nil
}

// Heartbeat records owner as a live replica and returns how many replicas are live
// (seen within ttl), so each can take its fair share of destinations.
func (s *Store) Heartbeat(ctx context.Context, owner string, ttl time.Duration) (int64, error) {
	now := time.Now().UnixMilli()
	pipe := s.rdb.TxPipeline()
	pipe.ZAdd(ctx, replicasKey, redis.Z{Score: float64(now), Member: owner})
	pipe.ZRemRangeByScore(ctx, replicasKey, "-inf", fmt.Sprint(now-ttl.Milliseconds()))
	n := pipe.ZCard(ctx, replicasKey)
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, err
	}
	return n.Val(), nil
}

// Leave removes owner from the live replicas at shutdown.
func (s *Store) Leave(ctx context.Context, owner string) error {
	return s.rdb.ZRem(ctx, replicasKey, owner).Err()
}

// newGen is a fresh hold's generation: random, so a replica's hold that lapsed and was
// taken again never matches the old one's destinations.
func newGen() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b) // crypto/rand.Read does not fail on Linux
	return hex.EncodeToString(b)
}
