package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mercamap/relay/internal/api"
	"github.com/mercamap/relay/internal/api/apitest"
	"github.com/mercamap/relay/internal/config"
	"github.com/mercamap/relay/internal/signin"
	"github.com/mercamap/relay/internal/store/storetest"
)

// mintLink asks base for a sign-in link of acct with the admin token, and returns the
// link and the code in its fragment.
func mintLink(t *testing.T, base, acct string) (api.SignInLink, string) {
	t.Helper()
	a := call(t, "POST", base+"/v1/accounts/"+acct+"/sign-in-links", apitest.AdminToken, "")
	if a.status != http.StatusCreated {
		t.Fatalf("mint a sign-in link for %s: %d %s", acct, a.status, a.body)
	}
	var link api.SignInLink
	if err := json.Unmarshal(a.body, &link); err != nil {
		t.Fatal(err)
	}
	_, code, ok := strings.Cut(link.URL, "/console/#code=")
	if !ok || code == "" {
		t.Fatalf("the link %q holds no /console/#code=", link.URL)
	}
	return link, code
}

// exchangeCode is the console's POST /v1/sessions with the link's code.
func exchangeCode(t *testing.T, base, code string) answer {
	t.Helper()
	b, _ := json.Marshal(map[string]string{"code": code})
	return call(t, "POST", base+"/v1/sessions", "", string(b))
}

// signIn mints a link of acct and exchanges its code: the session token.
func signIn(t *testing.T, base, acct string) string {
	t.Helper()
	_, code := mintLink(t, base, acct)
	a := exchangeCode(t, base, code)
	if a.status != http.StatusCreated {
		t.Fatalf("exchange the code: %d %s", a.status, a.body)
	}
	var s api.SessionOpened
	if err := json.Unmarshal(a.body, &s); err != nil {
		t.Fatal(err)
	}
	return s.Token
}

// errorMessage is an error answer's message.
func (a answer) errorMessage(t *testing.T) string {
	t.Helper()
	e, _ := a.json(t)["error"].(map[string]any)
	msg, _ := e["message"].(string)
	return msg
}

// subscriptionEnds reports whether s ends (its server closes it) within limit.
func subscriptionEnds(s *sse, limit time.Duration) bool {
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		for {
			if _, err := s.next(); err != nil {
				return
			}
		}
	}()
	select {
	case <-ended:
		return true
	case <-time.After(limit):
		return false
	}
}

// TestASignInLinkOpensASessionThatActsAsTheAccountsTokenUntilSignOut is the customer's
// way in: the platform mints a link, the console exchanges its code for a token that
// sees and acts on acct_1's destinations only, and signing out refuses it from then on.
func TestASignInLinkOpensASessionThatActsAsTheAccountsTokenUntilSignOut(t *testing.T) {
	r := apitest.New(t, apitest.Options{})
	link, code := mintLink(t, r.URL, apitest.Acct1)
	if !strings.HasPrefix(link.URL, r.URL+"/console/#code=") {
		t.Errorf("link %q: want the console at the Host the admin called (no api.public_url)", link.URL)
	}
	if d := time.Until(link.ExpiresAt); d < 4*time.Minute || d > 5*time.Minute+5*time.Second {
		t.Errorf("the link expires in %s, want 5 minutes", d)
	}
	a := exchangeCode(t, r.URL, code)
	if a.status != http.StatusCreated {
		t.Fatalf("exchange: %d %s", a.status, a.body)
	}
	var sess api.SessionOpened
	if err := json.Unmarshal(a.body, &sess); err != nil {
		t.Fatal(err)
	}
	if sess.Scope != "account:acct_1" || sess.Token == "" || strings.Contains(sess.Token, code) {
		t.Fatalf("session %s: want scope account:acct_1 and a token of its own", a.body)
	}
	if d := time.Until(sess.ExpiresAt); d < 8*time.Hour-time.Minute || d > 8*time.Hour+5*time.Second {
		t.Errorf("the session ends in %s, want api.session_ttl's 8h", d)
	}
	tok := sess.Token

	// Redis holds digests only: neither the code nor the token is in any key or value.
	rdb := r.Store.Client()
	keys, err := rdb.Keys(context.Background(), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		v, _ := rdb.Dump(context.Background(), k).Result()
		for _, secret := range []string{code, tok, code[strings.LastIndex(code, ".")+1:], tok[strings.LastIndex(tok, ".")+1:]} {
			if strings.Contains(k, secret) || strings.Contains(v, secret) {
				t.Fatalf("redis key %s holds a secret in clear", k)
			}
		}
	}

	who := call(t, "GET", r.URL+"/v1/whoami", tok, "").json(t)
	if who["scope"] != "account:acct_1" || who["session"] != true || who["expires_at"] == nil {
		t.Errorf("whoami of a session: %v", who)
	}
	bus := r.URL + fmt.Sprintf(dests, "eventbridge")
	for _, c := range []struct {
		name, method, path string
		status             int
		code               string
	}{
		{"its own card", "GET", bus + "/orders-bus", 200, ""},
		{"another account's card", "GET", bus + "/other-bus", 404, "NOT_FOUND"},
		{"pause its own destination", "POST", bus + "/orders-bus/pause", 200, ""},
		{"pause another account's", "POST", bus + "/other-bus/pause", 404, "NOT_FOUND"},
		{"its account's channel", "GET", r.URL + "/v1/streams/account:acct_1/snapshot", 200, ""},
		{"another account's channel", "GET", r.URL + "/v1/streams/account:acct_2/snapshot", 403, "ACCESS_REVOKED"},
		{"disable (admin only)", "POST", bus + "/orders-bus/disable", 403, "FORBIDDEN"},
		{"the accounts (admin only)", "GET", r.URL + "/v1/accounts", 403, "FORBIDDEN"},
		{"mint a link (admin only)", "POST", r.URL + "/v1/accounts/acct_1/sign-in-links", 403, "FORBIDDEN"},
		{"end the account's sessions (admin only)", "DELETE", r.URL + "/v1/accounts/acct_1/sessions", 403, "FORBIDDEN"},
	} {
		a := call(t, c.method, c.path, tok, "")
		if a.status != c.status || c.code != "" && a.errorCode(t) != c.code {
			t.Errorf("%s: %d %s; want %d %s", c.name, a.status, a.body, c.status, c.code)
		}
	}
	list := call(t, "GET", bus, tok, "").json(t)["destinations"].([]any)
	if len(list) != 1 || list[0].(map[string]any)["id"] != "orders-bus" {
		t.Errorf("the session lists %v, want acct_1's orders-bus only", list)
	}
	sub := subscribe(t, r.URL+"/v1/streams/destination:orders-bus/subscribe", tok, "")

	if a := call(t, "DELETE", r.URL+"/v1/sessions/current", tok, ""); a.status != http.StatusNoContent || len(a.body) != 0 {
		t.Fatalf("sign out: %d %s", a.status, a.body)
	}
	if !subscriptionEnds(sub, time.Second) {
		t.Error("the signed-out session's subscription is still open")
	}
	for _, path := range []string{"/v1/whoami", "/v1/connectors", "/v1/streams/account:acct_1/snapshot", "/v1/streams/destination:orders-bus/subscribe"} {
		a := call(t, "GET", r.URL+path, tok, "")
		if a.status != 403 || a.errorCode(t) != "ACCESS_REVOKED" || !strings.Contains(a.errorMessage(t), "signed out") {
			t.Errorf("signed-out token on %s: %d %s; want 403 ACCESS_REVOKED saying it was signed out", path, a.status, a.body)
		}
	}
	if a := call(t, "POST", bus+"/orders-bus/activate", tok, ""); a.status != 403 {
		t.Errorf("an action of the signed-out token: %d %s", a.status, a.body)
	}
	if a := call(t, "GET", bus+"/orders-bus", apitest.AdminToken, "").json(t); a["status"] != "paused" {
		t.Errorf("the destination is %v after the signed-out token's activate, want paused", a["status"])
	}
	// The config's account token is untouched, and has nothing to sign out.
	if a := call(t, "GET", r.URL+"/v1/connectors", apitest.Acct1Token, ""); a.status != 200 {
		t.Errorf("the config token after a session's sign-out: %d", a.status)
	}
	if a := call(t, "DELETE", r.URL+"/v1/sessions/current", apitest.Acct1Token, ""); a.status != 409 {
		t.Errorf("a config token signing out: %d %s, want 409", a.status, a.body)
	}
}

// TestTheLinkNamesTheConfiguredPublicURL: behind a proxy the platform's customers reach
// the console at api.public_url, not at the address the admin called.
func TestTheLinkNamesTheConfiguredPublicURL(t *testing.T) {
	r := apitest.New(t, apitest.Options{Config: func(c *config.Config) { c.API.PublicURL = "https://relay.example.com/relay/" }})
	link, _ := mintLink(t, r.URL, apitest.Acct2)
	if !strings.HasPrefix(link.URL, "https://relay.example.com/relay/console/#code=rlc.") {
		t.Errorf("link %q, want https://relay.example.com/relay/console/#code=…", link.URL)
	}
	if a := call(t, "POST", r.URL+"/v1/accounts/acct_9/sign-in-links", apitest.AdminToken, ""); a.status != 404 ||
		a.errorCode(t) != "NOT_FOUND" || a.errorMessage(t) != call(t, "GET", r.URL+"/v1/accounts/acct_9", apitest.AdminToken, "").errorMessage(t) {
		t.Errorf("a link for an unknown account: %d %s; want 404 in the words GET /v1/accounts/{id} uses", a.status, a.body)
	}
}

// TestASignInCodeOpensOneSessionAndEveryRefusalReadsTheSame: a code works once, even
// when two tabs exchange it at the same moment; used, unknown, malformed or another
// relay's account: one answer, byte for byte, so none tells what a code was.
func TestASignInCodeOpensOneSessionAndEveryRefusalReadsTheSame(t *testing.T) {
	r := apitest.New(t, apitest.Options{})
	_, code := mintLink(t, r.URL, apitest.Acct1)
	var wg sync.WaitGroup
	answers := make([]answer, 8)
	for i := range answers {
		wg.Go(func() { answers[i] = exchangeCode(t, r.URL, code) })
	}
	wg.Wait()
	opened, refused := 0, []answer{}
	for _, a := range answers {
		switch a.status {
		case http.StatusCreated:
			opened++
		case http.StatusUnauthorized:
			refused = append(refused, a)
		default:
			t.Fatalf("an exchange answered %d %s", a.status, a.body)
		}
	}
	if opened != 1 {
		t.Fatalf("%d sessions from one code exchanged 8 times at once, want 1", opened)
	}
	unknown, _, _ := signin.New(signin.Code, apitest.Acct1)
	otherRelays, _, _ := signin.New(signin.Code, "acct_elsewhere")
	token := signIn(t, r.URL, apitest.Acct1)
	for name, c := range map[string]string{
		"used":                        code,
		"never issued":                unknown,
		"of an account not served":    otherRelays,
		"not a code":                  "hello",
		"a session token, not a code": token,
		"a config token":              apitest.Acct1Token,
	} {
		refused = append(refused, exchangeCode(t, r.URL, c))
		if a := refused[len(refused)-1]; a.status != 401 || a.errorCode(t) != "UNAUTHENTICATED" || string(a.body) != string(refused[0].body) {
			t.Errorf("a code %s: %d %s; want the same 401 as a used one: %s", name, a.status, a.body, refused[0].body)
		}
	}
	if !strings.Contains(string(refused[0].body), "used already, it expired, or it was never issued") {
		t.Errorf("the refusal reads %s", refused[0].body)
	}
}

// TestAnExpiredSignInCodeIsRefusedAsAUsedOneIs: a link opened after api.sign_in_link_ttl
// opens nothing, and says so as it does for any code that is not good.
func TestAnExpiredSignInCodeIsRefusedAsAUsedOneIs(t *testing.T) {
	r := apitest.New(t, apitest.Options{Config: func(c *config.Config) { c.API.SignInLinkTTL = 300 * time.Millisecond }})
	_, used := mintLink(t, r.URL, apitest.Acct1)
	exchangeCode(t, r.URL, used)
	usedAnswer := exchangeCode(t, r.URL, used)
	link, code := mintLink(t, r.URL, apitest.Acct1)
	if d := time.Until(link.ExpiresAt); d > 300*time.Millisecond {
		t.Errorf("the link expires in %s, want api.sign_in_link_ttl's 300ms", d)
	}
	// Redis drops the code at its expiry; the exchange comes after that, not after a guess.
	key := storetest.SignInCodeKey(apitest.Acct1, code)
	apitest.WaitFor(t, 2*time.Second, "the code to expire in Redis", func() bool {
		n, err := r.Store.Client().Exists(context.Background(), key).Result()
		return err == nil && n == 0
	})
	a := exchangeCode(t, r.URL, code)
	if a.status != 401 || string(a.body) != string(usedAnswer.body) {
		t.Fatalf("an expired code: %d %s; want the used code's answer %s", a.status, a.body, usedAnswer.body)
	}
}

// TestAnExpiredSessionIsRefusedAndItsStreamEnds: past api.session_ttl the token acts on
// nothing, its open subscription ends, and the answer says the session expired.
func TestAnExpiredSessionIsRefusedAndItsStreamEnds(t *testing.T) {
	r := apitest.New(t, apitest.Options{Config: func(c *config.Config) { c.API.SessionTTL = 2 * time.Second }})
	tok := signIn(t, r.URL, apitest.Acct1)
	sub := subscribe(t, r.URL+"/v1/streams/account:acct_1/subscribe", tok, "")
	if a := call(t, "GET", r.URL+"/v1/connectors", tok, ""); a.status != 200 {
		t.Fatalf("the new session: %d %s", a.status, a.body)
	}
	var refused answer
	apitest.WaitFor(t, 5*time.Second, "the session to expire", func() bool {
		refused = call(t, "GET", r.URL+"/v1/connectors", tok, "")
		return refused.status != 200
	})
	if refused.status != 403 || refused.errorCode(t) != "ACCESS_REVOKED" || !strings.Contains(refused.errorMessage(t), "expired") {
		t.Errorf("the expired session: %d %s; want 403 ACCESS_REVOKED saying it expired", refused.status, refused.body)
	}
	if !subscriptionEnds(sub, time.Second) {
		t.Error("the expired session's subscription is still open")
	}
}

// TestEndingAnAccountsSessionsEndsEachOneAndItsUnusedLinksOnly: the operators' kill
// switch for one account: its every session and unused link, not another account's, not
// its config tokens.
func TestEndingAnAccountsSessionsEndsEachOneAndItsUnusedLinksOnly(t *testing.T) {
	r := apitest.New(t, apitest.Options{})
	first, second := signIn(t, r.URL, apitest.Acct1), signIn(t, r.URL, apitest.Acct1)
	other := signIn(t, r.URL, apitest.Acct2)
	_, unused := mintLink(t, r.URL, apitest.Acct1)
	_, otherUnused := mintLink(t, r.URL, apitest.Acct2)
	sub := subscribe(t, r.URL+"/v1/streams/account:acct_1/subscribe", first, "")

	for name, token := range map[string]string{"an account token": apitest.Acct1Token, "a session": second} {
		if a := call(t, "DELETE", r.URL+"/v1/accounts/acct_1/sessions", token, ""); a.status != 403 || a.errorCode(t) != "FORBIDDEN" {
			t.Errorf("%s ending the account's sessions: %d %s", name, a.status, a.body)
		}
	}
	if a := call(t, "DELETE", r.URL+"/v1/accounts/acct_9/sessions", apitest.AdminToken, ""); a.status != 404 ||
		a.errorMessage(t) != call(t, "GET", r.URL+"/v1/accounts/acct_9", apitest.AdminToken, "").errorMessage(t) {
		t.Errorf("an unknown account's sessions: %d %s; want 404 in GET /v1/accounts/{id}'s words", a.status, a.body)
	}
	if a := call(t, "DELETE", r.URL+"/v1/accounts/acct_1/sessions", apitest.AdminToken, ""); a.status != http.StatusNoContent {
		t.Fatalf("end acct_1's sessions: %d %s", a.status, a.body)
	}
	for name, token := range map[string]string{"first": first, "second": second} {
		a := call(t, "GET", r.URL+"/v1/connectors", token, "")
		if a.status != 403 || a.errorCode(t) != "ACCESS_REVOKED" || !strings.Contains(a.errorMessage(t), "operators") {
			t.Errorf("the %s session after the revocation: %d %s", name, a.status, a.body)
		}
	}
	if !subscriptionEnds(sub, time.Second) {
		t.Error("a revoked session's subscription is still open")
	}
	if a := exchangeCode(t, r.URL, unused); a.status != 401 {
		t.Errorf("a link minted before the revocation: %d %s, want 401", a.status, a.body)
	}
	if a := call(t, "GET", r.URL+"/v1/connectors", other, ""); a.status != 200 {
		t.Errorf("acct_2's session: %d %s", a.status, a.body)
	}
	if a := exchangeCode(t, r.URL, otherUnused); a.status != http.StatusCreated {
		t.Errorf("acct_2's unused link: %d %s", a.status, a.body)
	}
	if a := call(t, "GET", r.URL+"/v1/connectors", apitest.Acct1Token, ""); a.status != 200 {
		t.Errorf("acct_1's config token: %d", a.status)
	}
	// A link minted after the revocation signs in as before.
	if tok := signIn(t, r.URL, apitest.Acct1); call(t, "GET", r.URL+"/v1/connectors", tok, "").status != 200 {
		t.Error("a session opened after the revocation is refused")
	}
}

// TestASignOutOnOneReplicaIsRefusedOnTheOtherAtOnce: two API servers on one Redis (two
// relay processes); the session opened on one works on both, and once signed out on
// the first, the second refuses it on the next request and ends its stream within a
// second.
func TestASignOutOnOneReplicaIsRefusedOnTheOtherAtOnce(t *testing.T) {
	r := apitest.New(t, apitest.Options{})
	second := r.Replica()
	_, code := mintLink(t, r.URL, apitest.Acct1)
	a := exchangeCode(t, second, code)
	if a.status != http.StatusCreated {
		t.Fatalf("a code minted on one replica, exchanged on the other: %d %s", a.status, a.body)
	}
	tok := a.json(t)["token"].(string)
	for _, base := range []string{r.URL, second} {
		if a := call(t, "GET", base+"/v1/connectors", tok, ""); a.status != 200 {
			t.Fatalf("the session on %s: %d %s", base, a.status, a.body)
		}
	}
	sub := subscribe(t, second+"/v1/streams/destination:orders-bus/subscribe", tok, "")
	if a := call(t, "DELETE", r.URL+"/v1/sessions/current", tok, ""); a.status != http.StatusNoContent {
		t.Fatalf("sign out on the first: %d %s", a.status, a.body)
	}
	signedOut := time.Now()
	if a := call(t, "GET", second+"/v1/connectors", tok, ""); a.status != 403 || a.errorCode(t) != "ACCESS_REVOKED" {
		t.Errorf("the second replica right after the sign-out: %d %s; want 403 ACCESS_REVOKED", a.status, a.body)
	}
	if !subscriptionEnds(sub, time.Second-time.Since(signedOut)) {
		t.Error("the second replica's subscription of the signed-out session outlived a second")
	}
	// A code is good once across replicas too.
	if a := exchangeCode(t, r.URL, code); a.status != 401 {
		t.Errorf("the code again on the first replica: %d %s", a.status, a.body)
	}
}

// TestASessionKeepsItsAccountsLimitsAndSignInHasItsOwn: a session counts in its
// account's share as the account's config token does; POST /v1/sessions, which takes
// no token, reads a small body only and has its own rate per account, which holds back
// that account's sign-ins only.
func TestASessionKeepsItsAccountsLimitsAndSignInHasItsOwn(t *testing.T) {
	r := apitest.New(t, apitest.Options{Config: func(c *config.Config) {
		c.API.SubscriptionsPerToken, c.API.SubscriptionsPerAccount = 1, 2
		c.API.SignInsPerAccount = config.Rate{Count: 4, Per: time.Hour}
	}})
	tok, tok2 := signIn(t, r.URL, apitest.Acct1), signIn(t, r.URL, apitest.Acct1) // 2 of acct_1's 4 sign-ins
	channel := r.URL + "/v1/streams/account:acct_1/subscribe"
	subscribe(t, channel, tok, "")
	if a := call(t, "GET", channel, tok, ""); a.status != 429 || !strings.Contains(a.errorMessage(t), "subscriptions_per_token") {
		t.Errorf("a session's second subscription: %d %s; want 429 for the token's share", a.status, a.body)
	}
	subscribe(t, channel, apitest.Acct1Token, "")
	if a := call(t, "GET", channel, tok2, ""); a.status != 429 || !strings.Contains(a.errorMessage(t), "subscriptions_per_account") {
		t.Errorf("another session of the account past its share: %d %s; want 429 for the account's share", a.status, a.body)
	}

	big := `{"code":"` + strings.Repeat("x", 2000) + `"}`
	if a := call(t, "POST", r.URL+"/v1/sessions", "", big); a.status != 400 || !strings.Contains(a.errorMessage(t), "1024 bytes") {
		t.Errorf("a 2 KB sign-in body: %d %s; want 400 past 1024 bytes", a.status, a.body)
	}
	for _, body := range []string{`{}`, `{"code":""}`, `not json`, `{"code":"x","token":"y"}`} {
		if a := call(t, "POST", r.URL+"/v1/sessions", "", body); a.status != 400 || a.errorCode(t) != "INVALID_ARGUMENT" {
			t.Errorf("sign-in body %s: %d %s; want 400", body, a.status, a.body)
		}
	}
	guess, _, _ := signin.New(signin.Code, apitest.Acct1)
	for i := range 2 { // acct_1's last two sign-ins: failed guesses
		if a := exchangeCode(t, r.URL, guess); a.status != 401 {
			t.Fatalf("guess %d: %d %s", i, a.status, a.body)
		}
	}
	_, code := mintLink(t, r.URL, apitest.Acct1)
	a := exchangeCode(t, r.URL, code)
	if a.status != 429 || a.errorCode(t) != "RESOURCE_EXHAUSTED" || a.header.Get("Retry-After") == "" {
		t.Errorf("acct_1's fifth sign-in in the hour: %d %s; want 429 with Retry-After", a.status, a.body)
	}
	if tok := signIn(t, r.URL, apitest.Acct2); call(t, "GET", r.URL+"/v1/connectors", tok, "").status != 200 {
		t.Error("acct_2 could not sign in while acct_1's sign-ins were held back")
	}
	// An account no relay serves is held back after as many tries, with the same answers:
	// a flood of sign-ins cannot tell which accounts exist.
	for i := range 5 {
		nobody, _, _ := signin.New(signin.Code, "acct_nobody")
		a, want := exchangeCode(t, r.URL, nobody), 401
		if i == 4 {
			want = 429
		}
		if a.status != want {
			t.Errorf("sign-in %d naming an account nobody serves: %d %s; want %d as for a served one", i+1, a.status, a.body, want)
		}
	}
}
