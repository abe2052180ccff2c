package api

import (
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/mercamap/relay/internal/config"
	"github.com/mercamap/relay/internal/destination"
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

// limit is one bucket a request must find a token in; what names it in a 429's message
// ("replays for a destination").
type limit struct {
	key  string
	what string
	rate config.Rate
}

// take spends one token from every bucket of limits, or from none: when one is empty,
// ok is false, wait is how long until each has a token again and empty is the bucket
// that waits longest.
func (b *buckets) take(now time.Time, limits ...limit) (ok bool, wait time.Duration, empty limit) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.m == nil {
		b.m = map[string]*bucket{}
	}
	for _, l := range limits {
		bk := b.refill(now, l)
		if bk.level < 1 {
			perToken := l.rate.Per / time.Duration(l.rate.Count)
			if w := time.Duration((1 - bk.level) * float64(perToken)); w > wait {
				wait, empty = w, l
			}
		}
	}
	if wait > 0 {
		return false, wait, empty
	}
	for _, l := range limits {
		b.m[l.key].level--
	}
	return true, 0, limit{}
}

// An action is a request that changes a destination; its kind says which buckets it
// takes a token from.
type action int

const (
	plainAction  action = iota // pause, activate without a replay, retry
	testAction                 // "send a test": a probe and a session on our STS principal
	replayAction               // a replay, or an activation with one: the whole log may go again
)

// allow spends what an action of p on d costs, or answers 429 RESOURCE_EXHAUSTED with
// Retry-After and returns false. An account token's actions take from the actions
// buckets, its replays also from the replays ones; an admin token's (our operators,
// acting for a customer or in an incident) are not counted, except tests: those spend
// our STS rate whoever asks.
func (s *Server) allow(w http.ResponseWriter, p principal, d destination.Destination, kind action) bool {
	lim := s.limits.Load()
	var limits []limit
	if kind == testAction {
		limits = append(limits, limit{"test:destination:" + d.ID, "tests for a destination", lim.TestsPerDestination},
			limit{"test:account:" + d.Account, "tests for an account", lim.TestsPerAccount})
	}
	if !p.admin {
		limits = append(limits, limit{"action:destination:" + d.ID, "actions for a destination", lim.ActionsPerDestination},
			limit{"action:account:" + d.Account, "actions for an account", lim.ActionsPerAccount})
		if kind == replayAction {
			limits = append(limits, limit{"replay:destination:" + d.ID, "replays for a destination", lim.ReplaysPerDestination},
				limit{"replay:account:" + d.Account, "replays for an account", lim.ReplaysPerAccount})
		}
	}
	ok, wait, empty := s.actions.take(time.Now(), limits...)
	if !ok {
		writeError(w, errExhausted(fmt.Sprintf("too many %s: %d per %s; try again later", empty.what, empty.rate.Count, empty.rate.Per), wait))
	}
	return ok
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
	for _, r := range []struct{ got, def *config.Rate }{
		{&api.TestsPerDestination, &def.TestsPerDestination}, {&api.TestsPerAccount, &def.TestsPerAccount},
		{&api.ActionsPerDestination, &def.ActionsPerDestination}, {&api.ActionsPerAccount, &def.ActionsPerAccount},
		{&api.ReplaysPerDestination, &def.ReplaysPerDestination}, {&api.ReplaysPerAccount, &def.ReplaysPerAccount},
	} {
		if r.got.Count <= 0 || r.got.Per <= 0 {
			*r.got = *r.def
		}
	}
	return api
}
