package api

import (
	"context"
	"errors"
	"net/http"
	"strconv"

	"github.com/mercamap/relay/internal/stream"
)

// resolveChannel finds a channel and checks p may follow it. Another account's channel
// answers 403 ACCESS_REVOKED, as the contract says; a channel that does not exist, 404.
func (s *Server) resolveChannel(p principal, name string) (stream.Channel, *apiError) {
	kind, id, ok := stream.ParseName(name)
	if !ok {
		return stream.Channel{}, errNotFound("no channel " + strconv.Quote(name) + ": channels are destination:<id> or account:<id>")
	}
	if kind == stream.KindAccount {
		if !p.sees(id) {
			return stream.Channel{}, errRevoked("this token may not follow another account's channel")
		}
		if !s.accountKnown(id) {
			return stream.Channel{}, errNotFound("no account " + strconv.Quote(id))
		}
	}
	ch, err := s.opts.Streams.Resolve(name)
	if err != nil {
		return stream.Channel{}, errNotFound("no channel " + strconv.Quote(name))
	}
	if !p.sees(ch.Account) {
		return stream.Channel{}, errRevoked("this token may not follow another account's channel")
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
	sub := &subscription{digest: p.digest, channel: ch.Name, cancel: cancel}
	if !s.register(sub) {
		writeError(w, &apiError{http.StatusServiceUnavailable, "UNAVAILABLE", "the relay is shutting down"})
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

func (s *Server) register(sub *subscription) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	s.subs[sub] = struct{}{}
	return true
}

func (s *Server) unregister(sub *subscription) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.subs, sub)
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
