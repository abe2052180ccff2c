package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/mercamap/relay/internal/stream"
)

// notYours is the answer to an account token for another account's channel and for a
// destination channel that does not exist, alike, so the token cannot learn which
// destination ids exist (the card routes answer 404 alike for the same reason; channels
// keep the contract's 403 for another account's).
const notYours = "this token may not follow that channel: it is not one of its account's"

// resolveChannel finds a channel and checks p may follow it. Another account's channel
// answers 403 ACCESS_REVOKED, as the contract says, and so does, to an account token, a
// destination channel that does not exist; to an admin token, that one is 404.
func (s *Server) resolveChannel(p principal, name string) (stream.Channel, *apiError) {
	kind, id, ok := stream.ParseName(name)
	if !ok {
		return stream.Channel{}, errNotFound("no channel " + strconv.Quote(name) + ": channels are destination:<id> or account:<id>")
	}
	if kind == stream.KindAccount {
		if !p.sees(id) {
			return stream.Channel{}, errRevoked(notYours)
		}
		if !s.accountKnown(id) {
			return stream.Channel{}, errNotFound("no account " + strconv.Quote(id))
		}
	}
	ch, err := s.opts.Streams.Resolve(name)
	if err != nil && !p.admin {
		return stream.Channel{}, errRevoked(notYours)
	}
	if err != nil {
		return stream.Channel{}, errNotFound("no channel " + strconv.Quote(name))
	}
	if !p.sees(ch.Account) {
		return stream.Channel{}, errRevoked(notYours)
	}
	return ch, nil
}

func (s *Server) channel(w http.ResponseWriter, r *http.Request, p principal) (stream.Channel, bool) {
	ch, e := s.resolveChannel(p, r.PathValue("channel"))
	if e != nil {
		writeError(w, e)
		return stream.Channel{}, false
	}
	return ch, true
}

func (s *Server) snapshot(w http.ResponseWriter, r *http.Request, p principal) {
	ch, ok := s.channel(w, r, p)
	if !ok {
		return
	}
	snap, err := s.opts.Streams.Snapshot(r.Context(), ch)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, snap)
}

func (s *Server) events(w http.ResponseWriter, r *http.Request, p principal) {
	ch, ok := s.channel(w, r, p)
	if !ok {
		return
	}
	after, e := intParam(r, "after", 0, 0)
	if e != nil {
		writeError(w, e)
		return
	}
	limit, e := intParam(r, "limit", stream.DefaultReplayLimit, 1)
	if e != nil {
		writeError(w, e)
		return
	}
	page, err := s.opts.Streams.Replay(r.Context(), ch, after, min(limit, stream.MaxReplayLimit))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, page)
}

// subscription is one open SSE stream, re-checked when tokens or the config change.
type subscription struct {
	digest  [32]byte
	account string // the account of an account token; "" for admin
	channel string
	cancel  context.CancelFunc
}

func (s *Server) subscribe(w http.ResponseWriter, r *http.Request, p principal) {
	ch, ok := s.channel(w, r, p)
	if !ok {
		return
	}
	after, err := stream.ParseLastEventID(r.Header.Get("Last-Event-ID"))
	if err != nil {
		writeError(w, errInvalid(err.Error()))
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	sub := &subscription{digest: p.digest, account: p.account, channel: ch.Name, cancel: cancel}
	if e := s.register(sub); e != nil {
		writeError(w, e)
		return
	}
	defer s.unregister(sub)
	// A reload between the token check and register would have missed this one.
	if !s.allowed(sub) {
		writeError(w, errRevoked("this token was valid and has been revoked"))
		return
	}
	if err := s.opts.Streams.Subscribe(ctx, w, ch, after); err != nil && !errors.Is(err, context.Canceled) {
		s.internal(w, r, err) // only before the stream started: Subscribe reads first
	}
}

// register counts sub in, unless its token or its account holds as many subscriptions
// as the config allows (429 RESOURCE_EXHAUSTED: one account must not take the live
// transport from the others), or the relay is shutting down.
func (s *Server) register(sub *subscription) *apiError {
	lim := s.limits.Load()
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closing:
		return &apiError{status: http.StatusServiceUnavailable, code: "UNAVAILABLE", message: "the relay is shutting down"}
	case s.perToken[sub.digest] >= lim.SubscriptionsPerToken:
		return errExhausted(fmt.Sprintf("this token holds %d open subscriptions, the most api.subscriptions_per_token allows: close one first", lim.SubscriptionsPerToken), 0)
	case sub.account != "" && s.perAccount[sub.account] >= lim.SubscriptionsPerAccount:
		return errExhausted(fmt.Sprintf("this account's tokens hold %d open subscriptions, the most api.subscriptions_per_account allows: close one first", lim.SubscriptionsPerAccount), 0)
	}
	s.subs[sub] = struct{}{}
	s.perToken[sub.digest]++
	if sub.account != "" {
		s.perAccount[sub.account]++
	}
	return nil
}

func (s *Server) unregister(sub *subscription) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.subs[sub]; !ok {
		return
	}
	delete(s.subs, sub)
	if s.perToken[sub.digest]--; s.perToken[sub.digest] <= 0 {
		delete(s.perToken, sub.digest)
	}
	if sub.account != "" {
		if s.perAccount[sub.account]--; s.perAccount[sub.account] <= 0 {
			delete(s.perAccount, sub.account)
		}
	}
}

// recheckSubscriptions ends every open subscription whose token is no longer valid or
// no longer allows its channel (revoked, scope changed, destination removed).
func (s *Server) recheckSubscriptions() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for sub := range s.subs {
		if !s.allowed(sub) {
			s.log.Info("subscription closed: its token or channel is no longer allowed", "channel", sub.channel)
			sub.cancel()
		}
	}
}

// allowed reports whether sub's token is still valid and still allows its channel.
func (s *Server) allowed(sub *subscription) bool {
	p, ok, _ := s.tokens.lookup(sub.digest)
	if !ok {
		return false
	}
	_, e := s.resolveChannel(p, sub.channel)
	return e == nil
}

// CloseStreams ends every open subscription and refuses new ones: http.Server.Shutdown
// does not wait well for streams that never end on their own (register it with
// RegisterOnShutdown).
func (s *Server) CloseStreams() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closing = true
	for sub := range s.subs {
		sub.cancel()
	}
}
