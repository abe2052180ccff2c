// Package signature owns Fetcher's v1 message signature: the external HMAC key
// derivation, the exact signed bytes, and the verification of a delivery.
// It must never log, format or return key material or a signature value.
package signature

import (
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
)

// Version is the only signature-version this package verifies.
const Version = "v1"

// TenantHeader carries the tenant, one of the fields the signature covers: routing
// follows it, and the Worker sets it on every event.
const TenantHeader = "X-Tenant-ID"

// HKDFInfo is the HKDF info string Fetcher uses for the external HMAC key.
const HKDFInfo = "fetcher-external-hmac-v1"

// keyLen is the length of the derived HMAC key, and the minimum length of the
// decoded master key (Fetcher refuses to start with a shorter APP_ENC_KEY).
const keyLen = 32

// DeriveExternalKey derives the external HMAC key from Fetcher's master key
// (APP_ENC_KEY, standard base64): HKDF-SHA256, empty salt, info HKDFInfo, 32 bytes.
// Errors never echo the input.
func DeriveExternalKey(masterKeyBase64 string) ([]byte, error) {
	master, err := base64.StdEncoding.DecodeString(masterKeyBase64)
	if err != nil {
		return nil, errors.New("signature: master key is not valid standard base64")
	}
	if len(master) < keyLen {
		return nil, errors.New("signature: master key decodes to fewer than 32 bytes")
	}
	key, err := hkdf.Key(sha256.New, master, nil, HKDFInfo, keyLen)
	clear(master)
	if err != nil {
		return nil, errors.New("signature: cannot derive the external HMAC key")
	}
	return key, nil
}

// Payload returns the exact bytes Fetcher signs:
// "<t>\nv1\n<tenant>\n<jobId>\n<exchange>\n<routing key>\n" followed by the raw body.
func Payload(t, tenant, jobID, exchange, routingKey string, body []byte) []byte {
	p := make([]byte, 0, len(t)+len(Version)+len(tenant)+len(jobID)+len(exchange)+len(routingKey)+6+len(body))
	p = appendHead(p, t, tenant, jobID, exchange, routingKey)
	return append(p, body...)
}

// appendHead appends everything Payload signs before the body.
func appendHead[S ~string | ~[]byte](p []byte, t, tenant string, jobID S, exchange, routingKey string) []byte {
	p = append(p, t...)
	p = append(p, '\n')
	p = append(p, Version...)
	p = append(p, '\n')
	p = append(p, tenant...)
	p = append(p, '\n')
	p = append(p, jobID...)
	p = append(p, '\n')
	p = append(p, exchange...)
	p = append(p, '\n')
	p = append(p, routingKey...)
	return append(p, '\n')
}

// Sign returns the lowercase hex HMAC-SHA256 of payload under key, as Fetcher
// puts it in x-message-signature.
func Sign(key, payload []byte) string {
	mac := hmac.New(sha256.New, key)
	mac.Write(payload)
	return hex.EncodeToString(mac.Sum(nil))
}
