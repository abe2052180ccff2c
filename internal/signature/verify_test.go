package signature_test

import (
	"bytes"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mercamap/relay/internal/signature"
)

var (
	keyA = bytes.Repeat([]byte{0xA1}, 32)
	keyB = bytes.Repeat([]byte{0xB2}, 32)
	keyC = bytes.Repeat([]byte{0xC3}, 32)
)

const testNow = 1_750_000_000

// signed returns a message signed with key at Unix time t.
func signed(key []byte, t int64, body string) signature.Message {
	ts := strconv.FormatInt(t, 10)
	m := signature.Message{
		Timestamp: ts, Version: signature.Version, Tenant: "tenant-a",
		Exchange: "fetcher.job.events", RoutingKey: "job.completed", Body: []byte(body),
	}
	m.Signature = signature.Sign(key, signature.Payload(ts, m.Tenant, signature.JobID(m.Body), m.Exchange, m.RoutingKey, m.Body))
	return m
}

func verifierAt(now int64, keys ...[]byte) signature.Verifier {
	return signature.Verifier{
		Keys: keys, MaxAge: time.Hour, MaxFuture: 30 * time.Second,
		Now: func() time.Time { return time.Unix(now, 0) },
	}
}

func reasonOf(t *testing.T, err error) signature.Reason {
	t.Helper()
	if err == nil {
		return ""
	}
	var se *signature.Error
	if !errors.As(err, &se) {
		t.Fatalf("error %v is not a *signature.Error", err)
	}
	return se.Reason
}

const body = `{"jobId":"0190f2a4-2222-7333-8444-555566667777","status":"completed"}`

func TestMessageSignedWithSecondRotatedKeyVerifies(t *testing.T) {
	m := signed(keyB, testNow, body)
	if err := verifierAt(testNow, keyA, keyB).Verify(m); err != nil {
		t.Fatal(err)
	}
}

func TestMessageSignedWithNoConfiguredKeyIsBadSignature(t *testing.T) {
	m := signed(keyC, testNow, body)
	if got := reasonOf(t, verifierAt(testNow, keyA, keyB).Verify(m)); got != signature.BadSignature {
		t.Fatalf("got %q, want %q", got, signature.BadSignature)
	}
	if got := reasonOf(t, verifierAt(testNow).Verify(m)); got != signature.BadSignature {
		t.Fatalf("no keys: got %q, want %q", got, signature.BadSignature)
	}
}

func TestWindowEdgesAreAcceptedAndOneSecondBeyondIsRejected(t *testing.T) {
	v := verifierAt(testNow, keyA) // MaxAge 1h, MaxFuture 30s
	cases := []struct {
		name string
		t    int64
		want signature.Reason
	}{
		{"now", testNow, ""},
		{"exactly MaxAge old", testNow - 3600, ""},
		{"MaxAge+1s old", testNow - 3601, signature.TooOld},
		{"exactly MaxFuture ahead", testNow + 30, ""},
		{"MaxFuture+1s ahead", testNow + 31, signature.FromTheFuture},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := reasonOf(t, v.Verify(signed(keyA, c.t, body))); got != c.want {
				t.Fatalf("got %q, want %q", got, c.want)
			}
		})
	}
}

func TestWindowIgnoresSubSecondClock(t *testing.T) {
	// Fetcher truncates t to the second: a clock half a second on must not
	// turn the edge into a rejection.
	v := verifierAt(testNow, keyA)
	v.Now = func() time.Time { return time.Unix(testNow, 999_999_999) }
	if err := v.Verify(signed(keyA, testNow-3600, body)); err != nil {
		t.Fatal(err)
	}
}

func TestZeroMaxAgeDisablesTheAgeCheck(t *testing.T) {
	v := verifierAt(testNow, keyA)
	v.MaxAge = 0
	if err := v.Verify(signed(keyA, 1, body)); err != nil {
		t.Fatal(err)
	}
}

func TestWindowIsCheckedOnlyAfterTheSignature(t *testing.T) {
	v := verifierAt(testNow, keyA)
	for _, ts := range []int64{testNow - 7200, testNow + 7200} {
		m := signed(keyC, ts, body) // wrong key and outside the window
		if got := reasonOf(t, v.Verify(m)); got != signature.BadSignature {
			t.Fatalf("t=%d: got %q, want %q", ts, got, signature.BadSignature)
		}
	}
}

func TestVerifyRejectsInOrder(t *testing.T) {
	good := signed(keyA, testNow, body)
	with := func(f func(*signature.Message)) signature.Message {
		m := good
		f(&m)
		return m
	}
	cases := []struct {
		name string
		m    signature.Message
		want signature.Reason
	}{
		{"no signature", with(func(m *signature.Message) { m.Signature = "" }), signature.MissingSignature},
		{"no t", with(func(m *signature.Message) { m.Timestamp = "" }), signature.MissingSignature},
		{"no signature beats bad version", with(func(m *signature.Message) { m.Signature, m.Version = "", "v9" }), signature.MissingSignature},
		{"no version", with(func(m *signature.Message) { m.Version = "" }), signature.UnknownVersion},
		{"version v2", with(func(m *signature.Message) { m.Version = "v2" }), signature.UnknownVersion},
		{"version V1", with(func(m *signature.Message) { m.Version = "V1" }), signature.UnknownVersion},
		{"t not decimal", with(func(m *signature.Message) { m.Timestamp = "17e8" }), signature.BadSignature},
		{"t signed", with(func(m *signature.Message) { m.Timestamp = "+" + m.Timestamp }), signature.BadSignature},
		{"t overflows", with(func(m *signature.Message) { m.Timestamp = "99999999999999999999" }), signature.BadSignature},
		{"signature too short", with(func(m *signature.Message) { m.Signature = m.Signature[:62] }), signature.BadSignature},
		{"signature not hex", with(func(m *signature.Message) { m.Signature = "zz" + m.Signature[2:] }), signature.BadSignature},
		{"signature with prefix", with(func(m *signature.Message) { m.Signature = "sha256=" + m.Signature }), signature.BadSignature},
		{"other tenant", with(func(m *signature.Message) { m.Tenant = "tenant-b" }), signature.BadSignature},
		{"no tenant", with(func(m *signature.Message) { m.Tenant = "" }), signature.BadSignature},
		{"other exchange", with(func(m *signature.Message) { m.Exchange = "other" }), signature.BadSignature},
		{"other routing key", with(func(m *signature.Message) { m.RoutingKey = "job.failed" }), signature.BadSignature},
		{"t changed", with(func(m *signature.Message) { m.Timestamp = strconv.Itoa(testNow + 1) }), signature.BadSignature},
		{"uppercase hex", with(func(m *signature.Message) { m.Signature = strings.ToUpper(m.Signature) }), ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := reasonOf(t, verifierAt(testNow, keyA).Verify(c.m)); got != c.want {
				t.Fatalf("got %q, want %q", got, c.want)
			}
		})
	}
}

func TestJobIDIsBoundIntoTheSignature(t *testing.T) {
	// Signed as if the body had no jobId: must not verify against a body that has one.
	m := signed(keyA, testNow, body)
	m.Signature = signature.Sign(keyA, signature.Payload(m.Timestamp, m.Tenant, "", m.Exchange, m.RoutingKey, m.Body))
	if got := reasonOf(t, verifierAt(testNow, keyA).Verify(m)); got != signature.BadSignature {
		t.Fatalf("got %q, want %q", got, signature.BadSignature)
	}
}

func TestErrorsNeverContainKeyOrSignature(t *testing.T) {
	m := signed(keyC, testNow, body)
	err := verifierAt(testNow, keyA).Verify(m)
	if err == nil {
		t.Fatal("want an error")
	}
	msg := err.Error()
	for _, secret := range []string{m.Signature, hex.EncodeToString(keyA), hex.EncodeToString(keyC), string(keyA)} {
		if strings.Contains(strings.ToLower(msg), strings.ToLower(secret)) {
			t.Fatalf("error %q leaks a secret", msg)
		}
	}
	if !strings.HasPrefix(msg, string(signature.BadSignature)+": ") {
		t.Fatalf("error %q is not \"<reason>: <detail>\"", msg)
	}
}

func TestDeriveExternalKeyErrorsDoNotEchoTheKey(t *testing.T) {
	for _, in := range []string{"not base64 at all!!secretish", "c2hvcnQ="} {
		_, err := signature.DeriveExternalKey(in)
		if err == nil {
			t.Fatalf("%q: want an error", in)
		}
		if strings.Contains(err.Error(), in) || strings.Contains(err.Error(), "secretish") {
			t.Fatalf("error %q echoes the input", err)
		}
	}
}

func TestPayloadIsTheExactSignedBytes(t *testing.T) {
	got := signature.Payload("1750000000", "t1", "job-1", "ex", "job.completed", []byte(`{"a":1}`))
	want := "1750000000\nv1\nt1\njob-1\nex\njob.completed\n{\"a\":1}"
	if string(got) != want {
		t.Fatalf("Payload = %q, want %q", got, want)
	}
}

func BenchmarkVerify(b *testing.B) {
	pad := strings.Repeat("x", 1024-len(`{"jobId":"0190f2a4-2222-7333-8444-555566667777","status":"completed","pad":""}`))
	body := `{"jobId":"0190f2a4-2222-7333-8444-555566667777","status":"completed","pad":"` + pad + `"}`
	if len(body) != 1024 {
		b.Fatalf("body is %d bytes", len(body))
	}
	m := signed(keyA, testNow, body)
	v := verifierAt(testNow, keyA)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if err := v.Verify(m); err != nil {
			b.Fatal(err)
		}
	}
}

func TestVerifyIsSafeForConcurrentUseAcrossKeyRotations(t *testing.T) {
	// Pooled scratch and cached HMAC states must never mix keys between calls.
	signedA, signedB, signedC := signed(keyA, testNow, body), signed(keyB, testNow, body), signed(keyC, testNow, body)
	vAB, vBC := verifierAt(testNow, keyA, keyB), verifierAt(testNow, keyB, keyC)
	done := make(chan struct{})
	for g := 0; g < 8; g++ {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := 0; i < 500; i++ {
				if vAB.Verify(signedA) != nil || vAB.Verify(signedB) != nil || vAB.Verify(signedC) == nil {
					t.Error("keys A,B: wrong outcome")
					return
				}
				if vBC.Verify(signedB) != nil || vBC.Verify(signedC) != nil || vBC.Verify(signedA) == nil {
					t.Error("keys B,C: wrong outcome")
					return
				}
			}
		}()
	}
	for g := 0; g < 8; g++ {
		<-done
	}
}

func TestVerifyWithMoreKeysThanItCaches(t *testing.T) {
	var keys [][]byte
	for i := byte(1); i <= 7; i++ {
		keys = append(keys, bytes.Repeat([]byte{i}, 32))
	}
	v := verifierAt(testNow, keys...)
	for round := 0; round < 3; round++ {
		for i, k := range keys {
			if err := v.Verify(signed(k, testNow, body)); err != nil {
				t.Fatalf("round %d, key %d: %v", round, i, err)
			}
		}
		if got := reasonOf(t, v.Verify(signed(keyA, testNow, body))); got != signature.BadSignature {
			t.Fatalf("round %d, unknown key: got %q", round, got)
		}
	}
}
