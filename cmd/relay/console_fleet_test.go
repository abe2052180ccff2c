package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/mercamap/relay/internal/testpeer"
)

// fleetSize is the many-destination page's fleet: acct_3's EventBridge destinations,
// each in an AWS account of its own (a disable cascades over none of the others).
const fleetSize = 500

func fleetConfig() string {
	var b strings.Builder
	for i := range fleetSize {
		fmt.Fprintf(&b, `  - {id: fleet-%03d, account: acct_3, connector: eventbridge, events: [job.failed],
     role_arn: "arn:aws:iam::7777%08d:role/fleet", bus_arn: "arn:aws:events:us-east-1:7777%08d:event-bus/fleet"}
`, i, i, i)
	}
	return b.String()
}

// startFleetRig is the console rig with acct_3's 500 destinations; they stay pending
// (no role trusts us), so they are checked seldom.
func startFleetRig(t testing.TB) *consoleRig {
	return startConsoleRigWith(t, fleetConfig(), "{initial: 30s, max: 5m}")
}

func TestConsoleOfFiveHundredDestinationsFiltersSearchesAndPages(t *testing.T) {
	testpeer.Need(t, "chromium")
	r := startFleetRig(t)
	for _, id := range []string{"fleet-007", "fleet-123", "fleet-456"} {
		post(t, r.apis[1]+"/v1/connectors/eventbridge/destinations/"+id+"/disable", consoleAdminToken)
	}
	for _, lang := range []string{"en-US", "es-ES"} {
		page := r.tab(r.apis[0], lang)
		r.signIn(page, consoleAcct3Token)
		en := lang == "en-US"
		// The first page: 50 cards of 500, and a summary line that counts them.
		if ids := r.cardIDs(page); len(ids) != 50 || ids[0] != "fleet-000" || ids[49] != "fleet-049" {
			t.Fatalf("%s: the first page lists %d cards %v…", lang, len(ids), ids[:min(3, len(ids))])
		}
		summary := r.evalString(page, `document.getElementById('summary').textContent`)
		want := "Page 1: 50 destinations — 0 active, 0 failing, 1 disabled, 0 paused, 49 pending (of 500 matching)"
		if !en {
			want = "Página 1: 50 destinos — 0 activos, 0 con fallos, 1 desactivados, 0 en pausa, 49 pendientes (de 500 que coinciden)"
		}
		if summary != want {
			t.Errorf("%s: the summary reads %q, want %q", lang, summary, want)
		}
		if en {
			r.shot(page, "fleet-first-page")
		}
		// The next page, without loading the others.
		r.click(page, "#next-page")
		r.waitJS(page, `document.getElementById('page').dataset.ready === 'true' && document.querySelector('article.card')?.dataset.id === 'fleet-050'`, "page 2")
		if n := len(r.cardIDs(page)); n != 50 {
			t.Errorf("%s: page 2 lists %d cards", lang, n)
		}
		r.click(page, "#prev-page")
		r.waitJS(page, `document.getElementById('page').dataset.ready === 'true' && document.querySelector('article.card')?.dataset.id === 'fleet-000'`, "back on page 1")

		// Filter by status: exactly the three disabled.
		r.selectValue(page, "#filter-status", "disabled")
		r.waitJS(page, `document.getElementById('page').dataset.ready === 'true' && document.querySelectorAll('article.card').length === 3`, "the disabled filter")
		if ids := r.cardIDs(page); strings.Join(ids, ",") != "fleet-007,fleet-123,fleet-456" {
			t.Errorf("%s: status disabled lists %v", lang, ids)
		}
		want = "Page 1: 3 destinations — 0 active, 0 failing, 3 disabled, 0 paused, 0 pending"
		if !en {
			want = "Página 1: 3 destinos — 0 activos, 0 con fallos, 3 desactivados, 0 en pausa, 0 pendientes"
		}
		if s := r.evalString(page, `document.getElementById('summary').textContent`); s != want {
			t.Errorf("%s: the filtered summary reads %q", lang, s)
		}
		if en {
			r.shot(page, "fleet-filter-disabled")
		}
		// Search within the filter, then alone.
		r.typeInto(page, "#search", "fleet-12")
		r.waitJS(page, `document.getElementById('page').dataset.ready === 'true' && document.querySelectorAll('article.card').length === 1`, "search within the filter")
		if ids := r.cardIDs(page); strings.Join(ids, ",") != "fleet-123" {
			t.Errorf("%s: disabled and fleet-12 lists %v", lang, ids)
		}
		r.selectValue(page, "#filter-status", "")
		r.waitJS(page, `document.getElementById('page').dataset.ready === 'true' && document.querySelectorAll('article.card').length === 10`, "the search alone")
		if ids := r.cardIDs(page); ids[0] != "fleet-120" || ids[9] != "fleet-129" {
			t.Errorf("%s: fleet-12 lists %v", lang, ids)
		}
		// A search that finds nothing says so.
		r.typeInto(page, "#search", "no-such-destination")
		noMatch := "No destination matches these filters."
		if !en {
			noMatch = "Ningún destino coincide con estos filtros."
		}
		r.waitJS(page, `document.getElementById('page').dataset.ready === 'true' && document.getElementById('page-note').textContent === '`+noMatch+`'`, "no match")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.console) > 0 {
		t.Errorf("the pages reported errors:\n%s", strings.Join(r.console, "\n"))
	}
}

// BenchmarkConsolePageLoadOf500Destinations reports how long the console takes to show
// the first page of a 500-destination account, by the browser's own clock
// (performance.now() when the page is drawn, from the navigation's start), signed in.
func BenchmarkConsolePageLoadOf500Destinations(b *testing.B) {
	testpeer.Need(b, "chromium")
	r := startFleetRig(b)
	page := r.tab(r.apis[0], "en-US")
	r.signIn(page, consoleAcct3Token)
	var total, worst float64
	b.ResetTimer()
	for range b.N {
		if err := chromedp.Do(page, chromedp.Reload()); err != nil {
			b.Fatal(err)
		}
		r.waitJS(page, `document.getElementById('page').dataset.ready === 'true' && document.querySelectorAll('article.card').length === 50`, "the page after a reload")
		ms := float64(r.evalInt(page, `Number(document.getElementById('page').dataset.readyAt)`))
		total += ms
		worst = max(worst, ms)
	}
	b.ReportMetric(total/float64(b.N), "ms/load")
	b.ReportMetric(worst, "worst-ms")
}

// selectValue chooses a value of a <select>, as a user does.
func (r *consoleRig) selectValue(ctx context.Context, sel, value string) {
	if err := chromedp.Do(ctx, chromedp.Evaluate[chromedp.Void](`(() => { const e = document.querySelector('`+sel+`');
		e.value = '`+value+`'; e.dispatchEvent(new Event('change')); })()`)); err != nil {
		r.t.Fatal(err)
	}
}

// typeInto replaces an input's text by typing it.
func (r *consoleRig) typeInto(ctx context.Context, sel, text string) {
	if err := chromedp.Do(ctx, chromedp.Evaluate[chromedp.Void](`document.querySelector('`+sel+`').value = ''`), chromedp.SendKeys(chromedp.CSS(sel), text)); err != nil {
		r.t.Fatal(err)
	}
	// Typing waits 250 ms for more; the page's ready flag drops when the new page loads.
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if r.evalString(ctx, `document.getElementById('page').dataset.ready`) == "false" {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}
