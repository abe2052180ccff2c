package api

import (
	"sync"
	"time"

	"github.com/mercamap/relay/internal/config"
)

// buckets are token buckets by key: each holds up to Rate.Count and refills evenly over
// Rate.Per. Keys are configured destination and account ids (looked up before a take),
// so the map cannot grow with what a client sends.
type buckets struct {
	mu sync.Mutex
	m  map[string]*bucket
}

type bucket struct {
	level float64 // tokens in the bucket at `at`
	at    time.Time
}

// limit is one bucket a request must find a token in.
type limit struct {
	key  string
	rate config.Rate
}

// take spends one token from every bucket of limits, or from none: when one is empty,
// ok is false and wait is how long until each has a token again.
func (b *buckets) take(now time.Time, limits ...limit) (ok bool, wait time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.m == nil {
		b.m = map[string]*bucket{}
	}
	for _, l := range limits {
		bk := b.refill(now, l)
		if bk.level < 1 {
			perToken := l.rate.Per / time.Duration(l.rate.Count)
			wait = max(wait, time.Duration((1-bk.level)*float64(perToken)))
		}
	}
	if wait > 0 {
		return false, wait
	}
	for _, l := range limits {
		b.m[l.key].level--
	}
	return true, 0
}

// refill brings l's bucket up to now (a new bucket starts full).
func (b *buckets) refill(now time.Time, l limit) *bucket {
	capacity := float64(l.rate.Count)
	bk, ok := b.m[l.key]
	if !ok {
		bk = &bucket{level: capacity, at: now}
		b.m[l.key] = bk
	}
	if elapsed := now.Sub(bk.at); elapsed > 0 {
		bk.level = min(capacity, bk.level+capacity*elapsed.Seconds()/l.rate.Per.Seconds())
		bk.at = now
	}
	return bk
}

// apiLimitsOf fills what a config left at zero (a test's hand-made config) with the
// defaults; the tokens are left out, so they are not kept twice.
func apiLimitsOf(api config.API) config.API {
	def := config.DefaultAPI()
	api.Tokens = nil
	if api.SubscriptionsPerToken <= 0 {
		api.SubscriptionsPerToken = def.SubscriptionsPerToken
	}
	if api.SubscriptionsPerAccount <= 0 {
		api.SubscriptionsPerAccount = def.SubscriptionsPerAccount
	}
	if api.TestsPerDestination.Count <= 0 || api.TestsPerDestination.Per <= 0 {
		api.TestsPerDestination = def.TestsPerDestination
	}
	if api.TestsPerAccount.Count <= 0 || api.TestsPerAccount.Per <= 0 {
		api.TestsPerAccount = def.TestsPerAccount
	}
	return api
}
