package store

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// acquireScript takes or renews leases of one account, many in one call: KEYS are
// pairs of a destination's lease key and its hash. A new holder gets the next fencing
// token from the destination hash; every commit checks it, so a replica that lost its
// lease (paused process, network split) can never commit again. For each pair it
// answers the token (0: another's) and the destination's control version (ctlv): a
// holder whose state is older reads it again before it writes (control.go).
var acquireScript = redis.NewScript(`
local out = {}
for i = 1, #KEYS, 2 do
  local v = redis.call('GET', KEYS[i])
  local ctlv = tonumber(redis.call('HGET', KEYS[i + 1], 'ctlv') or '0')
  local tok = 0
  if v then
    local owner, held = string.match(v, '^(.*)|(%d+)$')
    if owner == ARGV[1] then
      redis.call('PEXPIRE', KEYS[i], ARGV[2])
      tok = tonumber(held)
    end
  else
    tok = redis.call('HINCRBY', KEYS[i + 1], 'lease_token', 1)
    redis.call('SET', KEYS[i], ARGV[1] .. '|' .. tok, 'PX', ARGV[2])
  end
  out[#out + 1] = tok
  out[#out + 1] = ctlv
end
return out
`)

// leasesPerCall is how many leases one acquire script takes or renews.
const leasesPerCall = 256

// AcquireLease takes the destination's lease for owner, or renews it when owner holds
// it already. It returns the fencing token, or 0 when another replica holds the lease.
// With Options.MinReplicas the token is returned only once that many replicas hold it,
// so a failover cannot hand the same token to a second holder.
func (s *Store) AcquireLease(ctx context.Context, r Ref, owner string, ttl time.Duration) (int64, error) {
	toks, err := s.AcquireLeases(ctx, []Ref{r}, owner, ttl)
	if err != nil {
		return 0, err
	}
	return toks[0], nil
}

// releaseScript gives up leases of one account, many in one call: KEYS[i] is a lease
// key, ARGV[1] the owner and ARGV[i+1] the token it holds that lease with; a lease
// another replica took since (or that ran out) is left alone.
var releaseScript = redis.NewScript(`
local n = 0
for i = 1, #KEYS do
  if redis.call('GET', KEYS[i]) == ARGV[1] .. '|' .. ARGV[i + 1] then n = n + redis.call('DEL', KEYS[i]) end
end
return n
`)

// ReleaseLease gives the lease up, if owner still holds it with token.
func (s *Store) ReleaseLease(ctx context.Context, r Ref, owner string, token int64) error {
	return s.ReleaseLeases(ctx, []Held{{Ref: r, Token: token}}, owner)
}

// Held is a lease a replica holds: the destination and its fencing token.
type Held struct {
	Ref
	Token int64
}

// ReleaseLeases gives up owner's leases, each only if owner still holds it with its
// token, in one round trip per Redis master (a script call per account and up to
// leasesPerCall leases): a replica stopping with 100,000 leases frees them all at once,
// so its successor need not wait them out.
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
		calls[c].keys = append(calls[c].keys, leaseKey(l.Account, l.ID))
		calls[c].args = append(calls[c].args, l.Token)
	}
	if len(calls) == 0 {
		return nil
	}
	_, err := s.evalAll(ctx, releaseScript, calls, false)
	return err
}

// Heartbeat records owner as a live replica and returns how many replicas are live
// (seen within ttl), so each can take its fair share of destinations.
func (s *Store) Heartbeat(ctx context.Context, owner string, ttl time.Duration) (int64, error) {
	now := time.Now().UnixMilli()
	pipe := s.rdb.TxPipeline()
	pipe.ZAdd(ctx, replicasKey, redis.Z{Score: float64(now), Member: owner})
	pipe.ZRemRangeByScore(ctx, replicasKey, "-inf", strconv.FormatInt(now-ttl.Milliseconds(), 10))
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

// AcquireLeases is AcquireLease for many destinations in one round trip per Redis
// master: each result is the fencing token, or 0 when another replica holds that lease.
func (s *Store) AcquireLeases(ctx context.Context, refs []Ref, owner string, ttl time.Duration) ([]int64, error) {
	leases, err := s.RenewLeases(ctx, refs, owner, ttl)
	out := make([]int64, len(leases))
	for i, l := range leases {
		out[i] = l.Token
	}
	return out, err
}

// Lease is what taking or renewing one lease answered.
type Lease struct {
	Token   int64 // the fencing token; 0 when another replica holds the lease
	Control int64 // the destination's control version (State.Control) now
}

// RenewLeases takes or renews owner's leases of refs, one round trip per Redis master,
// and returns each lease's token and the destination's control version.
func (s *Store) RenewLeases(ctx context.Context, refs []Ref, owner string, ttl time.Duration) ([]Lease, error) {
	if len(refs) == 0 {
		return nil, nil
	}
	// One script call per account and up to leasesPerCall of its leases (one slot),
	// pipelined per master: renewing costs a few commands per lease, not a call each.
	type span struct{ call, from int } // where refs[i] is answered: which call, which position
	var calls []call
	where := make([]span, len(refs))
	open := map[string]int{} // account → its call still taking leases
	for i, r := range refs {
		c, ok := open[r.Account]
		if !ok || len(calls[c].keys) >= 2*leasesPerCall {
			c = len(calls)
			calls = append(calls, call{args: []any{owner, ttl.Milliseconds()}})
			open[r.Account] = c
		}
		where[i] = span{call: c, from: len(calls[c].keys)}
		calls[c].keys = append(calls[c].keys, leaseKey(r.Account, r.ID), destKey(r.Account, r.ID))
	}
	cmds, err := s.evalAll(ctx, acquireScript, calls, true)
	if err != nil {
		return nil, err
	}
	answers := make([][]int64, len(cmds))
	for i, c := range cmds {
		answers[i], _ = c.Int64Slice()
	}
	out := make([]Lease, len(refs))
	for i, w := range where {
		if a := answers[w.call]; w.from+1 < len(a) {
			out[i] = Lease{Token: a[w.from], Control: a[w.from+1]}
		}
	}
	return out, nil
}

// LeasesFree reports, for each destination, whether owner may take its lease now: no
// replica holds it, or owner itself does (a worker it stopped for a redefinition: the
// lease is taken back at once rather than after it runs out).
func (s *Store) LeasesFree(ctx context.Context, refs []Ref, owner string) ([]bool, error) {
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.StringCmd, len(refs))
	for i, r := range refs {
		cmds[i] = pipe.Get(ctx, leaseKey(r.Account, r.ID))
	}
	if len(refs) > 0 {
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return nil, err
		}
	}
	out := make([]bool, len(refs))
	for i, c := range cmds {
		v, err := c.Result()
		out[i] = errors.Is(err, redis.Nil) || (err == nil && strings.HasPrefix(v, owner+"|"))
	}
	return out, nil
}
