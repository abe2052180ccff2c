package main

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/redis/go-redis/v9"

	"github.com/mercamap/relay/internal/console"
	"github.com/mercamap/relay/internal/signin"
	"github.com/mercamap/relay/internal/store/storetest"
)

// TestConsoleSignInLinksRefuseEveryBadUseInWords: the platform mints a link for an
// account on one replica; the customer opens it on the other and is signed in, the code
// gone from the address bar, the page saying when the session ends. The same link
// opened again, an expired link and a link naming an account this relay does not serve
// are each refused on the sign-in form with a sentence, in English and in Spanish, and
// sign no one in. A tab whose session the platform ended is refused its next action in
// words and nothing changes; Sign out ends a session on both replicas.
func TestConsoleSignInLinksRefuseEveryBadUseInWords(t *testing.T) {
	r := startConsoleRig(t, "")
	opts, err := redis.ParseURL(r.redisURL)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	link := r.mintLink(r.apis[1], "acct_1")
	page := r.tab(r.apis[0], "en-US")
	r.openLink(page, link)
	r.shot(page, "signed-in-by-link")
	if got := r.cardIDs(page); strings.Join(got, ",") != "orders-bus" {
		t.Errorf("the session of acct_1 lists %v, want its EventBridge destination only", got)
	}
	r.waitLive(page, "orders-bus")

	refused := func(ctx context.Context, link, what string, want ...string) {
		t.Helper()
		if err := chromedp.Do(ctx, chromedp.Navigate(link)); err != nil {
			t.Fatal(err)
		}
		r.waitJS(ctx, `document.getElementById('signin-error').textContent !== ''`, "the refusal of "+what)
		msg := r.evalString(ctx, `document.getElementById('signin-error').textContent`)
		for _, w := range want {
			if !strings.Contains(msg, w) {
				t.Errorf("%s: the sign-in form says %q, want it to say %q", what, msg, w)
			}
		}
		if r.evalString(ctx, `String(document.getElementById('page').hidden)`) != "true" || r.evalString(ctx, `sessionStorage.getItem('relay.token') ?? ''`) != "" {
			t.Errorf("%s signed the tab in", what)
		}
		if u := r.evalString(ctx, `location.href`); strings.Contains(u, "code=") {
			t.Errorf("%s: the code is still in the address bar: %s", what, u)
		}
	}
	const english = "This sign-in link is not valid: it was used already, it expired, or it was never issued"
	other := r.tab(r.apis[1], "en-US")
	refused(other, link, "the link opened a second time", english)
	spanish := r.tab(r.apis[1], "es-ES")
	refused(spanish, link, "the link opened a second time, in Spanish", "Este enlace de inicio de sesión no es válido: ya se usó, caducó o nunca se emitió")
	r.shot(spanish, "sign-in-link-used-es")

	// A link past its time: Redis forgets its code when the link expires (on Redis's
	// clock); here that moment is brought forward.
	expired := r.mintLink(r.apis[0], "acct_1")
	_, code, _ := strings.Cut(expired, "#code=")
	key := storetest.SignInCodeKey("acct_1", code)
	if n := rdb.Exists(t.Context(), key).Val(); n != 1 {
		t.Fatalf("the link's code is not in Redis as %s", key)
	}
	rdb.PExpire(t.Context(), key, time.Millisecond)
	waitUntil(t, 5*time.Second, "the link's code expired", func() bool { return rdb.Exists(t.Context(), key).Val() == 0 })
	refused(other, expired, "an expired link", english)

	// A link for an account this relay does not serve (another platform's, or forged).
	foreign, _, err := signin.New(signin.Code, "acct_elsewhere")
	if err != nil {
		t.Fatal(err)
	}
	refused(other, r.apis[0]+console.Prefix+"#code="+foreign, "a link for another relay's account", english)

	// The platform ends acct_1's sessions: the signed-in tab's live card stops, saying
	// why, and its next action (Send a test) is refused in words; nothing is written.
	if a := httpSend(t, http.MethodDelete, r.apis[1]+"/v1/accounts/acct_1/sessions", consoleAdminToken, ""); a.status != http.StatusNoContent {
		t.Fatalf("end acct_1's sessions: %d %s", a.status, a.body)
	}
	card := `document.querySelector('article[data-id="orders-bus"]')`
	r.waitJS(page, card+`.dataset.live === 'stopped'`, "the ended session's live card stopped")
	before := len(r.bus.Entries())
	r.click(page, `article[data-id="orders-bus"] button.test`)
	r.waitJS(page, card+`.querySelector('button.test').dataset.busy === 'false' && (`+card+`.querySelector('.notice')?.textContent ?? '') !== ''`, "the ended session's Send a test answered")
	notice := r.evalString(page, card+`.querySelector('.notice').textContent`)
	if !strings.Contains(notice, "your session ended") || !strings.Contains(notice, "ended by the platform's operators") {
		t.Errorf("the ended session's Send a test says %q, want that the session ended, in the API's words", notice)
	}
	r.shot(page, "session-ended-action")
	if n := len(r.bus.Entries()); n != before {
		t.Errorf("the ended session's Send a test wrote %d entries to the bus", n-before)
	}

	// Sign out: the session's token is refused on both replicas from then on.
	fresh := r.tab(r.apis[0], "en-US")
	r.signInByLink(fresh, r.apis[0], r.apis[1], "acct_1")
	token := r.evalString(fresh, `sessionStorage.getItem('relay.token')`)
	r.click(fresh, "#signout")
	r.waitJS(fresh, `!document.getElementById('signin').hidden && document.getElementById('signin-error').textContent !== ''`, "the sign-in form after Sign out")
	if msg := r.evalString(fresh, `document.getElementById('signin-error').textContent`); !strings.Contains(msg, "signed out") {
		t.Errorf("after Sign out the form says %q", msg)
	}
	for i, api := range r.apis {
		if a := httpDo(t, http.MethodGet, api+"/v1/connectors/eventbridge/destinations", token); a.status != http.StatusForbidden || !strings.Contains(a.body, "signed out") {
			t.Errorf("the signed-out session's token on replica %d: %d %s; want 403 saying it was signed out", i, a.status, a.body)
		}
	}
	if len(r.console) > 0 {
		t.Errorf("the pages reported errors:\n%s", strings.Join(r.console, "\n"))
	}
}
