package signature_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/mercamap/relay/internal/signature"
)

func FuzzVerify(f *testing.F) {
	for _, c := range loadVectors(f).Cases {
		h := c.amqpHeaders(f, false)
		m := message(h, c)
		f.Add(m.Signature, m.Timestamp, m.Version, m.Tenant, m.Exchange, m.RoutingKey, m.Body)
	}
	f.Add("", "", "", "", "", "", []byte(nil))
	key := keyA
	f.Fuzz(func(t *testing.T, sig, ts, ver, tenant, exchange, routingKey string, body []byte) {
		v := signature.Verifier{
			Keys: [][]byte{key}, MaxAge: time.Hour, MaxFuture: time.Minute,
			Now: func() time.Time { return time.Unix(testNow, 0) },
		}
		// Arbitrary fields: an *Error or nil, never a panic.
		m := signature.Message{Signature: sig, Timestamp: ts, Version: ver, Tenant: tenant,
			Exchange: exchange, RoutingKey: routingKey, Body: body}
		if err := v.Verify(m); err != nil {
			_ = reasonOf(t, err)
		}

		// The same fields signed by Sign over Payload always verify.
		m.Timestamp = strconv.Itoa(testNow)
		m.Version = signature.Version
		m.Signature = signature.Sign(key, signature.Payload(m.Timestamp, tenant, signature.JobID(body), exchange, routingKey, body))
		if err := v.Verify(m); err != nil {
			t.Fatalf("signed message rejected: %v", err)
		}
	})
}
