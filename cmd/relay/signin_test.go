package main

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mercamap/relay/internal/api/apitest"
)

// exchangeLink is the console opening a sign-in link against api: the code from the
// link's fragment, sent to POST /v1/sessions.
func exchangeLink(t *testing.T, api, link string) httpAnswer {
	t.Helper()
	_, code, ok := strings.Cut(link, "#code=")
	if !ok {
		t.Fatalf("link %q has no #code=", link)
	}
	b, _ := json.Marshal(map[string]string{"code": code})
	return httpSend(t, http.MethodPost, api+"/v1/sessions", "", string(b))
}

// sessionToken is the token of a 201 answer to POST /v1/sessions.
func sessionToken(t *testing.T, a httpAnswer) string {
	t.Helper()
	var s struct{ Token, Scope string }
	if a.status != http.StatusCreated || json.Unmarshal([]byte(a.body), &s) != nil || s.Token == "" {
		t.Fatalf("sign-in: %d %s", a.status, a.body)
	}
	return s.Token
}

// TestSignInLinkPrintsALinkThatSignsInOnce: the operator's command prints the link and
// when it expires; the link signs in as the account once; an account token mints none
// and an unknown account is named as such.
func TestSignInLinkPrintsALinkThatSignsInOnce(t *testing.T) {
	r := apitest.New(t, apitest.Options{})
	vars := map[string]string{"TEST_ADMIN_TOKEN": apitest.AdminToken}
	out, err := runRelay(t, vars, "", "sign-in-link", "acct_1", "--api", r.URL, "--token", "env:TEST_ADMIN_TOKEN")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if err != nil || len(lines) != 2 || !strings.HasPrefix(lines[0], r.URL+"/console/#code=") || !strings.HasPrefix(lines[1], "expires at ") {
		t.Fatalf("relay sign-in-link: %v\n%s", err, out)
	}
	tok := sessionToken(t, exchangeLink(t, r.URL, lines[0]))
	if a := httpDo(t, http.MethodGet, r.URL+"/v1/connectors/eventbridge/destinations/orders-bus", tok); a.status != 200 {
		t.Errorf("the session on its account's card: %d %s", a.status, a.body)
	}
	if a := exchangeLink(t, r.URL, lines[0]); a.status != http.StatusUnauthorized {
		t.Errorf("the link a second time: %d %s", a.status, a.body)
	}
	_, err = runRelay(t, map[string]string{"RELAY_TOKEN": apitest.Acct1Token}, "", "sign-in-link", "acct_1", "--api", r.URL)
	if err == nil || !strings.Contains(err.Error(), "FORBIDDEN") {
		t.Errorf("an account token minting a link: %v", err)
	}
	_, err = runRelay(t, vars, "", "sign-in-link", "acct_9", "--api", r.URL, "--token", "env:TEST_ADMIN_TOKEN")
	if err == nil || !strings.Contains(err.Error(), `no account "acct_9"`) {
		t.Errorf("a link for an unknown account: %v", err)
	}
}

// TestASessionEndedOnOneRelayIsRefusedByTheOtherAtOnce runs two `relay serve` processes
// on one Redis: a link minted by the CLI on one (with api.public_url) signs in on the
// other; a sign-out on the second is refused on the first at the next request and ends
// its stream within a second; an operator's revocation of the account's sessions on the
// first holds on the second. The config's token is untouched throughout, and neither
// relay logs a code or a token.
func TestASessionEndedOnOneRelayIsRefusedByTheOtherAtOnce(t *testing.T) {
	rs := startReplicasWith(t, 2, replicaOptions{api: `public_url: "https://relay.example.com"`})
	vars := map[string]string{"TEST_ADMIN_TOKEN": replicasAdminToken}
	out, err := runRelay(t, vars, "", "sign-in-link", "acct_1", "--api", rs.apis[0], "--token", "env:TEST_ADMIN_TOKEN")
	link, _, _ := strings.Cut(out, "\n")
	if err != nil || !strings.HasPrefix(link, "https://relay.example.com/console/#code=") {
		t.Fatalf("relay sign-in-link: %v\n%s", err, out)
	}
	tok := sessionToken(t, exchangeLink(t, rs.apis[1], link))
	card := "/v1/connectors/eventbridge/destinations/orders-bus"
	for i, api := range rs.apis {
		if a := httpDo(t, http.MethodGet, api+card, tok); a.status != 200 {
			t.Fatalf("the session on relay %d: %d %s", i, a.status, a.body)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, rs.apis[0]+"/v1/streams/destination:orders-bus/subscribe", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("subscribe with the session on relay 0: %v %v", err, resp)
	}
	defer resp.Body.Close()
	ended := make(chan time.Time, 1)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
		}
		ended <- time.Now()
	}()

	if a := httpSend(t, http.MethodDelete, rs.apis[1]+"/v1/sessions/current", tok, ""); a.status != http.StatusNoContent {
		t.Fatalf("sign out on relay 1: %d %s", a.status, a.body)
	}
	signedOut := time.Now()
	if a := httpDo(t, http.MethodGet, rs.apis[0]+card, tok); a.status != 403 || !strings.Contains(a.body, "ACCESS_REVOKED") {
		t.Errorf("relay 0 right after the sign-out on relay 1: %d %s; want 403 ACCESS_REVOKED", a.status, a.body)
	}
	select {
	case at := <-ended:
		if d := at.Sub(signedOut); d > time.Second {
			t.Errorf("relay 0's stream of the signed-out session ended %s after the sign-out, want within a second", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("relay 0's stream of the signed-out session is still open")
	}

	first, second := sessionToken(t, exchangeLink(t, rs.apis[0], mintOn(t, rs.apis[1]))), sessionToken(t, exchangeLink(t, rs.apis[1], mintOn(t, rs.apis[0])))
	if a := httpSend(t, http.MethodDelete, rs.apis[0]+"/v1/accounts/acct_1/sessions", replicasAdminToken, ""); a.status != http.StatusNoContent {
		t.Fatalf("end acct_1's sessions on relay 0: %d %s", a.status, a.body)
	}
	for i, api := range rs.apis {
		for _, s := range []string{first, second} {
			if a := httpDo(t, http.MethodGet, api+card, s); a.status != 403 {
				t.Errorf("a revoked session on relay %d: %d %s", i, a.status, a.body)
			}
		}
		if a := httpDo(t, http.MethodGet, api+card, replicasAcctToken); a.status != 200 {
			t.Errorf("the config's account token on relay %d: %d %s", i, a.status, a.body)
		}
	}
	for i, logs := range rs.logs {
		_, code, _ := strings.Cut(link, "#code=")
		for _, secret := range []string{code, tok, first, second} {
			if strings.Contains(logs.String(), secret) {
				t.Errorf("relay %d logged a sign-in secret", i)
			}
		}
	}
}

// mintOn is a sign-in link of acct_1 minted on api with the admin token.
func mintOn(t *testing.T, api string) string {
	t.Helper()
	a := httpSend(t, http.MethodPost, api+"/v1/accounts/acct_1/sign-in-links", replicasAdminToken, "")
	var link struct{ URL string }
	if a.status != http.StatusCreated || json.Unmarshal([]byte(a.body), &link) != nil {
		t.Fatalf("mint a link on %s: %d %s", api, a.status, a.body)
	}
	return link.URL
}
