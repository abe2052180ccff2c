package main

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/mercamap/relay/internal/testpeer"
)

// fleetCards is how many EventBridge destinations the many-card page holds: over
// HTTP/1.1 a browser opens at most six connections to a host, so a stream per card
// would leave most of them (and every call behind them) waiting.
const fleetCards = 12

func TestConsolePageOfTwelveCardsStaysLiveOnEveryCard(t *testing.T) {
	testpeer.Need(t, "chromium")
	// acct_3's fleet: the first eleven take only job.failed (never published here), so
	// every completed job of fleet-tenant goes to the last card alone.
	var extra strings.Builder
	for i := 1; i <= fleetCards; i++ {
		events := ", events: [job.failed]"
		if i == fleetCards {
			events = ""
		}
		fmt.Fprintf(&extra, `  - {id: fleet-%02d, account: acct_3, connector: eventbridge%s,
     role_arn: "arn:aws:iam::777788889999:role/fleet-%02d",
     bus_arn: "arn:aws:events:us-east-1:777788889999:event-bus/fleet-%02d"}
`, i, events, i, i)
	}
	r := startConsoleRig(t, extra.String())
	last := fmt.Sprintf("fleet-%02d", fleetCards)
	card := func(id string) string { return `document.querySelector('article[data-id="` + id + `"]')` }

	page := r.tab(r.apis[0], "en-US")
	r.signIn(page, consoleAcct3Token)
	ids := r.cardIDs(page)
	if len(ids) != fleetCards {
		t.Fatalf("acct_3's EventBridge page lists %v, want its %d destinations", ids, fleetCards)
	}
	for _, id := range ids {
		r.waitLive(page, id)
	}
	r.waitJS(page, `document.getElementById('live').dataset.state === 'live'`, "the page showing live")
	r.shot(page, "many-cards")

	// The last card's trust policy on its role, «Send a test» on it shows delivered: the
	// call is not queued behind the page's streams.
	trust := r.copyFromCard(page, last, "trust-policy")
	if err := r.sts.SetTrustPolicy("arn:aws:iam::777788889999:role/"+last, trust); err != nil {
		t.Fatalf("STS refuses the copied trust policy: %v", err)
	}
	r.click(page, `article[data-id="`+last+`"] button.test`)
	r.waitJS(page, card(last)+`.querySelector('.test-outcome')?.dataset.outcome === 'delivered'`, "the last card's test outcome")

	// Every card follows its own channel, live: each of the first eleven is paused
	// through the API and shows it, with no reload.
	for i := 1; i < fleetCards; i++ {
		post(t, fmt.Sprintf("%s/v1/connectors/eventbridge/destinations/fleet-%02d/pause", r.apis[1], i), consoleAdminToken)
	}
	for i := 1; i < fleetCards; i++ {
		id := fmt.Sprintf("fleet-%02d", i)
		r.waitJS(page, card(id)+`.dataset.status === 'paused'`, id+" paused on the page")
	}

	// A delivery, then 20 rejections, to the last card: it shows each and ends disabled.
	r.publishFor("fleet-tenant", 1000, 1001)
	r.waitJS(page, card(last)+`.dataset.lastDelivery === '`+eventID(1000)+`'`, "the delivery on the last card")
	r.bus.FailEntries(20, "AccessDeniedException", "User is not authorized to perform: events:PutEvents")
	r.publishFor("fleet-tenant", 1001, 1021)
	r.waitJS(page, card(last)+`.dataset.status === 'disabled'`, "20 rejections disabling the last card on the live page")
	r.waitJS(page, card(last)+`.dataset.consecutiveFailures === '20'`, "the last card's 20 failures")
	r.shot(page, "many-cards-disabled")

	// Each card: one snapshot, then every event of its channel exactly once, up to the
	// API's sequence.
	for _, id := range ids {
		s := r.cardState(page, id)
		var api struct{ Sequence int64 }
		getJSON(t, r.apis[1]+"/v1/connectors/eventbridge/destinations/"+id, consoleAdminToken, &api)
		if s.Sequence != api.Sequence || s.Snapshots != 1 || s.FirstSnapshot+s.Applied != s.Sequence {
			t.Errorf("%s: card at %d (API %d), %d snapshots, snapshot at %d + %d applied", id, s.Sequence, api.Sequence,
				s.Snapshots, s.FirstSnapshot, s.Applied)
		}
	}
	if s := r.cardState(page, last); s.LastFailure != eventID(1020) {
		t.Errorf("the last card's last failure is %q, want %s", s.LastFailure, eventID(1020))
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.console) > 0 {
		t.Errorf("the page reported errors:\n%s", strings.Join(r.console, "\n"))
	}
}

// post POSTs to url with a bearer token and wants 200.
func post(t *testing.T, url, token string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: %d", url, resp.StatusCode)
	}
}
