package api

import (
	"fmt"
	"net/http"
	"time"

	"github.com/mercamap/relay/internal/config"
	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/ratelimit"
)

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
	var limits []ratelimit.Limit
	if kind == testAction {
		limits = append(limits, ratelimit.Limit{Key: "test:destination:" + d.ID, What: "tests for a destination", Rate: lim.TestsPerDestination},
			ratelimit.Limit{Key: "test:account:" + d.Account, What: "tests for an account", Rate: lim.TestsPerAccount})
	}
	if !p.admin {
		limits = append(limits, ratelimit.Limit{Key: "action:destination:" + d.ID, What: "actions for a destination", Rate: lim.ActionsPerDestination},
			ratelimit.Limit{Key: "action:account:" + d.Account, What: "actions for an account", Rate: lim.ActionsPerAccount})
		if kind == replayAction {
			limits = append(limits, ratelimit.Limit{Key: "replay:destination:" + d.ID, What: "replays for a destination", Rate: lim.ReplaysPerDestination},
				ratelimit.Limit{Key: "replay:account:" + d.Account, What: "replays for an account", Rate: lim.ReplaysPerAccount})
		}
	}
	ok, wait, empty := s.actions.TakeWhich(time.Now(), limits...)
	if !ok {
		writeError(w, errExhausted(fmt.Sprintf("too many %s: %d per %s; try again later", empty.What, empty.Rate.Count, empty.Rate.Per), wait))
	}
	return ok
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
