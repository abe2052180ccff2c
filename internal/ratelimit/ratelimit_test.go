package ratelimit

import (
	"testing"
	"time"

	"github.com/mercamap/relay/internal/config"
)

// TestBucketsSpendFromAllOrNoneAndRefillEvenly: a take needs every bucket to hold its
// tokens; a refused one spends nothing and says how long until all do.
func TestBucketsSpendFromAllOrNoneAndRefillEvenly(t *testing.T) {
	var b Buckets
	now := time.Unix(1_000_000, 0)
	dest := Limit{Key: "destination:d1", Rate: config.Rate{Count: 4, Per: time.Minute}} // one per 15 s
	acct := Limit{Key: "account:a1", Rate: config.Rate{Count: 6, Per: time.Minute}}     // one per 10 s
	for i := range 2 {
		if ok, _ := b.TakeN(now, 2, dest, acct); !ok {
			t.Fatalf("take %d of 2 tokens refused with full buckets", i+1)
		}
	}
	if ok, wait := b.TakeN(now, 2, dest, acct); ok || wait != 30*time.Second {
		t.Fatalf("a third take: ok %v, wait %s; want refused, 30s (the destination's 2 tokens)", ok, wait)
	}
	other := Limit{Key: "destination:d2", Rate: dest.Rate}
	if ok, _ := b.TakeN(now, 2, other, acct); !ok {
		t.Fatal("d2 refused with the account's last 2 tokens")
	}
	if ok, wait := b.Take(now, other, acct); ok || wait != 10*time.Second {
		t.Fatalf("d2 with the account empty: ok %v, wait %s; want refused, 10s", ok, wait)
	}
	if ok, _ := b.Take(now.Add(10*time.Second), other, acct); !ok {
		t.Fatal("refused after the account refilled one token")
	}
	if ok, _ := b.TakeN(now.Add(time.Hour), 4, dest); !ok {
		t.Fatal("a bucket does not refill past its count, but to it")
	}
	if ok, _ := b.Take(now.Add(time.Hour), dest); ok {
		t.Fatal("took a fifth token from a bucket of 4")
	}
}

// TestLocalKeepsEachAccountsBucketsApart: the same limit key of two accounts is two
// buckets, and a refusal names the limit as the caller gave it.
func TestLocalKeepsEachAccountsBucketsApart(t *testing.T) {
	l := &Local{Now: func() time.Time { return time.Unix(1_000_000, 0) }}
	acct := Limit{Key: "sts:account", What: "calls for an account", Rate: config.Rate{Count: 2, Per: time.Minute}}
	for _, a := range []string{"acct_1", "acct_2"} {
		if v, _ := l.Spend(t.Context(), a, 2, acct); !v.OK {
			t.Fatalf("%s's first take of 2 refused: another account's take spent its bucket", a)
		}
	}
	v, _ := l.Spend(t.Context(), "acct_1", 1, acct)
	if v.OK || v.Empty != acct || v.Wait != 30*time.Second {
		t.Fatalf("acct_1's third: %+v, want refused by %+v, 30s", v, acct)
	}
}

// TestARefundGivesBackOnlyWhatItsSpendTook: a refused action's tokens come back while
// they cannot have refilled yet, never past the bucket's count; a refund older than
// that (the bucket may have been full since, and spent by others) gives nothing.
func TestARefundGivesBackOnlyWhatItsSpendTook(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	l := &Local{Now: func() time.Time { return now }}
	ctx := t.Context()
	dest := Limit{Key: "replay:destination:d1", Rate: config.Rate{Count: 2, Per: time.Minute}} // one per 30 s
	first, _ := l.Spend(ctx, "acct_1", 1, dest)
	second, _ := l.Spend(ctx, "acct_1", 1, dest)
	if !first.OK || !second.OK || first.At != now {
		t.Fatalf("two spends of a bucket of 2: %+v, %+v", first, second)
	}
	now = now.Add(10 * time.Second)
	if err := l.Refund(ctx, "acct_1", 1, second.At, dest); err != nil {
		t.Fatal(err)
	}
	if v, _ := l.Spend(ctx, "acct_1", 1, dest); !v.OK {
		t.Fatalf("after a refund 10s on: %+v, want the token back", v)
	}
	// 40 s after the first spend its token has refilled: giving it back would be one
	// more than the rate.
	now = now.Add(30 * time.Second)
	if v, _ := l.Spend(ctx, "acct_1", 1, dest); !v.OK {
		t.Fatalf("the refilled token: %+v", v)
	}
	if err := l.Refund(ctx, "acct_1", 1, first.At, dest); err != nil {
		t.Fatal(err)
	}
	if v, _ := l.Spend(ctx, "acct_1", 1, dest); v.OK {
		t.Fatal("a refund 40s after its spend (a token refills in 30s) gave a token back")
	}
	other := Limit{Key: "replay:destination:d2", Rate: dest.Rate}
	if err := l.Refund(ctx, "acct_1", 2, now, other); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if v, _ := l.Spend(ctx, "acct_1", 1, other); v.OK != (i < 2) {
			t.Fatalf("spend %d of a bucket never spent, after a refund to it: %+v; a refund never fills past the count", i+1, v)
		}
	}
}

func TestRefundableOnlyWithinTheRefillOfWhatWasSpent(t *testing.T) {
	r := config.Rate{Count: 4, Per: time.Minute} // one per 15 s
	for _, c := range []struct {
		n       int
		elapsed time.Duration
		want    bool
	}{{1, 0, true}, {1, 14 * time.Second, true}, {1, 15 * time.Second, false}, {2, 29 * time.Second, true},
		{2, 30 * time.Second, false}, {1, -time.Second, false}} {
		if got := Refundable(r, c.n, c.elapsed); got != c.want {
			t.Errorf("Refundable(%v, %d, %s) = %v, want %v", r, c.n, c.elapsed, got, c.want)
		}
	}
}
