package signature_test

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mercamap/relay/internal/cloudevent"
	"github.com/mercamap/relay/internal/signature"
)

// vectorFile is the repository's copy of the shared contract's vectors.
const vectorFile = "../../testdata/vectors/fetcher-v1.json"

type vectorCase struct {
	Name       string                     `json:"name"`
	Exchange   string                     `json:"exchange"`
	RoutingKey string                     `json:"routing_key"`
	Headers    map[string]json.RawMessage `json:"headers"`
	Body       string                     `json:"body"`
	Expect     string                     `json:"expect"`
}

type vectors struct {
	MasterKeyBase64 string       `json:"app_enc_key_base64"`
	KeyHex          string       `json:"external_hmac_key_hex"`
	Cases           []vectorCase `json:"cases"`
}

func loadVectors(tb testing.TB) vectors {
	tb.Helper()
	raw, err := os.ReadFile(vectorFile)
	if err != nil {
		tb.Fatal(err)
	}
	var v vectors
	if err := json.Unmarshal(raw, &v); err != nil {
		tb.Fatal(err)
	}
	if len(v.Cases) == 0 {
		tb.Fatal("no cases in " + vectorFile)
	}
	return v
}

func (v vectors) key(tb testing.TB) []byte {
	tb.Helper()
	k, err := hex.DecodeString(v.KeyHex)
	if err != nil {
		tb.Fatal(err)
	}
	return k
}

// amqpHeaders turns the vector's JSON headers into what amqp091-go hands over:
// strings as string or, with asBytes, as []byte (AMQP byte arrays); numbers as int32.
func (c vectorCase) amqpHeaders(tb testing.TB, asBytes bool) map[string]any {
	tb.Helper()
	h := make(map[string]any, len(c.Headers))
	for name, raw := range c.Headers {
		var s string
		if err := json.Unmarshal(raw, &s); err == nil {
			if asBytes {
				h[name] = []byte(s)
			} else {
				h[name] = s
			}
			continue
		}
		n, err := strconv.ParseInt(string(raw), 10, 32)
		if err != nil {
			tb.Fatalf("%s: header %s is neither a string nor an int32: %s", c.Name, name, raw)
		}
		h[name] = int32(n)
	}
	return h
}

// message reads the signature headers the way the relay will.
func message(h map[string]any, c vectorCase) signature.Message {
	sig, _ := cloudevent.Header(h, "x-message-signature")
	t, _ := cloudevent.Header(h, "t")
	ver, _ := cloudevent.Header(h, "signature-version")
	tenant, _ := cloudevent.Header(h, "X-Tenant-ID")
	return signature.Message{
		Signature: sig, Timestamp: t, Version: ver, Tenant: tenant,
		Exchange: c.Exchange, RoutingKey: c.RoutingKey, Body: []byte(c.Body),
	}
}

// pinnedAt returns a verifier with Fetcher's own window whose clock reads t.
func pinnedAt(tb testing.TB, keys [][]byte, t string) signature.Verifier {
	tb.Helper()
	sec, err := strconv.ParseInt(t, 10, 64)
	if err != nil {
		tb.Fatalf("t %q: %v", t, err)
	}
	return signature.Verifier{
		Keys: keys, MaxAge: 5 * time.Minute, MaxFuture: 30 * time.Second,
		Now: func() time.Time { return time.Unix(sec, 0) },
	}
}

// rejectReasons is what each reject case in the vectors must be rejected for.
var rejectReasons = map[string]signature.Reason{
	"tampered-body":               signature.BadSignature,
	"replayed-under-other-tenant": signature.BadSignature,
	"replayed-on-other-route":     signature.BadSignature,
	"unknown-signature-version":   signature.UnknownVersion,
	"missing-signature":           signature.MissingSignature,
}

func TestDeriveExternalKeyMatchesVector(t *testing.T) {
	v := loadVectors(t)
	got, err := signature.DeriveExternalKey(v.MasterKeyBase64)
	if err != nil {
		t.Fatal(err)
	}
	if hex.EncodeToString(got) != v.KeyHex {
		t.Fatalf("derived key differs from external_hmac_key_hex")
	}
}

func TestEveryVectorVerifiesAsExpected(t *testing.T) {
	v := loadVectors(t)
	keys := [][]byte{v.key(t)}
	byName := map[string]vectorCase{}
	for _, c := range v.Cases {
		byName[c.Name] = c
	}
	for _, asBytes := range []bool{false, true} {
		for _, c := range v.Cases {
			name := c.Name + "/string-headers"
			if asBytes {
				name = c.Name + "/byte-array-headers"
			}
			t.Run(name, func(t *testing.T) {
				h := c.amqpHeaders(t, asBytes)
				m := message(h, c)
				tStr, _ := cloudevent.Header(h, "t")
				err := pinnedAt(t, keys, tStr).Verify(m)

				switch {
				case c.Expect == "accept":
					if err != nil {
						t.Fatalf("want accepted, got %v", err)
					}
				case strings.HasPrefix(c.Expect, "accept-as-duplicate-of:"):
					if err != nil {
						t.Fatalf("want accepted, got %v", err)
					}
					orig, ok := byName[strings.TrimPrefix(c.Expect, "accept-as-duplicate-of:")]
					if !ok {
						t.Fatalf("unknown original in %q", c.Expect)
					}
					id, _ := cloudevent.Attribute(h, "id")
					origID, _ := cloudevent.Attribute(orig.amqpHeaders(t, asBytes), "id")
					if id == "" || id != origID {
						t.Fatalf("duplicate ce-id %q differs from the original's %q", id, origID)
					}
				case c.Expect == "reject":
					want, ok := rejectReasons[c.Name]
					if !ok {
						t.Fatalf("no expected reason for reject case %q: add it to rejectReasons", c.Name)
					}
					var se *signature.Error
					if !errors.As(err, &se) {
						t.Fatalf("want *signature.Error %s, got %v", want, err)
					}
					if se.Reason != want {
						t.Fatalf("want %s, got %v", want, err)
					}
				default:
					t.Fatalf("unknown expectation %q", c.Expect)
				}
			})
		}
	}
}

// The accepted vectors were signed independently of this package: rebuilding
// their signature with Payload and Sign proves the signed bytes, not just Verify.
func TestSignReproducesAcceptedVectors(t *testing.T) {
	v := loadVectors(t)
	key := v.key(t)
	for _, c := range v.Cases {
		if !strings.HasPrefix(c.Expect, "accept") {
			continue
		}
		m := message(c.amqpHeaders(t, true), c)
		p := signature.Payload(m.Timestamp, m.Tenant, signature.JobID(m.Body), m.Exchange, m.RoutingKey, m.Body)
		if got := signature.Sign(key, p); got != m.Signature {
			t.Errorf("%s: Sign = %s, want %s", c.Name, got, m.Signature)
		}
		if !bytes.HasSuffix(p, m.Body) {
			t.Errorf("%s: payload does not end with the raw body", c.Name)
		}
	}
}
