package destination

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"regexp"
)

// An AWS destination's ExternalId is "relay-" and 32 lowercase hex characters, whether
// the relay issued it at random, the config pins it, or it is derived from the
// configured secret: one form, so no trust policy can tell them apart.
const externalIDPrefix = "relay-"

var externalIDForm = regexp.MustCompile(`^relay-[0-9a-f]{32}$`)

// MinExternalIDSecret is the shortest identity.external_id_secret accepted, in bytes.
const MinExternalIDSecret = 32

// externalIDLabel starts the HMAC input, so these HMACs are of inputs no other use of the
// secret could have.
const externalIDLabel = "relay external-id v1"

// NewExternalID returns a fresh random ExternalId in the issued form, 128 bits from
// crypto/rand. The probe's wrong ExternalId comes from here too, so no pattern in a
// trust policy can tell it from an issued one.
func NewExternalID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // crypto/rand.Read does not fail on Linux
	return externalIDPrefix + hex.EncodeToString(b)
}

// DeriveExternalID is the ExternalId the secret gives the destination id of account:
// "relay-" and the first 32 hex characters of HMAC-SHA256(secret, label, account, id),
// the parts separated by NUL bytes (which no id holds).
func DeriveExternalID(secret []byte, account, id string) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(externalIDLabel + "\x00" + account + "\x00" + id))
	return externalIDPrefix + hex.EncodeToString(m.Sum(nil))[:32]
}

// CheckExternalID returns why s cannot be pinned as an ExternalId, or "" when it has the
// form the relay issues.
func CheckExternalID(s string) string {
	if externalIDForm.MatchString(s) {
		return ""
	}
	return "an ExternalId is \"relay-\" and 32 lowercase hexadecimal characters, exactly as the relay issues it (the card's external_id, or what relay external-ids prints)"
}

// ConfiguredExternalID is the ExternalId the config gives d: pinned, else derived; ""
// when neither, and the id the relay issued at random lives only in Redis.
func (d Destination) ConfiguredExternalID() string {
	if d.PinnedExternalID != "" {
		return d.PinnedExternalID
	}
	return d.DerivedExternalID
}
