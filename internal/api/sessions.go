package api

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/mercamap/relay/internal/config"
	"github.com/mercamap/relay/internal/ratelimit"
	"github.com/mercamap/relay/internal/signin"
	"github.com/mercamap/relay/internal/store"
)

// Console sign-in links ("Console sign-in links" in the contract): an admin mints a
// single-use code for an account, the console exchanges it for a session token that
// acts as an account:<id> token until it ends. Sessions live in Redis (store), so every
// replica accepts and refuses the same ones at once: no replica caches a lookup. Only
// digests are stored, and no code or token is ever logged or echoed.

// maxSessionBody bounds POST /v1/sessions's body, below api.max_body_bytes: it takes no
// token, and a code is under 300 bytes.
const maxSessionBody = 1024

// sessionRecheck is how often an open subscription of a session token asks Redis
// whether the session still holds: a sign-out or a revocation on any replica ends it
// within a second.
const sessionRecheck = 500 * time.Millisecond

// codeNotValid is the one answer to a code that was used, expired, revoked, never
// issued or not a code at all: nothing in it tells them apart.
func codeNotValid() *apiError {
	return errUnauthenticated("this sign-in link is not valid: it was used already, it expired, or it was never issued; ask for a new link")
}

// tokenNotValid is the answer to a bearer token no config holds and no session is.
func tokenNotValid() *apiError { return errUnauthenticated("the token is not valid") }

// accountServed reports whether acct is one of the accounts this replica routes (the
// file's and the API's): a session token naming another is refused before Redis is
// asked, a sign-in code once its account's sign-in limit is spent (createSession).
func (s *Server) accountServed(acct string) bool {
	m := s.accounts.Load()
	return m != nil && (*m)[acct]
}

// sessionPrincipal looks a session token up in Redis: the principal of a live session,
// 403 ACCESS_REVOKED (saying why) for one that ended, 401 for one Redis never held.
func (s *Server) sessionPrincipal(ctx context.Context, sec signin.Secret) (principal, *apiError) {
	if s.opts.Store == nil || !s.accountServed(sec.Account) {
		return principal{}, tokenNotValid()
	}
	ctx, cancel := context.WithTimeout(ctx, rememberTimeout)
	defer cancel()
	sess, err := s.opts.Store.LookupSession(ctx, sec.Account, sec.Digest)
	switch {
	case errors.Is(err, store.ErrNoSession):
		return principal{}, tokenNotValid()
	case err != nil:
		s.log.Warn("a session token could not be checked: redis did not answer", "account", sec.Account, "error", err)
		return principal{}, errUnavailable("the relay could not check this session (Redis did not answer): try again")
	}
	switch sess.Ended {
	case "":
		return principal{account: sec.Account, digest: sec.Digest, session: true, expires: sess.Expires}, nil
	case store.SessionSignedOut:
		return principal{}, errRevoked("this session was signed out: sign in again with a new link")
	case store.SessionRevoked:
		return principal{}, errRevoked("this session was ended by the platform's operators: sign in again with a new link")
	default:
		return principal{}, errRevoked("this session expired at " + sess.Expires.Format(time.RFC3339) + ": sign in again with a new link")
	}
}

// SignInLink is the answer to POST /v1/accounts/{id}/sign-in-links (the CLI decodes
// the same).
type SignInLink struct {
	URL       string    `json:"url"`
	ExpiresAt time.Time `json:"expires_at"`
}

// SessionOpened is the answer to POST /v1/sessions.
type SessionOpened struct {
	Token     string    `json:"token"`
	Scope     string    `json:"scope"`
	ExpiresAt time.Time `json:"expires_at"`
}

// sessionsOf is the account of the path whose sessions an admin acts on: a 403 (saying
// forbidden) to any other token, 404 for an unknown account, 409 for a relay without Redis.
func (s *Server) sessionsOf(w http.ResponseWriter, r *http.Request, p principal, forbidden string) (config.Account, bool) {
	if !p.admin {
		writeError(w, errForbidden(forbidden))
		return config.Account{}, false
	}
	a, ok := s.findAccount(w, r)
	if !ok {
		return a, false
	}
	if s.opts.Store == nil {
		writeError(w, errConflict("this relay keeps no sessions: it has no Redis"))
		return a, false
	}
	return a, true
}

// createSignInLink is POST /v1/accounts/{id}/sign-in-links (admin): a code good once
// within api.sign_in_link_ttl, in a console URL's fragment (a browser never sends it to
// a server, so it is in no log and no Referer).
func (s *Server) createSignInLink(w http.ResponseWriter, r *http.Request, p principal) {
	a, ok := s.sessionsOf(w, r, p, "only an admin token mints sign-in links")
	if !ok {
		return
	}
	text, code, err := signin.New(signin.Code, a.ID)
	if err != nil {
		s.internal(w, r, err)
		return
	}
	expires, err := s.opts.Store.AddSignInCode(r.Context(), a.ID, code.Digest, s.limits.Load().SignInLinkTTL)
	if err != nil {
		s.log.Warn("a sign-in link could not be minted: redis did not answer", "account", a.ID, "error", err)
		writeError(w, errUnavailable("the relay could not store the sign-in link (Redis did not answer): try again"))
		return
	}
	s.log.Info("sign-in link minted", "account", a.ID, "expires_at", expires)
	writeJSON(w, http.StatusCreated, SignInLink{URL: s.publicURL(r) + "/console/#code=" + text, ExpiresAt: expires})
}

// publicURL is api.public_url without its final slash; unset, the scheme and Host the
// request came with (https behind a proxy that says X-Forwarded-Proto: https). The Host
// has passed api.allowed_hosts.
func (s *Server) publicURL(r *http.Request) string {
	if u := s.limits.Load().PublicURL; u != "" {
		return strings.TrimRight(u, "/")
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	if fp := r.Header.Get("X-Forwarded-Proto"); fp == "https" || fp == "http" {
		scheme = fp
	}
	return scheme + "://" + r.Host
}

// createSession is POST /v1/sessions: no token, a body {"code"}. The code is used up
// and the session made in one Redis script, so two exchanges of one code open one
// session. A used, expired, revoked, unknown or malformed code gets one answer.
func (s *Server) createSession(w http.ResponseWriter, r *http.Request) {
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = http.MaxBytesReader(w, r.Body, maxSessionBody)
	}
	var b struct {
		Code *string `json:"code"`
	}
	if e := decodeStrict(r, &b, `the sign-in link's code: {"code":"…"}`); e != nil {
		writeError(w, e)
		return
	}
	if b.Code == nil || *b.Code == "" {
		writeError(w, errInvalid(`the body must hold the sign-in link's code: {"code":"…"}`))
		return
	}
	code, ok := signin.Parse(signin.Code, *b.Code)
	if !ok || s.opts.Store == nil || !config.ValidID(code.Account) {
		writeError(w, codeNotValid())
		return
	}
	lim := s.limits.Load()
	// Codes are 256 random bits, so this bounds the work one account's sign-ins cost,
	// not guessing; a flood naming one account holds back only that account's sign-ins.
	// It is spent for an account this relay does not serve too, so neither its 429 nor
	// its 401 tells an account that exists from one that does not.
	v, err := s.limiter.Spend(r.Context(), code.Account, 1, ratelimit.Limit{Key: "sign_in:account",
		What: "sign-ins for an account", Rate: lim.SignInsPerAccount})
	switch {
	case err != nil:
		s.log.Warn("the sign-in limit could not be read", "account", code.Account, "error", err)
		writeError(w, errUnavailable("the relay could not check this sign-in (Redis did not answer); the link was not used: try again"))
		return
	case !v.OK:
		writeError(w, errExhausted("too many sign-ins for this account; try again later", v.Wait))
		return
	case !s.accountServed(code.Account):
		writeError(w, codeNotValid())
		return
	}
	text, token, err := signin.New(signin.Token, code.Account)
	if err != nil {
		s.internal(w, r, err)
		return
	}
	sess, err := s.opts.Store.ExchangeSignInCode(r.Context(), code.Account, code.Digest, token.Digest, lim.SessionTTL)
	switch {
	case errors.Is(err, store.ErrCodeNotValid):
		writeError(w, codeNotValid())
		return
	case err != nil:
		s.log.Warn("a sign-in code could not be exchanged: redis did not answer", "account", code.Account, "error", err)
		writeError(w, errUnavailable("the relay could not check this sign-in link (Redis did not answer): try it again, or ask for a new one"))
		return
	}
	s.log.Info("console session opened", "account", code.Account, "expires_at", sess.Expires)
	writeJSON(w, http.StatusCreated, SessionOpened{Token: text, Scope: "account:" + code.Account, ExpiresAt: sess.Expires})
}

// deleteCurrentSession is DELETE /v1/sessions/current: the session of the token that
// asks ends, on every replica (each looks sessions up in Redis on every request, and
// its subscriptions recheck within sessionRecheck).
func (s *Server) deleteCurrentSession(w http.ResponseWriter, r *http.Request, p principal) {
	if !p.session {
		writeError(w, errConflict("this token is not a console session: a token of the config file ends when it leaves the file"))
		return
	}
	if _, err := s.opts.Store.EndSession(r.Context(), p.account, p.digest); err != nil {
		s.log.Warn("a session could not be signed out: redis did not answer", "account", p.account, "error", err)
		writeError(w, errUnavailable("the relay could not sign this session out (Redis did not answer): try again"))
		return
	}
	s.endSubscriptions(func(sub *subscription) bool { return sub.p.session && sub.digest == p.digest })
	s.log.Info("console session signed out", "account", p.account)
	noContent(w)
}

// deleteAccountSessions is DELETE /v1/accounts/{id}/sessions (admin): every session of
// the account ends, and every link not used yet, in one step whatever their number.
func (s *Server) deleteAccountSessions(w http.ResponseWriter, r *http.Request, p principal) {
	a, ok := s.sessionsOf(w, r, p, "only an admin token ends an account's sessions")
	if !ok {
		return
	}
	if err := s.opts.Store.EndSessions(r.Context(), a.ID); err != nil {
		s.log.Warn("the account's console sessions could not be ended: redis did not answer", "account", a.ID, "error", err)
		writeError(w, errUnavailable("the account's sessions could not be ended (Redis did not answer): try again"))
		return
	}
	s.endSubscriptions(func(sub *subscription) bool { return sub.p.session && sub.p.account == a.ID })
	s.log.Info("every console session of the account ended", "account", a.ID)
	noContent(w)
}

func noContent(w http.ResponseWriter) {
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusNoContent)
}

// endSubscriptions ends this replica's open subscriptions that match (the others'
// end at their next recheck).
func (s *Server) endSubscriptions(match func(*subscription) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for sub := range s.subs {
		if match(sub) {
			sub.cancel()
		}
	}
}

// watchSession ends a session's subscription (cancel) once the session is over: signed
// out or revoked on any replica, or expired. A Redis that does not answer ends nothing:
// the stream's own reads fail then.
func (s *Server) watchSession(ctx context.Context, cancel context.CancelFunc, p principal) {
	t := time.NewTicker(sessionRecheck)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		lctx, lcancel := context.WithTimeout(ctx, sessionRecheck)
		sess, err := s.opts.Store.LookupSession(lctx, p.account, p.digest)
		lcancel()
		if errors.Is(err, store.ErrNoSession) || err == nil && sess.Ended != "" {
			s.log.Info("subscription closed: its console session ended", "account", p.account)
			cancel()
			return
		}
	}
}
