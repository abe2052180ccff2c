package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/mercamap/relay/internal/testpeer"
)

// The console as the customer's recovery desk (issue 24): from the page, in both
// languages, a rejected event is retried and reaches the bus once more, a replay counted
// first delivers exactly the counted events in order, an activation with the gap
// delivers what was missed; an operator's disable offers an account no button that
// would answer 403; a call the relay never answers reads so, and the buttons wait while
// the connection is down; at 420 px every card is whole.
func TestConsoleRecoveryDesk(t *testing.T) {
	testpeer.Need(t, "chromium")
	r := startConsoleRig(t, "")
	card := `document.querySelector('article[data-id="orders-bus"]')`
	page := r.tab(r.apis[0], "en-US")
	r.signIn(page, consoleAcct1Token)
	r.waitLive(page, "orders-bus")
	trust := r.copyFromCard(page, "orders-bus", "trust-policy")
	if err := r.sts.SetTrustPolicy(consoleRoleARN, trust); err != nil {
		t.Fatalf("STS refuses the copied trust policy: %v", err)
	}

	// The card says where it stands, in words, with no stray "null".
	r.waitJS(page, card+`.querySelector('.replayable-from')?.textContent.length > 0`, "replayable_from on the card")
	r.waitJS(page, card+`.querySelector('.lag')?.textContent !== ''`, "the lag on the card")

	// Retry: event 0 is rejected; retried from its row, it reaches the bus.
	r.bus.FailEntries(1, "AccessDeniedException", "User is not authorized to perform: events:PutEvents on resource orders because no identity-based policy allows the events:PutEvents action, which is a long message that must wrap inside the card")
	start := time.Now().Add(-2 * time.Second) // before every event of the test
	r.publish(0, 1)
	r.waitJS(page, card+`.dataset.consecutiveFailures === '1'`, "the rejection on the card")
	if n := r.busCount(eventID(0)); n != 0 {
		t.Fatalf("the bus holds the rejected event %d times", n)
	}
	r.click(page, `article[data-id="orders-bus"] details.attempts summary`)
	row := `article[data-id="orders-bus"] .attempts tr.attempt[data-outcome="rejected"]`
	r.waitJS(page, `document.querySelector('`+row+` button.retry') !== null`, "the rejected attempt's Retry")
	// The log's last page: no "null" where the Older button would be.
	if s := r.evalString(page, card+`.querySelector('details.attempts').textContent`); strings.Contains(s, "null") {
		t.Errorf("the attempt log reads %q", s)
	}
	r.shotOf(page, "recovery-rejected", `article[data-id="orders-bus"] details.attempts`)
	r.click(page, row+` button.retry`)
	r.waitJS(page, `document.getElementById('action-dialog').open && document.getElementById('action-title').textContent.startsWith('Retry attempt ')`, "the retry dialog")
	r.shotOf(page, "recovery-retry-dialog", `#action-dialog`)
	r.click(page, `#action-confirm`)
	r.waitJS(page, card+`.querySelector('.notice')?.textContent.startsWith('Retry of attempt ')`, "the retry's answer in words")
	waitUntil(t, 30*time.Second, "the retried event at the bus", func() bool { return r.busCount(eventID(0)) == 1 })
	r.waitJS(page, `document.querySelector('article[data-id="orders-bus"] .attempts tr.attempt[data-outcome="delivered"]') !== null`, "the retry's outcome in the attempt log")

	// A row opens to what the bus received: the entry's Detail, as the bus holds it.
	r.click(page, `article[data-id="orders-bus"] .attempts tr.attempt[data-outcome="delivered"] button.show`)
	r.waitJS(page, `document.querySelector('article[data-id="orders-bus"] .attempts tr.detail pre[data-sent="detail"]') !== null`, "the attempt's detail")
	shown := r.evalString(page, `document.querySelector('article[data-id="orders-bus"] .attempts tr.detail pre[data-sent="detail"]').textContent`)
	if !strings.Contains(shown, eventID(0)) || !strings.Contains(shown, `"type": "job.completed"`) {
		t.Errorf("the detail shows:\n%s", shown)
	}
	r.shotOf(page, "recovery-attempt-detail", `article[data-id="orders-bus"] details.attempts`)

	// Replay, in Spanish: events 1..3 delivered; a replay after event 1, counted first,
	// sends exactly the two counted, in order.
	r.setLanguage(page, "es")
	for sel, want := range map[string]string{row + ` button.retry`: "Reintentar", row + ` button.replay-after`: "Repetir desde aquí",
		`article[data-id="orders-bus"] button.replay`: "Repetir…"} {
		if s := r.evalString(page, `document.querySelector('`+sel+`').textContent`); s != want {
			t.Errorf("%s reads %q in Spanish, want %q", sel, s, want)
		}
	}
	r.publish(1, 4)
	r.waitJS(page, card+`.dataset.lastDelivery === '`+eventID(3)+`'`, "events 1 to 3 delivered")
	before := len(r.bus.Entries())
	r.waitJS(page, `document.querySelector('article[data-id="orders-bus"] .attempts tr.attempt[data-event="`+eventID(1)+`"] button.replay-after') !== null`, "event 1's row")
	r.click(page, `article[data-id="orders-bus"] .attempts tr.attempt[data-event="`+eventID(1)+`"] button.replay-after`)
	r.waitJS(page, `document.getElementById('action-dialog').open && document.getElementById('action-title').textContent === 'Repetir orders-bus'`, "the replay dialog in Spanish")
	if s := r.evalString(page, `document.getElementById('action-confirm').disabled + ' ' + document.getElementById('replay-after').value`); s != "true "+eventID(1) {
		t.Errorf("before the count the dialog holds %q (want the confirmation off and event 1)", s)
	}
	r.click(page, `#replay-count`)
	r.waitJS(page, `document.getElementById('action-result').dataset.events === '2'`, "the dry-run count")
	if s := r.evalString(page, `document.getElementById('action-result').textContent`); !strings.HasPrefix(s, "Esta repetición enviará 2 eventos") {
		t.Errorf("the count reads %q", s)
	}
	if s := r.evalString(page, `document.getElementById('action-confirm').textContent`); s != "Repetir 2 eventos" {
		t.Errorf("the confirmation reads %q", s)
	}
	r.shotOf(page, "recovery-replay-count-es", `#action-dialog`)
	if n := len(r.bus.Entries()); n != before {
		t.Fatalf("the dry run sent %d entries", n-before)
	}
	r.click(page, `#action-confirm`)
	r.waitJS(page, card+`.querySelector('.notice')?.textContent === 'Repetición pedida: se enviarán de nuevo 2 eventos, en orden.'`, "the replay's answer in Spanish")
	waitUntil(t, 30*time.Second, "the replay at the bus", func() bool { return len(r.bus.Entries()) >= before+2 })
	if got := r.busEventIDs()[before:]; strings.Join(got, ",") != eventID(2)+","+eventID(3) {
		t.Errorf("the replay sent %v, want events 2 and 3", got)
	}

	// Activation with the gap, in English: paused, three events arrive; activated with
	// «send what was missed», they reach the bus in order.
	r.setLanguage(page, "en")
	r.click(page, `article[data-id="orders-bus"] button.pause`)
	r.waitJS(page, card+`.dataset.status === 'paused'`, "paused")
	r.publish(4, 7)
	before = len(r.bus.Entries())
	// The same dialog in Spanish, cancelled.
	r.setLanguage(page, "es")
	r.click(page, `article[data-id="orders-bus"] button.activate`)
	r.waitJS(page, `document.getElementById('action-dialog').open && document.getElementById('action-title').textContent === 'Activar orders-bus'`, "the activation dialog in Spanish")
	if s := r.evalString(page, `[...document.querySelectorAll('#action-body label.choice')].map(l => l.textContent.trim()).join(' | ')`); s != "Enviar lo que se perdió: 3 eventos, en orden, y luego los nuevos | Solo eventos nuevos (lo perdido no se envía)" {
		t.Errorf("the Spanish activation dialog offers %q", s)
	}
	r.click(page, `#action-cancel`)
	r.waitJS(page, `!document.getElementById('action-dialog').open`, "the dialog closed")
	r.setLanguage(page, "en")
	r.click(page, `article[data-id="orders-bus"] button.activate`)
	r.waitJS(page, `document.getElementById('action-dialog').open && document.querySelector('#action-body label.choice')?.textContent.includes('Send what was missed: 3 events')`, "the activation dialog with the gap's count")
	r.shotOf(page, "recovery-activate-dialog", `#action-dialog`)
	r.click(page, `#action-confirm`)
	r.waitJS(page, card+`.dataset.status === 'active'`, "active again")
	waitUntil(t, 30*time.Second, "what was missed at the bus", func() bool { return len(r.bus.Entries()) >= before+3 })
	if got := r.busEventIDs()[before:]; strings.Join(got, ",") != strings.Join([]string{eventID(4), eventID(5), eventID(6)}, ",") {
		t.Errorf("the activation sent %v, want events 4 to 6", got)
	}

	// A replay from a time, counted and not confirmed: the seven events of the test, and
	// nothing sent.
	before = len(r.bus.Entries())
	r.click(page, `article[data-id="orders-bus"] button.replay`)
	r.waitJS(page, `document.getElementById('action-dialog').open && document.getElementById('action-title').textContent === 'Replay orders-bus'`, "the replay dialog")
	if err := chromedp.Do(page, chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`(() => {
		const t = %d, i = document.getElementById('replay-from');
		i.value = new Date(t - new Date(t).getTimezoneOffset() * 60000).toISOString().slice(0, 19);
		document.querySelector('input[name="replay-kind"][value="from"]').checked = true;
		i.dispatchEvent(new Event('input')); })()`, start.UnixMilli()))); err != nil {
		t.Fatal(err)
	}
	r.click(page, `#replay-count`)
	r.waitJS(page, `document.getElementById('action-result').dataset.events === '7'`, "the count from a time")
	if s := r.evalString(page, `document.getElementById('action-result').textContent`); !strings.HasPrefix(s, "This replay will send 7 events, stored from ") {
		t.Errorf("the count from a time reads %q", s)
	}
	r.click(page, `#action-cancel`)
	r.waitJS(page, `!document.getElementById('action-dialog').open`, "the dialog closed")
	if n := len(r.bus.Entries()); n != before {
		t.Errorf("a replay counted and cancelled sent %d entries", n-before)
	}

	// The chart counts what the ordered stream delivered and failed.
	r.waitJS(page, card+`.querySelector('.chart')?.dataset.delivered === '8' && `+card+`.querySelector('.chart').dataset.failed === '1'`, "the chart's totals")

	// A call the relay never answers: the sentence, and nothing changed.
	r.failInTab(page, "*/destinations/orders-bus/pause")
	r.click(page, `article[data-id="orders-bus"] button.pause`)
	r.waitJS(page, card+`.querySelector('.notice')?.textContent === 'The relay did not answer; nothing was changed.'`, "the unreachable relay in words")
	r.shot(page, "recovery-unreachable")
	r.setLanguage(page, "es")
	r.click(page, `article[data-id="orders-bus"] button.pause`)
	r.waitJS(page, card+`.querySelector('.notice')?.textContent === 'El relay no respondió; no se cambió nada.'`, "the unreachable relay in Spanish")
	if s := r.evalString(page, card+`.dataset.status`); s != "active" {
		t.Errorf("after the failed pause the card is %s", s)
	}
	r.setLanguage(page, "en")
	// The relay is killed: while the page reconnects, its buttons wait.
	r.kill(0)
	r.waitJS(page, `document.getElementById('live').dataset.state === 'reconnecting'`, "reconnecting")
	r.waitJS(page, card+`.querySelector('button.pause').disabled && `+card+`.querySelector('button.replay').disabled && `+card+`.querySelector('button.test').disabled`, "the buttons off while down")
	r.shot(page, "recovery-down")
	r.start(0)
	r.waitLive(page, "orders-bus")
	r.waitJS(page, `!`+card+`.querySelector('button.pause').disabled`, "the buttons back")

	// An operator's disable: the account's card says who may undo it and offers no
	// Pause or Activate (each would answer 403).
	post(t, r.apis[1]+"/v1/connectors/pubsub/destinations/orders-topic/disable", consoleAdminToken)
	r.open(page, "pubsub")
	topic := `document.querySelector('article[data-id="orders-topic"]')`
	r.waitJS(page, topic+`.dataset.status === 'disabled'`, "orders-topic disabled")
	r.waitJS(page, topic+`.querySelector('.operator-only')?.textContent.includes('Only our operators can re-activate it')`, "who may undo the disable")
	if s := r.evalString(page, topic+`.querySelector('button.activate').hidden + ',' + `+topic+`.querySelector('button.pause').hidden`); s != "true,true" {
		t.Errorf("an account token is offered Activate and Pause on an operator's disable (hidden: %s)", s)
	}
	r.shot(page, "recovery-operator-disabled")

	// 420 px wide: every card whole, nothing wider than the screen.
	r.open(page, "eventbridge")
	r.waitLive(page, "orders-bus")
	r.click(page, `article[data-id="orders-bus"] details.attempts summary`)
	r.waitJS(page, `document.querySelectorAll('article[data-id="orders-bus"] .attempts tr.attempt').length > 0`, "the attempt log")
	r.viewport(page, 420, 900)
	r.waitJS(page, `innerWidth === 420`, "the narrow viewport")
	overflow := r.evalString(page, `(() => {
		const bad = [];
		if (document.documentElement.scrollWidth > innerWidth) bad.push('page ' + document.documentElement.scrollWidth);
		for (const c of document.querySelectorAll('article.card')) {
			const b = c.getBoundingClientRect();
			if (b.left < 0 || b.right > innerWidth) bad.push(c.dataset.id + ' ' + b.left + '..' + b.right);
			for (const e of c.querySelectorAll('*')) {
				const r = e.getBoundingClientRect();
				if (r.width > 0 && r.right > b.right + 1 && !e.closest('pre')) bad.push(c.dataset.id + ' ' + e.tagName + '.' + e.className + ' ' + r.right);
			}
		}
		return bad.slice(0, 10).join('; ');
	})()`)
	if overflow != "" {
		t.Errorf("at 420 px: %s", overflow)
	}
	if n := r.evalInt(page, `[...document.querySelectorAll('article.card')].filter(c => c.textContent.includes('null')).length`); n != 0 {
		t.Errorf("%d cards show the word null", n)
	}
	r.shot(page, "recovery-narrow")
	r.viewport(page, 1280, 1000)

	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.console) > 0 {
		t.Errorf("the pages reported errors:\n%s", strings.Join(r.console, "\n"))
	}
}

// busCount is how many entries the bus holds for a ce-id.
func (r *consoleRig) busCount(ceID string) int {
	n := 0
	for _, id := range r.busEventIDs() {
		if id == ceID {
			n++
		}
	}
	return n
}

// busEventIDs are the event ids of the bus's entries, in the order it took them.
func (r *consoleRig) busEventIDs() []string {
	var ids []string
	for _, e := range r.bus.Entries() {
		var d struct {
			EventID string `json:"event_id"`
		}
		_ = json.Unmarshal([]byte(e.Detail), &d)
		ids = append(ids, d.EventID)
	}
	return ids
}

// setLanguage switches the tab's console to lang with its own switch.
func (r *consoleRig) setLanguage(ctx context.Context, lang string) {
	if err := chromedp.Do(ctx, chromedp.SetValue(chromedp.CSS("#lang"), lang),
		chromedp.Evaluate[chromedp.Void](`document.getElementById('lang').dispatchEvent(new Event('change'))`)); err != nil {
		r.t.Fatal(err)
	}
	r.waitJS(ctx, `document.documentElement.lang === '`+lang+`'`, "the switch to "+lang)
}

// failInTab makes the tab's requests to URLs matching pattern fail as a relay that does
// not answer makes them fail (the connection refused), once each.
func (r *consoleRig) failInTab(ctx context.Context, pattern string) {
	if err := chromedp.Listen(ctx, func(ev any) {
		e, ok := ev.(*fetch.EventRequestPaused)
		if !ok {
			return
		}
		go func() {
			_ = chromedp.Do(ctx, chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
				_, err := cdp.Call(ctx, t, fetch.FailRequest, fetch.FailRequestParams{RequestID: e.RequestID, ErrorReason: network.ErrorReasonConnectionRefused})
				return err
			}))
		}()
	}); err != nil {
		r.t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := cdp.Call(ctx, t, fetch.Enable, fetch.EnableParams{Patterns: []*fetch.RequestPattern{{URLPattern: pattern, RequestStage: fetch.RequestStageRequest}}})
		return err
	})); err != nil {
		r.t.Fatal(err)
	}
}

// viewport sets the tab's window size, as a phone's would be.
func (r *consoleRig) viewport(ctx context.Context, w, h int64) {
	if err := chromedp.Do(ctx, chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := cdp.Call(ctx, t, emulation.SetDeviceMetricsOverride, emulation.SetDeviceMetricsOverrideParams{Width: w, Height: h, DeviceScaleFactor: 1})
		return err
	})); err != nil {
		r.t.Fatal(err)
	}
}

// shotOf takes a screenshot of one element of the tab (scrolled into view) and keeps it
// under r.shots, as shot does for the whole tab.
func (r *consoleRig) shotOf(ctx context.Context, name, sel string) {
	r.t.Helper()
	buf, err := chromedp.Run(ctx, chromedp.Screenshot(chromedp.CSS(sel)))
	if err != nil {
		r.t.Fatalf("screenshot %s of %s: %v", name, sel, err)
	}
	img, err := png.Decode(bytes.NewReader(buf))
	if err != nil || len(buf) < 2000 {
		r.t.Fatalf("screenshot %s of %s: %d bytes, %v", name, sel, len(buf), err)
	}
	r.writeShot(name, img)
}
