// Package signin owns the text of the console's sign-in secrets: the single-use code a
// sign-in link carries and the session token it is exchanged for. Each names its
// account (so its Redis keys are found in the account's slot without a scan) beside
// 256 random bits, and is known elsewhere only by its SHA-256 digest. It never stores,
// logs or compares a secret itself.
package signin

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strings"
)

// Kind tells a sign-in code from a session token: one is never taken for the other.
type Kind string

const (
	// Code is a sign-in link's single-use code (the URL's fragment holds it).
	Code Kind = "rlc"
	// Token is a console session's bearer token.
	Token Kind = "rls"
)

// secretBytes is the randomness of every code and token: 256 bits.
const secretBytes = 32

// MaxLength bounds the text Parse reads: the prefix, an account id of at most 128
// characters in base64, and the secret.
const MaxLength = 3 + 1 + 172 + 1 + 43

var enc = base64.RawURLEncoding // letters, digits, - and _: safe in a URL fragment and a form value

// Secret is a parsed code or token: whose it is and its digest, never its text.
type Secret struct {
	Kind    Kind
	Account string
	Digest  [32]byte // SHA-256 of the whole text: what Redis keys it by
}

// ErrAccount is a new secret asked for an empty account.
var ErrAccount = errors.New("signin: a secret needs an account")

// New makes a secret of kind for account from crypto/rand: its text, to hand to the
// one who uses it, and what may be kept of it.
func New(kind Kind, account string) (string, Secret, error) {
	if account == "" {
		return "", Secret{}, ErrAccount
	}
	b := make([]byte, secretBytes)
	if _, err := rand.Read(b); err != nil {
		return "", Secret{}, err
	}
	text := string(kind) + "." + enc.EncodeToString([]byte(account)) + "." + enc.EncodeToString(b)
	return text, Secret{Kind: kind, Account: account, Digest: sha256.Sum256([]byte(text))}, nil
}

// Parse reads a code or a token of kind; ok is false for anything else (another kind,
// a config token, garbage). It says nothing of whether the secret was ever issued.
func Parse(kind Kind, text string) (Secret, bool) {
	if len(text) > MaxLength {
		return Secret{}, false
	}
	rest, ok := strings.CutPrefix(text, string(kind)+".")
	if !ok {
		return Secret{}, false
	}
	acct64, secret64, ok := strings.Cut(rest, ".")
	if !ok {
		return Secret{}, false
	}
	acct, err := enc.DecodeString(acct64)
	if err != nil || len(acct) == 0 {
		return Secret{}, false
	}
	if b, err := enc.DecodeString(secret64); err != nil || len(b) != secretBytes {
		return Secret{}, false
	}
	return Secret{Kind: kind, Account: string(acct), Digest: sha256.Sum256([]byte(text))}, true
}
