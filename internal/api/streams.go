package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

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

// subscription is one open SSE stream, re-checked when tokens or the config change. A
// multiplexed one carries several channels and counts as one against the caps.
type subscription struct {
	p        principal // who opened it: a session's is rechecked in Redis (watchSession)
	digest   [32]byte
	account  string // the account of an account token; "" for admin
	channels []string
	cancel   context.CancelFunc
}

// MaxMultiplexChannels is the most channels one multiplexed subscription may carry: a
// page with more opens one more subscription for each further hundred.
const MaxMultiplexChannels = 100

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
	s.stream(w, r, p, []stream.Start{{Channel: ch, After: after}}, false)
}

// subscribeMany is GET /v1/streams/subscribe?channel=<name>[ <sequence>]&channel=…:
// several channels on one stream, each checked as the single-channel route checks it
// and answering as it does for the first it refuses. A sequence after the name resumes
// that channel after it (the frame ids read "<channel> <sequence>"); without one the
// channel starts at its current sequence. Last-Event-ID is not read: one id cannot say
// where each channel was. The space is written "+" or "%20" in the query; "%2B" is a
// plus sign, which ids may hold (config's idPattern), so it is part of the name.
func (s *Server) subscribeMany(w http.ResponseWriter, r *http.Request, p principal) {
	values := r.URL.Query()["channel"]
	switch {
	case len(values) == 0:
		writeError(w, errInvalid("name the channels to follow: ?channel=destination:<id>&channel=…"))
		return
	case len(values) > MaxMultiplexChannels:
		writeError(w, errInvalid(fmt.Sprintf("%d channels on one subscription; at most %d: open another for the rest", len(values), MaxMultiplexChannels)))
		return
	}
	starts := make([]stream.Start, 0, len(values))
	seen := map[string]bool{}
	for _, v := range values {
		name, after, e := channelAfter(v)
		if e != nil {
			writeError(w, e)
			return
		}
		if seen[name] {
			writeError(w, errInvalid("channel "+strconv.Quote(name)+" is named twice"))
			return
		}
		seen[name] = true
		ch, e := s.resolveChannel(p, name)
		if e != nil {
			if after < 0 && plusSequence(name) {
				e.message += " (" + spaceBeforeSequence + ")"
			}
			writeError(w, e)
			return
		}
		starts = append(starts, stream.Start{Channel: ch, After: after})
	}
	s.stream(w, r, p, starts, true)
}

// spaceBeforeSequence says how a sequence follows a channel's name in the query.
const spaceBeforeSequence = `the sequence to resume after follows the name after a space, written "+" or "%20" in the query; "%2B" is a plus sign, part of the name`

// channelAfter reads one channel value of subscribeMany: the name, and the sequence to
// resume after when a space follows the name (-1 without one).
func channelAfter(v string) (name string, after int64, e *apiError) {
	name, seq, ok := strings.Cut(v, " ")
	if !ok {
		return v, -1, nil
	}
	after, err := strconv.ParseInt(seq, 10, 64)
	if err != nil || after < 0 {
		return "", 0, errInvalid("channel " + strconv.Quote(v) + ": " + spaceBeforeSequence + ", a whole number")
	}
	return name, after, nil
}

// plusSequence reports whether name ends in "+<digits>": most likely a sequence written
// "%2B" in the query, which a refusal of that name then points out.
func plusSequence(name string) bool {
	i := strings.LastIndexByte(name, '+')
	if i < 0 || i == len(name)-1 {
		return false
	}
	for _, c := range name[i+1:] {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// stream counts a subscription in and streams its channels until the client goes, the
// relay shuts down or a reload no longer allows one of them.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, p principal, starts []stream.Start, many bool) {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	sub := &subscription{p: p, digest: p.digest, account: p.account, cancel: cancel}
	for _, st := range starts {
		sub.channels = append(sub.channels, st.Channel.Name)
	}
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
	if p.session {
		go s.watchSession(ctx, cancel, p)
	}
	var err error
	if many {
		err = s.opts.Streams.SubscribeMany(ctx, w, starts)
	} else {
		err = s.opts.Streams.Subscribe(ctx, w, starts[0].Channel, starts[0].After)
	}
	if err != nil && !errors.Is(err, context.Canceled) {
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
// no longer allows one of its channels (revoked, scope changed, destination removed).
func (s *Server) recheckSubscriptions() {
	s.endSubscriptions(func(sub *subscription) bool {
		if s.allowed(sub) {
			return false
		}
		s.log.Info("subscription closed: its token or channel is no longer allowed", "channels", strings.Join(sub.channels, ","))
		return true
	})
}

// allowed reports whether sub's token is still valid and still allows its channels.
func (s *Server) allowed(sub *subscription) bool {
	p := sub.p
	if p.session {
		// Its session is rechecked in Redis by watchSession; here only its account.
		if !s.accountServed(p.account) {
			return false
		}
	} else if current, ok, _ := s.tokens.lookup(sub.digest); ok {
		p = current
	} else {
		return false
	}
	for _, name := range sub.channels {
		if _, e := s.resolveChannel(p, name); e != nil {
			return false
		}
	}
	return true
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
