package api_test

import (
	"net/http"
	"testing"

	"github.com/mercamap/relay/internal/api/apitest"
)

// The console shows the admin actions only to an admin token: it asks whoami.
func TestWhoamiTellsATokenItsOwnScope(t *testing.T) {
	r := apitest.New(t, apitest.Options{})
	for token, want := range map[string]string{apitest.AdminToken: "admin", apitest.Acct1Token: "account:acct_1", apitest.Acct2Token: "account:acct_2"} {
		a := call(t, "GET", r.URL+"/v1/whoami", token, "")
		if a.status != http.StatusOK || a.json(t)["scope"] != want {
			t.Errorf("whoami: %d %v, want scope %s", a.status, a.json(t), want)
		}
	}
	if a := call(t, "GET", r.URL+"/v1/whoami", "wrong", ""); a.status != http.StatusUnauthorized || a.errorCode(t) != "UNAUTHENTICATED" {
		t.Errorf("whoami with a wrong token: %d", a.status)
	}
}
