package signature

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"hash"
	"strconv"
	"sync"
	"time"

	"github.com/mercamap/relay/internal/jsonscan"
)

// Reason says why a message failed verification; it is stable enough to be a
// metric label.
type Reason string

const (
	MissingSignature Reason = "missing_signature"
	UnknownVersion   Reason = "unknown_signature_version"
	BadSignature     Reason = "bad_signature"
	TooOld           Reason = "too_old"
	FromTheFuture    Reason = "from_the_future"
)

// Error is the only error Verify returns. Detail never holds a key, the
// signature value or any other header value an attacker chose.
type Error struct {
	Reason Reason
	Detail string
}

func (e *Error) Error() string { return string(e.Reason) + ": " + e.Detail }

// Message holds what Verify needs from one delivery.
type Message struct {
	Signature  string // x-message-signature
	Timestamp  string // t
	Version    string // signature-version
	Tenant     string // X-Tenant-ID (may be empty)
	Exchange   string // the delivery's exchange
	RoutingKey string // the delivery's routing key
	Body       []byte
}

// Verifier checks v1 signatures. The zero value has no key and rejects everything.
type Verifier struct {
	Keys [][]byte // several while rotating: any may match
	// MaxAge bounds how old t may be; 0 disables the check. A relay behind a
	// durable queue sets it well above Fetcher's 5 minutes so a backlog survives.
	MaxAge time.Duration
	// MaxFuture bounds how far ahead of Now t may be (clock skew); 0 allows none.
	MaxFuture time.Duration
	Now       func() time.Time // nil = time.Now
}

// scratch is the per-call working memory of Verify, pooled so the hot path
// does not allocate for it.
type scratch struct {
	head []byte            // the signed bytes before the body
	sum  [sha256.Size]byte // the computed MAC
	macs []keyedMAC        // keyed HMAC states, reused across calls
}

// keyedMAC is an HMAC state ready for Reset, and a copy of the key it holds.
type keyedMAC struct {
	key []byte
	mac hash.Hash
}

// maxCachedKeys bounds the HMAC states one scratch keeps: enough for a
// rotation, while keys dropped from the configuration age out.
const maxCachedKeys = 4

// macFor returns a reset HMAC-SHA256 state for key, building it only the first
// time this scratch meets the key.
func (s *scratch) macFor(key []byte) hash.Hash {
	for _, k := range s.macs {
		if subtle.ConstantTimeCompare(k.key, key) == 1 {
			k.mac.Reset()
			return k.mac
		}
	}
	mac := hmac.New(sha256.New, key)
	if len(s.macs) == maxCachedKeys {
		clear(s.macs[0].key)
		s.macs = append(s.macs[:0], s.macs[1:]...)
	}
	s.macs = append(s.macs, keyedMAC{bytes.Clone(key), mac})
	return mac
}

// maxPooledHead keeps a freak delivery (a huge tenant or jobId) from pinning a
// large buffer in the pool.
const maxPooledHead = 4 << 10

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// Verify returns nil when m carries a valid v1 signature under one of the keys
// and t is inside the window, and an *Error otherwise. The window is checked only
// once the signature is valid, so an unauthenticated t is never reported on.
func (v Verifier) Verify(m Message) error {
	_, _, err := v.verify(m)
	return err
}

// Verified is what VerifyBody read of a verified message's body.
type Verified struct {
	JobID    string // JobID(m.Body): the jobId the signature binds
	BodyJSON bool   // jsonscan.Valid(m.Body), which is json.Valid(m.Body)
}

// VerifyBody is Verify for a caller that needs the body's jobId or JSON validity
// too: it returns what Verify read on the way, so the body is scanned once. On
// error the Verified is zero.
func (v Verifier) VerifyBody(m Message) (Verified, error) {
	jobID, bodyJSON, err := v.verify(m)
	if err != nil {
		return Verified{}, err
	}
	return Verified{JobID: string(jobID), BodyJSON: bodyJSON}, nil
}

// verify is Verify; past the header checks it also returns JobID(m.Body), as a
// slice of the body when it has no escapes, and jsonscan.Valid(m.Body), which is json.Valid(m.Body).
func (v Verifier) verify(m Message) (jobID []byte, bodyJSON bool, err error) {
	if m.Signature == "" {
		return nil, false, &Error{MissingSignature, "no x-message-signature header"}
	}
	if m.Timestamp == "" {
		return nil, false, &Error{MissingSignature, "no t header"}
	}
	if m.Version != Version {
		if m.Version == "" {
			return nil, false, &Error{UnknownVersion, "no signature-version header"}
		}
		return nil, false, &Error{UnknownVersion, "signature-version is not " + Version}
	}
	t, ok := parseUnix(m.Timestamp)
	if !ok {
		return nil, false, &Error{BadSignature, "t is not a decimal Unix time in seconds"}
	}
	var want [sha256.Size]byte
	if !decodeHex(want[:], m.Signature) {
		return nil, false, &Error{BadSignature, "x-message-signature is not 64 hex digits"}
	}
	if len(v.Keys) == 0 {
		return nil, false, &Error{BadSignature, "no verification key configured"}
	}

	// The body's one validation pass: Fetcher signs an empty jobId for a body it cannot decode.
	if bodyJSON = jsonscan.Valid(m.Body); bodyJSON {
		jobID = validJobID(m.Body)
	}
	s := scratchPool.Get().(*scratch)
	s.head = appendHead(s.head[:0], m.Timestamp, m.Tenant, jobID, m.Exchange, m.RoutingKey)
	matched := false
	for _, key := range v.Keys {
		mac := s.macFor(key)
		mac.Write(s.head)
		mac.Write(m.Body)
		if hmac.Equal(mac.Sum(s.sum[:0]), want[:]) {
			matched = true
			break
		}
	}
	if cap(s.head) <= maxPooledHead {
		scratchPool.Put(s)
	}
	if !matched {
		return nil, false, &Error{BadSignature, "HMAC matches no configured key"}
	}

	// Compare whole seconds, as Fetcher truncates t when it publishes; unsigned
	// differences cannot overflow whatever int64 t and the clock hold.
	now := time.Now
	if v.Now != nil {
		now = v.Now
	}
	nowSec := now().Unix()
	if v.MaxAge > 0 && t < nowSec {
		if age := uint64(nowSec) - uint64(t); age > uint64(v.MaxAge/time.Second) {
			return nil, false, &Error{TooOld, fmt.Sprintf("t is %ds old, beyond the %s window", age, v.MaxAge)}
		}
	}
	if t > nowSec {
		if ahead := uint64(t) - uint64(nowSec); v.MaxFuture < 0 || ahead > uint64(v.MaxFuture/time.Second) {
			return nil, false, &Error{FromTheFuture, fmt.Sprintf("t is %ds ahead, beyond the %s allowance", ahead, v.MaxFuture)}
		}
	}
	return jobID, bodyJSON, nil
}

// parseUnix accepts only what Fetcher writes (strconv.FormatInt of a Unix time):
// ASCII digits, no sign, no spaces.
func parseUnix(s string) (int64, bool) {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	t, err := strconv.ParseInt(s, 10, 64)
	return t, err == nil
}

// decodeHex decodes s into dst, which it must fill exactly; either case is
// accepted. It does not allocate.
func decodeHex(dst []byte, s string) bool {
	if len(s) != 2*len(dst) {
		return false
	}
	for i := range dst {
		hi, ok1 := fromHex(s[2*i])
		lo, ok2 := fromHex(s[2*i+1])
		if !ok1 || !ok2 {
			return false
		}
		dst[i] = hi<<4 | lo
	}
	return true
}

func fromHex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
