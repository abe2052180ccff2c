package api

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/mercamap/relay/internal/config"
	"github.com/mercamap/relay/internal/signin"
	"github.com/mercamap/relay/internal/store"
)

// principal is who a valid token speaks for.
type principal struct {
	admin   bool
	account string   // the account an account:<id> token is limited to
	digest  [32]byte // sha256 of the token: how a subscription is re-checked on reload
	// session is a console session's token (sessions.go): an account:<id> token that
	// lives in Redis until expires, not in the config.
	session bool
	expires time.Time
}

// sees reports whether p may see and act on acct's destinations and channels.
func (p principal) sees(acct string) bool { return p.admin || p.account == acct }

type tokenEntry struct {
	digest [32]byte
	scope  string
}

// tokens holds the configured tokens as sha256 digests only. Comparing digests gives
// equal-length inputs to subtle.ConstantTimeCompare (which leaks length otherwise), and
// no token value is kept beyond the config it came in.
//
// Every digest ever configured is also kept in Redis (store.RememberTokens), so a token
// dropped from the config answers 403 ACCESS_REVOKED on every replica and after every
// restart, not 401 as if it had never been: only the digest is stored, never the token.
type tokens struct {
	store *store.Store // nil: revocations are known to this process only (tests)
	log   *slog.Logger

	mu      sync.RWMutex
	current []tokenEntry
	// known holds the token digests this process knows were configured once: a token
	// in it and no longer current was revoked (403). One not in it is looked up in
	// Redis; never configured anywhere, it is unknown (401).
	known map[[32]byte]struct{}
	// unsaved holds configured digests Redis has not taken yet (it was unreachable);
	// they are saved on the next lookup that reaches Redis.
	unsaved [][32]byte
}

// rememberTimeout bounds the Redis step of a token change or of an unknown token's check.
const rememberTimeout = 2 * time.Second

func newTokens(st *store.Store, log *slog.Logger) *tokens {
	return &tokens{store: st, log: log, known: map[[32]byte]struct{}{}}
}

func (t *tokens) set(list []config.Token) {
	entries := make([]tokenEntry, 0, len(list))
	digests := make([][32]byte, 0, len(list))
	for _, tok := range list {
		if tok.Token == "" {
			continue
		}
		d := sha256.Sum256([]byte(tok.Token))
		entries = append(entries, tokenEntry{digest: d, scope: tok.Scope})
		digests = append(digests, d)
	}
	t.mu.Lock()
	t.current = entries
	for _, d := range digests {
		t.known[d] = struct{}{}
	}
	t.unsaved = append(t.unsaved, digests...)
	t.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), rememberTimeout)
	defer cancel()
	t.save(ctx)
}

// save writes the unsaved digests to Redis; on failure they stay for the next try.
func (t *tokens) save(ctx context.Context) {
	if t.store == nil {
		return
	}
	t.mu.Lock()
	pending := t.unsaved
	t.unsaved = nil
	t.mu.Unlock()
	if len(pending) == 0 {
		return
	}
	if err := t.store.RememberTokens(ctx, pending); err != nil {
		t.log.Warn("configured api tokens not recorded in redis yet; retried on the next unknown token", "error", err)
		t.mu.Lock()
		t.unsaved = append(pending, t.unsaved...)
		t.mu.Unlock()
	}
}

// lookup finds the current scope of a token digest, comparing against every configured
// token in constant time (no early exit, so timing does not tell which one matched).
// revoked is true for a digest this process knows was valid once and is not now.
func (t *tokens) lookup(digest [32]byte) (p principal, ok, revoked bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	scope := ""
	for _, e := range t.current {
		if subtle.ConstantTimeCompare(digest[:], e.digest[:]) == 1 {
			scope, ok = e.scope, true
		}
	}
	if !ok {
		_, revoked = t.known[digest]
		return principal{}, false, revoked
	}
	p.digest = digest
	if scope == config.AdminScope {
		p.admin = true
	} else if acct, isAccount := strings.CutPrefix(scope, config.AccountScopePrefix); isAccount && acct != "" {
		p.account = acct
	} else {
		return principal{}, false, false // config validation refuses other scopes
	}
	return p, true, false
}

// revokedElsewhere asks Redis whether a digest this process never saw configured was
// configured once (by another replica, or before a restart). A yes is kept in memory.
// Redis unreachable: not known to be revoked (the token is refused either way).
func (t *tokens) revokedElsewhere(ctx context.Context, digest [32]byte) bool {
	if t.store == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, rememberTimeout)
	defer cancel()
	t.save(ctx)
	known, err := t.store.TokenKnown(ctx, digest)
	if err != nil {
		t.log.Warn("cannot tell a revoked api token from an unknown one: redis unreachable", "error", err)
		return false
	}
	if known {
		t.mu.Lock()
		t.known[digest] = struct{}{}
		t.mu.Unlock()
	}
	return known
}

// authenticate reads the bearer token of r: a config token, else a console session's
// (looked up in Redis on every request, so a sign-out holds on every replica at once).
// The token is never logged or echoed.
func (s *Server) authenticate(r *http.Request) (principal, *apiError) {
	h := r.Header.Get("Authorization")
	scheme, tok, found := strings.Cut(h, " ")
	tok = strings.TrimSpace(tok)
	if !found || !strings.EqualFold(scheme, "Bearer") || tok == "" {
		return principal{}, errUnauthenticated("an Authorization: Bearer <token> header is required")
	}
	digest := sha256.Sum256([]byte(tok))
	p, ok, revoked := s.tokens.lookup(digest)
	switch {
	case ok:
		return p, nil
	case revoked:
		return principal{}, errRevoked("this token was valid and has been revoked")
	}
	if sec, isSession := signin.Parse(signin.Token, tok); isSession {
		return s.sessionPrincipal(r.Context(), sec)
	}
	if s.tokens.revokedElsewhere(r.Context(), digest) {
		return principal{}, errRevoked("this token was valid and has been revoked")
	}
	return principal{}, tokenNotValid()
}
