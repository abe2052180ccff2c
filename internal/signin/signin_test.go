package signin

import (
	"crypto/sha256"
	"net/url"
	"strings"
	"testing"
)

// TestASecretNamesItsAccountAndIsTakenOnlyAsItsOwnKind: what Parse reads back of a new
// code or token is its account and the digest Redis keys it by; a code is never read as
// a session token nor the other way round, and a changed or foreign text reads as
// nothing.
func TestASecretNamesItsAccountAndIsTakenOnlyAsItsOwnKind(t *testing.T) {
	for _, acct := range []string{"acct_1", "a+b=c@d.e-f", strings.Repeat("x", 128)} {
		code, sec, err := New(Code, acct)
		if err != nil {
			t.Fatal(err)
		}
		if sec.Digest != sha256.Sum256([]byte(code)) || sec.Account != acct {
			t.Fatalf("New(%s) kept %+v", acct, sec)
		}
		got, ok := Parse(Code, code)
		if !ok || got != sec {
			t.Fatalf("Parse(New(%s)) = %+v %v", acct, got, ok)
		}
		// The console reads the fragment as a form value: nothing in it may change there.
		if v, err := url.ParseQuery("code=" + code); err != nil || v.Get("code") != code {
			t.Errorf("code %q does not survive a URL fragment read as a query", code)
		}
		if _, ok := Parse(Token, code); ok {
			t.Errorf("a code was read as a session token")
		}
		tok, _, _ := New(Token, acct)
		if _, ok := Parse(Code, tok); ok {
			t.Errorf("a session token was read as a code")
		}
		if _, ok := Parse(Code, code[:len(code)-1]); ok {
			t.Errorf("a code cut short was read")
		}
	}
	a, _, _ := New(Token, "acct_1")
	b, _, _ := New(Token, "acct_1")
	if a == b {
		t.Fatal("two tokens of one account are the same")
	}
	for _, text := range []string{"", "rls.", "rls..", "rls.YWNjdF8x", "rls.YWNjdF8x.c2hvcnQ", "rls.!!.AAAA", "admin-token", "rls." + strings.Repeat("A", MaxLength)} {
		if _, ok := Parse(Token, text); ok {
			t.Errorf("Parse(%q) read a token", text)
		}
	}
	if _, _, err := New(Token, ""); err == nil {
		t.Error("a token of no account was made")
	}
}
