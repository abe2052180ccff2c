package api

import (
	"fmt"
	"net/http"

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
// our STS rate whoever asks. The buckets are the account's in Redis (store.Limiter),
// shared by every replica.
func (s *Server) allow(w http.ResponseWriter, r *http.Request, p principal, d destination.Destination, kind action) bool {
	lim := s.limits.Load()
	var limits []ratelimit.Limit
	if kind == testAction {
		limits = append(limits, ratelimit.Limit{Key: "test:destination:" + d.ID, What: "tests for a destination", Rate: lim.TestsPerDestination},
			ratelimit.Limit{Key: "test:account", What: "tests for an account", Rate: lim.TestsPerAccount})
	}
	if !p.admin {
		limits = append(limits, ratelimit.Limit{Key: "action:destination:" + d.ID, What: "actions for a destination", Rate: lim.ActionsPerDestination},
			ratelimit.Limit{Key: "action:account", What: "actions for an account", Rate: lim.ActionsPerAccount})
		if kind == replayAction {
			limits = append(limits, ratelimit.Limit{Key: "replay:destination:" + d.ID, What: "replays for a destination", Rate: lim.ReplaysPerDestination},
				ratelimit.Limit{Key: "replay:account", What: "replays for an account", Rate: lim.ReplaysPerAccount})
		}
	}
	v, err := s.limiter.Spend(r.Context(), d.Account, 1, limits...)
	switch {
	case err != nil:
		s.log.Warn("the action limits could not be read", "destination", d.ID, "error", err)
		writeError(w, errUnavailable("the relay could not check this account's limits (Redis did not answer); nothing was changed: try again"))
		return false
	case !v.OK:
		writeError(w, errExhausted(fmt.Sprintf("too many %s: %d per %s; try again later", v.Empty.What, v.Empty.Rate.Count, v.Empty.Rate.Per), v.Wait))
		return false
	}
	return true
}

// apiLimitsOf fills what a config left at zero (a test's hand-made config) with the
// defaults; the tokens are left out, so they are not kept twice.
func apiLimitsOf(api config.API) config.API {
	def := config.DefaultAPI()
	api.Tokens = nil
	if api.DestinationsPerAccount <= 0 {
		api.DestinationsPerAccount = def.DestinationsPerAccount
	}
	if api.SubscriptionsPerToken <= 0 {
		api.SubscriptionsPerToken = def.SubscriptionsPerToken
	}
	if api.SubscriptionsPerAccount <= 0 {
		api.SubscriptionsPerAccount = def.SubscriptionsPerAccount
	}
	if api.SignInLinkTTL <= 0 {
		api.SignInLinkTTL = def.SignInLinkTTL
	}
	if api.SessionTTL <= 0 {
		api.SessionTTL = def.SessionTTL
	}
	for _, r := range []struct{ got, def *config.Rate }{
		{&api.TestsPerDestination, &def.TestsPerDestination}, {&api.TestsPerAccount, &def.TestsPerAccount},
		{&api.ActionsPerDestination, &def.ActionsPerDestination}, {&api.ActionsPerAccount, &def.ActionsPerAccount},
		{&api.ReplaysPerDestination, &def.ReplaysPerDestination}, {&api.ReplaysPerAccount, &def.ReplaysPerAccount},
		{&api.DestinationChangesPerAccount, &def.DestinationChangesPerAccount},
		{&api.SignInsPerAccount, &def.SignInsPerAccount},
	} {
		if r.got.Count <= 0 || r.got.Per <= 0 {
			*r.got = *r.def
		}
	}
	return api
}
