package signature_test

import (
	"encoding/json"
	"testing"

	"github.com/mercamap/relay/internal/signature"
)

func TestVerifyBodyReturnsTheJobIDAndValidityVerifyRead(t *testing.T) {
	v := verifierAt(testNow, keyA)
	for _, c := range jobIDCases {
		t.Run(c.name, func(t *testing.T) {
			m := signed(keyA, testNow, c.body)
			got, err := v.VerifyBody(m)
			if err != nil {
				t.Fatal(err)
			}
			if want := (signature.Verified{JobID: c.want, BodyJSON: json.Valid([]byte(c.body))}); got != want {
				t.Fatalf("VerifyBody = %+v, want %+v", got, want)
			}
		})
	}
}

func TestVerifyBodyFailsLikeVerify(t *testing.T) {
	v := verifierAt(testNow, keyA)
	for _, m := range []signature.Message{
		signed(keyC, testNow, body),          // bad signature
		signed(keyA, testNow-7200, body),     // too old
		signed(keyA, testNow, "not json"),    // fine: the signature covers the raw bytes
		{Body: []byte(body)},                 // missing signature
		signed(keyA, testNow+7200, "{\"a\""), // from the future, and not JSON
	} {
		got, err := v.VerifyBody(m)
		want := v.Verify(m)
		if reasonOf(t, err) != reasonOf(t, want) || (err != nil && err.Error() != want.Error()) {
			t.Fatalf("VerifyBody error %v, Verify %v", err, want)
		}
		if err != nil && got != (signature.Verified{}) {
			t.Fatalf("failed, yet returned %+v", got)
		}
	}
}
