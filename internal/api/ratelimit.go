package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/mercamap/relay/internal/config"
	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/dispatch"
	"github.com/mercamap/relay/internal/ratelimit"
	"github.com/mercamap/relay/internal/registry"
	"github.com/mercamap/relay/internal/store"
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
// Retry-After (or 503) and returns false. An account token's actions take from the
// actions buckets, its replays also from the replays ones; an admin token's (our
// operators, acting for a customer or in an incident) are not counted, except tests:
// those spend our STS rate whoever asks. The buckets are the account's in Redis
// (store.Limiter), shared by every replica. Only what is carried out spends: the caller
// settles the grant with the action's outcome, and a refusal gives the tokens back.
func (s *Server) allow(w http.ResponseWriter, r *http.Request, p principal, d destination.Destination, kind action) (grant, bool) {
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
	return s.spend(w, r, d.Account, limits...)
}

// A grant is what one request spent of its account's limits: the tokens, and when the
// limiter took them (what a refund needs).
type grant struct {
	account string
	limits  []ratelimit.Limit
	at      time.Time
}

// spend takes one token from every bucket of limits, all of account's, or answers 429
// RESOURCE_EXHAUSTED naming the limit that waits longest (503 when Redis did not
// answer) and returns false. Callers spend before they change anything, so either
// answer says nothing was changed.
func (s *Server) spend(w http.ResponseWriter, r *http.Request, account string, limits ...ratelimit.Limit) (grant, bool) {
	v, err := s.limiter.Spend(r.Context(), account, 1, limits...)
	switch {
	case err != nil:
		s.log.Warn("a rate limit could not be read", "account", account, "error", err)
		writeError(w, errUnavailable("the relay could not check this account's limits (Redis did not answer); nothing was changed: try again"))
		return grant{}, false
	case !v.OK:
		writeError(w, errExhausted(fmt.Sprintf("too many %s: %d per %s; try again later", v.Empty.What, v.Empty.Rate.Count, v.Empty.Rate.Per), v.Wait))
		return grant{}, false
	}
	return grant{account: account, limits: limits, at: v.At}, true
}

// settle gives g's tokens back when err is a refusal (refused): the action was not
// carried out, so it spends no limit. Any other outcome keeps them: a carried-out
// action, and an error that leaves unknown whether it was (Redis did not answer).
func (s *Server) settle(ctx context.Context, g grant, err error) {
	if refused(err) {
		s.refund(ctx, g)
	}
}

// refund gives g's tokens back (ratelimit.Limiter.Refund). One that cannot be given
// back stays spent: the customer waits a little longer, the limit still holds.
func (s *Server) refund(ctx context.Context, g grant) {
	if len(g.limits) == 0 {
		return
	}
	if err := s.limiter.Refund(context.WithoutCancel(ctx), g.account, 1, g.at, g.limits...); err != nil {
		s.log.Warn("a refused request's rate limit tokens could not be given back", "account", g.account, "error", err)
	}
}

// refused reports whether err is an answer that nothing was done: the request was
// refused (400, 403, 404, 409, or 429 for what is not the customer's limit), found so
// only by the action itself, in Redis or in a budget of ours. Such a refusal costs Redis
// what a read does, and is bounded like reads (api.max_requests_per_token and
// _per_account): it needs no rate of its own.
func refused(err error) bool {
	var tooOld store.ErrTooOld
	var mismatch store.ErrSinceMismatch
	var notActive store.ErrNotActive
	var notRetryable store.ErrNotRetryable
	var held dispatch.HeldBack
	switch {
	case err == nil:
		return false
	case errors.As(err, &tooOld), errors.As(err, &mismatch), errors.As(err, &notActive),
		errors.As(err, &notRetryable), errors.As(err, &held):
		return true
	}
	for _, r := range []error{destination.ErrNotFound, store.ErrNoSuchEvent, dispatch.ErrOperatorDisabled,
		store.ErrNoSuchAttempt, store.ErrEventGone, store.ErrRetryQueueFull, registry.ErrExists, registry.ErrCapped} {
		if errors.Is(err, r) {
			return true
		}
	}
	return false
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
