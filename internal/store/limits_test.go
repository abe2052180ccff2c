package store

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mercamap/relay/internal/config"
	"github.com/mercamap/relay/internal/ratelimit"
)

// TestSharedBucketsSpendFromAllOrNoneWhateverTheReplica: two replicas' limiters (two
// Stores over one Redis, on one server and on Redis Cluster) spend from the same buckets:
// what one took the other cannot, a refusal spends nothing and names the bucket that
// waits longest with its wait, and another account's buckets are its own.
func TestSharedBucketsSpendFromAllOrNoneWhateverTheReplica(t *testing.T) {
	onEachRedis(t, func(t *testing.T, st *Store) {
		ctx := context.Background()
		acct := "acct_limits"
		a, b := st.Limiter(), New(st.Client()).Limiter() // two replicas' stores, one Redis
		dest := ratelimit.Limit{Key: "test:destination:d1", What: "tests for a destination", Rate: config.Rate{Count: 4, Per: time.Hour}}
		account := ratelimit.Limit{Key: "test:account", What: "tests for an account", Rate: config.Rate{Count: 6, Per: time.Hour}}
		for i, l := range []*Limiter{a, b} {
			if v, err := l.Spend(ctx, acct, 2, dest, account); err != nil || !v.OK {
				t.Fatalf("replica %d's take of 2 with full buckets: %+v, %v", i+1, v, err)
			}
		}
		v, err := a.Spend(ctx, acct, 2, dest, account)
		if err != nil || v.OK || v.Empty.Key != dest.Key || v.Wait < 29*time.Minute || v.Wait > 30*time.Minute {
			t.Fatalf("a third take of 2: %+v, %v; want refused by the destination's bucket, about 30m (2 of 4 an hour)", v, err)
		}
		other := ratelimit.Limit{Key: "test:destination:d2", Rate: dest.Rate}
		if v, err := b.Spend(ctx, acct, 2, other, account); err != nil || !v.OK {
			t.Fatalf("d2 with the account's last 2: %+v, %v; the refused take spent nothing", v, err)
		}
		if v, err := a.Spend(ctx, acct, 1, other, account); err != nil || v.OK || v.Empty.Key != account.Key {
			t.Fatalf("d2 with the account empty: %+v, %v; want refused by the account's bucket", v, err)
		}
		if v, err := a.Spend(ctx, "acct_limits_other", 2, dest, account); err != nil || !v.OK {
			t.Fatalf("another account's take: %+v, %v; want its own full buckets", v, err)
		}
	})
}

// TestSharedBucketsHoldTheirCountUnderConcurrentReplicas: eight goroutines of two
// replicas take one token each, as fast as they can, from a bucket of 50 an hour: exactly
// 50 are granted, whoever asks.
func TestSharedBucketsHoldTheirCountUnderConcurrentReplicas(t *testing.T) {
	onEachRedis(t, func(t *testing.T, st *Store) {
		acct := "acct_limits_race"
		limiters := []*Limiter{st.Limiter(), New(st.Client()).Limiter()}
		lim := ratelimit.Limit{Key: "action:account", Rate: config.Rate{Count: 50, Per: time.Hour}}
		var granted atomic.Int64
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				for range 20 {
					v, err := limiters[g%2].Spend(context.Background(), acct, 1, lim)
					if err != nil {
						t.Error(err)
						return
					}
					if v.OK {
						granted.Add(1)
					}
				}
			})
		}
		wg.Wait()
		if n := granted.Load(); n != 50 {
			t.Fatalf("%d of 160 takes granted from a bucket of 50, want exactly 50", n)
		}
	})
}

// TestASharedBucketRefillsEvenlyAndIsGoneOnceFull: a bucket refills at its rate on
// Redis's clock, and its key expires once it would be full again, so an idle account
// keeps nothing in Redis.
func TestASharedBucketRefillsEvenlyAndIsGoneOnceFull(t *testing.T) {
	onEachRedis(t, func(t *testing.T, st *Store) {
		ctx := context.Background()
		acct := "acct_limits_refill"
		lim := ratelimit.Limit{Key: "sts:account", Rate: config.Rate{Count: 2, Per: 400 * time.Millisecond}} // one per 200 ms
		l := st.Limiter()
		if v, _ := l.Spend(ctx, acct, 2, lim); !v.OK {
			t.Fatal("a full bucket refused 2")
		}
		v, err := l.Spend(ctx, acct, 1, lim)
		if err != nil || v.OK || v.Wait <= 0 || v.Wait > 200*time.Millisecond {
			t.Fatalf("the empty bucket: %+v, %v; want refused, at most 200ms", v, err)
		}
		deadline := time.Now().Add(5 * time.Second)
		for {
			v, err := l.Spend(ctx, acct, 1, lim)
			if err != nil {
				t.Fatal(err)
			}
			if v.OK {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the bucket never refilled")
			}
			time.Sleep(v.Wait) // the wait it named, not a guess
		}
		key := bucketKey(acct, lim.Key)
		if ttl := st.Client().PTTL(ctx, key).Val(); ttl <= 0 || ttl > lim.Rate.Per {
			t.Fatalf("the bucket's key lives %s, want at most the time to fill it (%s)", ttl, lim.Rate.Per)
		}
	})
}

// TestASharedRefundGivesBackWhatItsSpendTookWhateverTheReplica: one replica gives back
// what another's spend took (Redis's clock decides for both), a bucket given back
// whole is gone as a full one expires, and a refund after its token could have
// refilled gives nothing: the bucket was full meanwhile and what it lacks now another
// spent.
func TestASharedRefundGivesBackWhatItsSpendTookWhateverTheReplica(t *testing.T) {
	onEachRedis(t, func(t *testing.T, st *Store) {
		ctx := context.Background()
		acct := "acct_refund"
		a, b := st.Limiter(), New(st.Client()).Limiter()
		lim := ratelimit.Limit{Key: "replay:destination:d1", Rate: config.Rate{Count: 2, Per: time.Hour}}
		first, err := a.Spend(ctx, acct, 1, lim)
		if err != nil || !first.OK || first.At.IsZero() {
			t.Fatalf("the first spend: %+v, %v; want granted, with Redis's time", first, err)
		}
		second, _ := a.Spend(ctx, acct, 1, lim)
		if v, _ := b.Spend(ctx, acct, 1, lim); v.OK || !second.OK {
			t.Fatalf("a third spend of 2: %+v", v)
		}
		if err := b.Refund(ctx, acct, 1, second.At, lim); err != nil {
			t.Fatal(err)
		}
		third, _ := b.Spend(ctx, acct, 1, lim)
		if !third.OK {
			t.Fatal("replica b's spend after it gave back replica a's token: refused")
		}
		for _, v := range []ratelimit.Verdict{first, third} {
			if err := a.Refund(ctx, acct, 1, v.At, lim); err != nil {
				t.Fatal(err)
			}
		}
		if n := st.Client().Exists(ctx, bucketKey(acct, lim.Key)).Val(); n != 0 {
			t.Fatal("a bucket given back whole is still in Redis")
		}

		quick := ratelimit.Limit{Key: "action:destination:d1", Rate: config.Rate{Count: 1, Per: 2 * time.Second}}
		old, _ := a.Spend(ctx, acct, 1, quick)
		time.Sleep(quick.Rate.Per + 100*time.Millisecond) // full again: the bucket expired
		if v, _ := b.Spend(ctx, acct, 1, quick); !v.OK || !old.OK {
			t.Fatalf("the refilled bucket: %+v", v)
		}
		if err := a.Refund(ctx, acct, 1, old.At, quick); err != nil {
			t.Fatal(err)
		}
		if v, _ := b.Spend(ctx, acct, 1, quick); v.OK {
			t.Fatal("a refund older than its token's refill gave back one the bucket no longer lacked")
		}
	})
}

// TestSharedRefundsNeverLetMoreThroughThanTheCount: eight goroutines of two replicas
// spend from a bucket of 50 an hour and give back every other token they got, as
// refused actions do: what they kept and what the bucket still holds make 50 exactly.
func TestSharedRefundsNeverLetMoreThroughThanTheCount(t *testing.T) {
	onEachRedis(t, func(t *testing.T, st *Store) {
		ctx := context.Background()
		acct := "acct_refund_race"
		limiters := []*Limiter{st.Limiter(), New(st.Client()).Limiter()}
		lim := ratelimit.Limit{Key: "action:account", Rate: config.Rate{Count: 50, Per: time.Hour}}
		var kept atomic.Int64
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				l := limiters[g%2]
				for i := range 20 {
					v, err := l.Spend(ctx, acct, 1, lim)
					switch {
					case err != nil:
						t.Error(err)
						return
					case !v.OK:
					case i%2 == 0:
						if err := limiters[(g+1)%2].Refund(ctx, acct, 1, v.At, lim); err != nil {
							t.Error(err)
							return
						}
					default:
						kept.Add(1)
					}
				}
			})
		}
		wg.Wait()
		left := int64(0)
		for {
			v, err := st.Limiter().Spend(ctx, acct, 1, lim)
			if err != nil {
				t.Fatal(err)
			}
			if !v.OK {
				break
			}
			left++
		}
		if n := kept.Load(); n+left != 50 {
			t.Fatalf("%d tokens kept and %d left in a bucket of 50: the refunds gave back %d more than they took", n, left, n+left-50)
		}
	})
}
