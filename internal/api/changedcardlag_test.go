package api_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/mercamap/relay/internal/api/apitest"
)

// A card is a card: the pause and activate answers carry the lag and replayable_from
// the card GET shows, so a console or script that pauses a stalled destination sees
// its backlog without a second call.
func TestPauseAndActivateAnswersCarryTheCardsLag(t *testing.T) {
	r := startWithOrdersBusThrottled(t, apitest.Options{})
	r.Publish(apitest.Acct1, 3)
	card := r.URL + fmt.Sprintf(dests, "eventbridge") + "/orders-bus"
	apitest.WaitFor(t, 10*time.Second, "the card to count the 3 stalled events", func() bool {
		l, _ := call(t, "GET", card, apitest.Acct1Token, "").json(t)["lag"].(map[string]any)
		return l["events"] == 3.0
	})
	// The pause keeps the backlog; activating since_paused keeps it (delivered first);
	// activating without a replay skips it (delivery resumes at the log's head).
	for _, step := range []struct {
		action, body string
		events       float64
	}{{"pause", "", 3}, {"activate", `{"replay":"since_paused"}`, 3}, {"pause", "", 3}, {"activate", "", 0}} {
		a := call(t, "POST", card+"/"+step.action, apitest.Acct1Token, step.body)
		got := a.json(t)
		l, ok := got["lag"].(map[string]any)
		if a.status != 200 || !ok {
			t.Fatalf("%s %s: %d, lag %v: the answer has no lag\n%s", step.action, step.body, a.status, got["lag"], a.body)
		}
		at, _ := l["oldest_undelivered_at"].(string)
		if l["events"] != step.events || l["events_at_least"] != false || (at != "") != (step.events > 0) {
			t.Errorf("%s %s answer's lag %v, want %v events and when the oldest was stored", step.action, step.body, l, step.events)
		}
		if got["replayable_from"] == nil || got["write_in_flight"] == nil {
			t.Errorf("%s answer: replayable_from %v, write_in_flight %v, want both", step.action, got["replayable_from"], got["write_in_flight"])
		}
	}
}
