package api

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"
	"sync"

	"github.com/mercamap/relay/internal/config"
)

// principal is who a valid token speaks for.
type principal struct {
	admin   bool
	account string   // the account an account:<id> token is limited to
	digest  [32]byte // sha256 of the token: how a subscription is re-checked on reload
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
type tokens struct {
	mu      sync.RWMutex
	current []tokenEntry
	// known holds every token digest configured since the process started: a token in
	// it and no longer current was revoked (403), one never in it is unknown (401).
	known map[[32]byte]struct{}
}

func newTokens() *tokens { return &tokens{known: map[[32]byte]struct{}{}} }

func (t *tokens) set(list []config.Token) {
	entries := make([]tokenEntry, 0, len(list))
	for _, tok := range list {
		if tok.Token == "" {
			continue
		}
		entries = append(entries, tokenEntry{digest: sha256.Sum256([]byte(tok.Token)), scope: tok.Scope})
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.current = entries
	for _, e := range entries {
		t.known[e.digest] = struct{}{}
	}
}

// lookup finds the current scope of a token digest, comparing against every configured
// token in constant time (no early exit, so timing does not tell which one matched).
// revoked is true for a digest that was valid once and is not now.
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

// authenticate reads the bearer token of r. The token is never logged or echoed.
func (t *tokens) authenticate(r *http.Request) (principal, *apiError) {
	h := r.Header.Get("Authorization")
	scheme, tok, found := strings.Cut(h, " ")
	tok = strings.TrimSpace(tok)
	if !found || !strings.EqualFold(scheme, "Bearer") || tok == "" {
		return principal{}, errUnauthenticated("an Authorization: Bearer <token> header is required")
	}
	p, ok, revoked := t.lookup(sha256.Sum256([]byte(tok)))
	switch {
	case ok:
		return p, nil
	case revoked:
		return principal{}, errRevoked("this token was valid and has been revoked")
	}
	return principal{}, errUnauthenticated("the token is not valid")
}
