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
