// Package ratelimit holds token buckets by key, each refilling evenly over its rate:
// the API's limits on what one account asks for, and the STS budget of each destination
// and account. Buckets keeps them in this process; a Limiter may keep them where every
// replica shares them (store.Limiter, in Redis), so N replicas give an account what one
// gives. It never sleeps: a caller told to wait decides how.
package ratelimit

import (
	"context"
	"sync"
	"time"

	"github.com/mercamap/relay/internal/config"
)

// A Limiter spends n tokens from every bucket of limits, or from none. Every limit of
// one call belongs to account (its destinations' keys and its own), so a shared limiter
// decides them in one step in that account's place.
//
// Refund gives back what a Spend took for an action that was then refused (only what is
// carried out spends a limit): n tokens to each bucket of limits, the Spend's own, whose
// Verdict.At is spent. It never gives back more than the spend cost: a bucket that may
// have refilled those tokens since (spent longer ago than n tokens take to come back) or
// is gone (full) gets nothing, so a limit holds whatever refunds and replicas do.
type Limiter interface {
	Spend(ctx context.Context, account string, n int, limits ...Limit) (Verdict, error)
	Refund(ctx context.Context, account string, n int, spent time.Time, limits ...Limit) error
}

// Verdict is what a Spend decided: OK, or how long until every bucket holds the tokens
// (Wait) and the limit that waits longest (Empty: the one a refusal should name). At is
// when it was decided, on the limiter's own clock (what a Refund is given).
type Verdict struct {
	OK    bool
	Wait  time.Duration
	Empty Limit
	At    time.Time
}

// Local is a Limiter over in-process Buckets on a clock of its own (nil: time.Now): one
// replica's share only, for a relay without Redis or a test with a clock of its own.
type Local struct {
	Buckets Buckets
	Now     func() time.Time
}

// Spend takes from l's buckets, each keyed by the account and the limit's key (as a
// shared limiter keeps them in the account's place); it never fails.
func (l *Local) Spend(_ context.Context, account string, n int, limits ...Limit) (Verdict, error) {
	now := l.now()
	keyed := keyedBy(account, limits)
	ok, wait, empty := l.Buckets.take(now, n, keyed)
	if !ok {
		for i := range keyed {
			if keyed[i].Key == empty.Key {
				empty = limits[i]
			}
		}
	}
	return Verdict{OK: ok, Wait: wait, Empty: empty, At: now}, nil
}

// Refund gives back to l's buckets what a Spend took at spent (see Limiter); it never
// fails.
func (l *Local) Refund(_ context.Context, account string, n int, spent time.Time, limits ...Limit) error {
	l.Buckets.give(l.now(), spent, n, keyedBy(account, limits))
	return nil
}

func (l *Local) now() time.Time {
	if l.Now != nil {
		return l.Now()
	}
	return time.Now()
}

// keyedBy is limits with each key in account's place.
func keyedBy(account string, limits []Limit) []Limit {
	keyed := make([]Limit, len(limits))
	for i, lim := range limits {
		keyed[i] = lim
		keyed[i].Key = account + "\x00" + lim.Key
	}
	return keyed
}

// Buckets are token buckets by key: each holds up to Rate.Count and refills evenly over
// Rate.Per. Keys are configured destination and account ids (looked up before a take),
// so the map cannot grow with what a client sends. The zero value is ready to use.
type Buckets struct {
	mu sync.Mutex
	m  map[string]*bucket
}

type bucket struct {
	level float64 // tokens in the bucket at `at`
	at    time.Time
}

// Limit is one bucket a take must find tokens in.
type Limit struct {
	Key  string
	Rate config.Rate
	What string // names the limit in a refusal ("replays for a destination"); optional
}

// Take spends one token from every bucket of limits, or from none: when one is empty,
// ok is false and wait is how long until each has a token again.
func (b *Buckets) Take(now time.Time, limits ...Limit) (ok bool, wait time.Duration) {
	return b.TakeN(now, 1, limits...)
}

// TakeN spends n tokens from every bucket of limits, or none: when one holds fewer, ok
// is false and wait is how long until each holds n. n above a bucket's Count can never
// be taken; callers keep n within it (config validates the counts).
func (b *Buckets) TakeN(now time.Time, n int, limits ...Limit) (ok bool, wait time.Duration) {
	ok, wait, _ = b.take(now, n, limits)
	return ok, wait
}

func (b *Buckets) take(now time.Time, n int, limits []Limit) (ok bool, wait time.Duration, empty Limit) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.m == nil {
		b.m = map[string]*bucket{}
	}
	need := float64(n)
	for _, l := range limits {
		bk := b.refill(now, l)
		if bk.level < need {
			perToken := l.Rate.Per / time.Duration(l.Rate.Count)
			if w := time.Duration((need - bk.level) * float64(perToken)); w > wait {
				wait, empty = w, l
			}
		}
	}
	if wait > 0 {
		return false, wait, empty
	}
	for _, l := range limits {
		b.m[l.Key].level -= need
	}
	return true, 0, Limit{}
}

// give adds back n tokens, taken at spent, to each bucket of limits that still lacks
// them for sure: one spent less than n tokens' refill ago has not been full since, so
// the n are still missing from it; an older spend's may have come back already
// (Refundable).
func (b *Buckets) give(now, spent time.Time, n int, limits []Limit) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, l := range limits {
		if _, ok := b.m[l.Key]; !ok || !Refundable(l.Rate, n, now.Sub(spent)) {
			continue
		}
		bk := b.refill(now, l)
		bk.level = min(float64(l.Rate.Count), bk.level+float64(n))
	}
}

// Refundable reports whether n tokens spent from a bucket of rate r, elapsed ago, can
// be given back without giving more than the spend cost: only while they cannot have
// refilled yet. A bucket refills evenly, so one that held at most Count-n after the spend
// cannot have been full within n tokens' refill time; once full, it forgot the spend,
// and giving back would let the limit's holder act once more than its rate.
func Refundable(r config.Rate, n int, elapsed time.Duration) bool {
	return r.Count > 0 && elapsed >= 0 && elapsed < time.Duration(n)*r.Per/time.Duration(r.Count)
}

// refill brings l's bucket up to now (a new bucket starts full).
func (b *Buckets) refill(now time.Time, l Limit) *bucket {
	capacity := float64(l.Rate.Count)
	bk, ok := b.m[l.Key]
	if !ok {
		bk = &bucket{level: capacity, at: now}
		b.m[l.Key] = bk
	}
	if elapsed := now.Sub(bk.at); elapsed > 0 {
		bk.level = min(capacity, bk.level+capacity*elapsed.Seconds()/l.Rate.Per.Seconds())
		bk.at = now
	}
	return bk
}
