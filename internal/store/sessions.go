package store

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Console sessions and the sign-in codes that open them. Every key is in the account's
// slot and named by a secret's SHA-256 digest, never by the secret. A per-account epoch
// ends every session and unused code of the account in one INCR: each records the epoch
// it was made in, and one made before the current epoch is over. Expiries are on Redis's
// clock, so every replica agrees on them.

// signInCodeKey holds an unused code: the epoch it was made in, gone at its expiry.
func signInCodeKey(acct string, digest [32]byte) string {
	return "relay:{" + acct + "}:signin:" + hex.EncodeToString(digest[:])
}

// sessionKey is a session: a hash of its epoch, its end (ms, Redis's clock) and, once
// signed out, out. It is kept SessionKept past its end, so a token used after it reads
// as ended, not as unknown.
func sessionKey(acct string, digest [32]byte) string {
	return "relay:{" + acct + "}:session:" + hex.EncodeToString(digest[:])
}

// sessionEpochKey is the account's session epoch (absent: 0).
func sessionEpochKey(acct string) string { return "relay:{" + acct + "}:sessions:epoch" }

// SessionKept is how long a session's record outlives its end, so that its token is
// answered "ended" (and why) rather than "unknown" for that long.
const SessionKept = 24 * time.Hour

// ErrCodeNotValid is a sign-in code that was used, expired, ended by a revocation, or
// never issued: one error for all, so no answer tells them apart.
var ErrCodeNotValid = errors.New("sign-in code not valid")

// ErrNoSession is a session token Redis holds nothing of (never issued, or ended more
// than SessionKept ago).
var ErrNoSession = errors.New("no such session")

// How a session ended.
const (
	SessionSignedOut = "signed_out" // DELETE /v1/sessions/current
	SessionRevoked   = "revoked"    // every session of the account ended (EndSessions)
	SessionExpired   = "expired"    // its time ran out
)

// Session is what Redis holds of one: when it ends, and, once over, why ("": live).
type Session struct {
	Expires time.Time
	Ended   string
}

// addCodeScript records a code: KEYS code, epoch; ARGV ttl ms. It answers the code's
// expiry (ms).
var addCodeScript = redis.NewScript(luaNow + `
local epoch = redis.call('GET', KEYS[2]) or '0'
redis.call('SET', KEYS[1], epoch, 'PX', ARGV[1])
return now + tonumber(ARGV[1])
`)

// AddSignInCode records a sign-in code of acct by its digest, usable once within ttl,
// and returns when it expires.
func (s *Store) AddSignInCode(ctx context.Context, acct string, code [32]byte, ttl time.Duration) (time.Time, error) {
	ms, err := addCodeScript.Run(ctx, s.rdb, []string{signInCodeKey(acct, code), sessionEpochKey(acct)},
		max(ttl.Milliseconds(), 1)).Int64()
	if err != nil {
		return time.Time{}, err
	}
	return time.UnixMilli(ms).UTC(), nil
}

// exchangeScript consumes a code and opens a session in one step, so two exchanges of
// one code make one session: KEYS code, session, epoch; ARGV session ttl ms, kept ms.
// It answers {1, end ms}, or {0} for a code that is gone or of an older epoch.
var exchangeScript = redis.NewScript(luaNow + `
local made_in = redis.call('GET', KEYS[1])
if not made_in then return {0} end
redis.call('DEL', KEYS[1])
local epoch = redis.call('GET', KEYS[3]) or '0'
if made_in ~= epoch then return {0} end
local ends = now + tonumber(ARGV[1])
redis.call('HSET', KEYS[2], 'epoch', epoch, 'exp', ends)
redis.call('PEXPIREAT', KEYS[2], ends + tonumber(ARGV[2]))
return {1, ends}
`)

// ExchangeSignInCode uses up the code of acct with digest code and opens the session
// whose token has digest token, lasting ttl. ErrCodeNotValid: the code was used,
// expired, revoked or never issued.
func (s *Store) ExchangeSignInCode(ctx context.Context, acct string, code, token [32]byte, ttl time.Duration) (Session, error) {
	res, err := exchangeScript.Run(ctx, s.rdb, []string{signInCodeKey(acct, code), sessionKey(acct, token), sessionEpochKey(acct)},
		max(ttl.Milliseconds(), 1), SessionKept.Milliseconds()).Int64Slice()
	switch {
	case err != nil:
		return Session{}, err
	case len(res) == 2 && res[0] == 1:
		return Session{Expires: time.UnixMilli(res[1]).UTC()}, nil
	case len(res) == 1 && res[0] == 0:
		return Session{}, ErrCodeNotValid
	}
	return Session{}, fmt.Errorf("the exchange script answered %v", res)
}

// lookupScript reads a session: KEYS session, epoch. It answers {0} for none, or {end
// ms, why it ended: an empty string while live}.
var lookupScript = redis.NewScript(luaNow + `
local h = redis.call('HMGET', KEYS[1], 'epoch', 'exp', 'out')
if not h[1] or not h[2] then return {0} end
local ends = tonumber(h[2])
local epoch = tonumber(redis.call('GET', KEYS[2]) or '0')
if h[3] then return {ends, 'signed_out'} end
if tonumber(h[1]) < epoch then return {ends, 'revoked'} end
if now >= ends then return {ends, 'expired'} end
return {ends, ''}
`)

// LookupSession reads the session of acct whose token has this digest: live (Ended
// empty) or ended and why. ErrNoSession: Redis holds nothing of it.
func (s *Store) LookupSession(ctx context.Context, acct string, token [32]byte) (Session, error) {
	res, err := lookupScript.Run(ctx, s.rdb, []string{sessionKey(acct, token), sessionEpochKey(acct)}).Slice()
	if err != nil {
		return Session{}, err
	}
	if len(res) == 1 {
		return Session{}, ErrNoSession
	}
	ends, ok := res[0].(int64)
	why, ok2 := res[1].(string)
	if len(res) != 2 || !ok || !ok2 {
		return Session{}, fmt.Errorf("the session script answered %v", res)
	}
	return Session{Expires: time.UnixMilli(ends).UTC(), Ended: why}, nil
}

// signOutScript marks a live session signed out, keeping its record's expiry: KEYS
// session. It answers 1 when it did.
var signOutScript = redis.NewScript(`
local h = redis.call('HMGET', KEYS[1], 'epoch', 'out')
if not h[1] or h[2] then return 0 end
redis.call('HSET', KEYS[1], 'out', '1')
return 1
`)

// EndSession signs the session of acct with this token digest out: every replica
// refuses its token from the next lookup on. It reports whether the session was there
// to end.
func (s *Store) EndSession(ctx context.Context, acct string, token [32]byte) (bool, error) {
	n, err := signOutScript.Run(ctx, s.rdb, []string{sessionKey(acct, token)}).Int64()
	return n == 1, err
}

// EndSessions ends every session of acct and every sign-in code not used yet, in one
// step whatever their number (the epoch moves on; each record expires on its own).
func (s *Store) EndSessions(ctx context.Context, acct string) error {
	return s.rdb.Incr(ctx, sessionEpochKey(acct)).Err()
}
