package store

import (
	"context"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// A deleted destination's channel counter lives deletedCounterLife from state format 2
// on (Forget). The ones deleted before the switch, by 0.2.0 or by this release while
// 0.2.0 could still run, were kept for good; once format 2 is in force the background
// rewrite (upgrade.Rewrite, wired by relay serve) gives each of them the same life.

// SetDeletedCounterLife sets how long a deleted destination's channel counter lives
// from state format 2 on (Forget, ExpireDeletedCounter) unless the id is made again:
// long enough that no follower may still rightly hold a cursor of the deleted channel,
// which delivery.channel_retention bounds. relay serve passes max(a day,
// delivery.channel_retention). Never less than forgottenTTL, the day the lease fields
// live; unset, forgottenTTL. A counter keeps the life it was given at its delete.
func (s *Store) SetDeletedCounterLife(d time.Duration) { s.deletedLife.Store(int64(d)) }

// deletedCounterLife is the life SetDeletedCounterLife set, at least forgottenTTL.
func (s *Store) deletedCounterLife() time.Duration {
	return max(time.Duration(s.deletedLife.Load()), forgottenTTL)
}

// CounterPattern matches every destination channel's counter (a SCAN MATCH pattern).
const CounterPattern = "relay:{*}:chan:destination:*:seq"

// expireDeletedScript gives the counter KEYS[1] ARGV[1] ms to live when the
// destination it numbers has no stored state (KEYS[2], its hash: deleted) and it has no
// expiry yet. A destination made again meanwhile keeps it (Ensure takes the expiry off).
var expireDeletedScript = redis.NewScript(`
if redis.call('PTTL', KEYS[1]) ~= -1 or redis.call('HEXISTS', KEYS[2], 'status') == 1 then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return 1
`)

// ExpireDeletedCounter is the rewrite of one key CounterPattern matched (through rdb,
// the master the rewrite walks): the counter of a destination with no stored state
// lives deletedCounterLife more, as Forget leaves one from format 2 on. Any other key is
// left alone. Idempotent: a counter with an expiry, or of a destination that lives, is
// not touched.
func (s *Store) ExpireDeletedCounter(ctx context.Context, rdb redis.Cmdable, key string) error {
	acct, id, ok := counterOf(key)
	if !ok {
		return nil
	}
	return expireDeletedScript.Run(ctx, rdb, []string{key, destKey(acct, id)}, s.deletedCounterLife().Milliseconds()).Err()
}

// counterOf reads the account and the destination id out of a destination channel's
// counter key (chanSeqKey of DestinationChannel); false for any other key.
func counterOf(key string) (acct, id string, ok bool) {
	rest, ok := strings.CutPrefix(key, "relay:{")
	if !ok {
		return "", "", false
	}
	acct, rest, ok = strings.Cut(rest, "}:chan:destination:")
	if !ok || acct == "" || strings.ContainsAny(acct, "{}") {
		return "", "", false
	}
	id, ok = strings.CutSuffix(rest, ":seq")
	if !ok || id == "" || strings.Contains(id, ":") {
		return "", "", false
	}
	return acct, id, chanSeqKey(acct, DestinationChannel(id)) == key
}
