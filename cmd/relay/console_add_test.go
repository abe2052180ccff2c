package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	vkit "cloud.google.com/go/pubsub/v2/apiv1"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	kinesistypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/chromedp/chromedp"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/mercamap/relay/internal/awstest"
	"github.com/mercamap/relay/internal/jobevent"
	"github.com/mercamap/relay/internal/testpeer"
)

// The platform's own destination of acct_3, defined in the config file: its card offers
// no change or delete, and it takes every event of the account, so an event at its bus
// means the relay has handled it for the account's other destinations too.
const (
	platformBus  = "arn:aws:events:us-east-1:333344445555:event-bus/platform"
	platformRole = "arn:aws:iam::333344445555:role/platform-delivery"
	platformDest = `  - {id: platform-bus, account: acct_3, connector: eventbridge, role_arn: "` + platformRole + `", bus_arn: "` + platformBus + `"}
`
)

// addJourney is what differs, connector by connector and language by language, in the
// customer's journey through the console.
type addJourney struct {
	connector, lang string
	api             int               // the relay the tab talks to
	fields          []string          // the form's fields, in order
	values          map[string]string // what the customer types, by field
	bad             map[string]string // a value that spoils the form, by field
	setUp           func(t *testing.T, page context.Context, id string)
	arrivals        func(t *testing.T) []string // event ids at the customer's bus, first arrivals in order
	target          string                      // what the delete dialog says stops
	held            bool                        // the delete happens while a write is held in flight (EventBridge)
}

// TestConsoleAddsSetsUpChangesAndDeletesADestinationOfEachConnector: the customer's
// Connectors page (issue 32), for EventBridge, Kinesis and Pub/Sub, in English and in
// Spanish, against two relays and the sandbox's buses. Signed in with acct_3's token, the
// customer adds the destination through the form (it has exactly the connector's fields);
// its card opens at the top, pending, its setup before Send a test; the ExternalId, trust
// and permissions policies copied from the card onto the sandbox role (or the label
// command's label put on the topic) make Send a test deliver; five events published
// reach the bus in publish order and show on the card. A change with a bad value keeps
// the dialog open with the API's words beside the field; a good one (the events filter)
// holds: a completed job is no longer sent, a failed one is. A form with one bad field
// shows the API's words beside it, every value kept, nothing made. Delete asks for the
// id, names what stops, says whether a write was in flight (one is held at the bus for
// EventBridge in English); after it the card is gone, both relays answer 404, and
// nothing more reaches the bus while the account's other destination gets what follows.
// The platform's destination from the config file offers neither change nor delete.
func TestConsoleAddsSetsUpChangesAndDeletesADestinationOfEachConnector(t *testing.T) {
	testpeer.Need(t, "chromium")
	r := startConsoleRigOf(t, consoleRigOptions{kinesis: true, destinations: platformDest})
	topics, err := vkit.NewTopicAdminClient(context.Background(), option.WithEndpoint(r.ps.Addr), option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { topics.Close() })

	// The platform's destination, set up and active.
	var platform apiCard
	waitUntil(t, 30*time.Second, "platform-bus's ExternalId", func() bool {
		getJSON(t, r.apis[1]+"/v1/connectors/eventbridge/destinations/platform-bus", consoleAdminToken, &platform)
		return platform.ExternalID != nil && *platform.ExternalID != ""
	})
	r.sts.RequireExternalID(platformRole, *platform.ExternalID)
	waitUntil(t, 30*time.Second, "platform-bus active", func() bool {
		getJSON(t, r.apis[1]+"/v1/connectors/eventbridge/destinations/platform-bus", consoleAdminToken, &platform)
		return platform.Status == "active"
	})

	awsAccount := "222233334444"
	var journeys []addJourney
	for i, lang := range []string{"en", "es"} {
		bus := "arn:aws:events:us-east-1:" + awsAccount + ":event-bus/web-" + lang
		stream := "web-" + lang
		streamARN := "arn:aws:kinesis:us-east-1:" + awsAccount + ":stream/" + stream
		topic := "projects/acme-prod/topics/web-" + lang
		kms := ""
		events := ""
		if lang == "es" {
			kms = "arn:aws:kms:us-east-1:" + awsAccount + ":key/1234abcd-12ab-34cd-56ef-1234567890ab"
			events = "job.completed, job.failed"
		}
		awstest.CreateStream(t, r.kinesalite, stream)
		if _, err := topics.CreateTopic(t.Context(), &pubsubpb.Topic{Name: topic}); err != nil {
			t.Fatal(err)
		}
		journeys = append(journeys,
			addJourney{connector: "eventbridge", lang: lang, api: i, held: lang == "en",
				fields: []string{"bus_arn", "role_arn", "id", "events"},
				values: map[string]string{"bus_arn": bus, "role_arn": "arn:aws:iam::" + awsAccount + ":role/web-bus-" + lang, "id": "web-bus-" + lang, "events": events},
				bad:    map[string]string{"bus_arn": "arn:aws:events:us-east-1:999999999999:event-bus/web-" + lang},
				setUp:  r.trustFromCard, target: bus,
				arrivals: func(t *testing.T) []string {
					ids, err := r.bus.EventIDs(bus)
					if err != nil {
						t.Fatal(err)
					}
					return firstOf(ids)
				}},
			addJourney{connector: "kinesis", lang: lang, api: 1 - i,
				fields: []string{"stream_arn", "role_arn", "kms_key_arn", "id", "events"},
				values: map[string]string{"stream_arn": streamARN, "role_arn": "arn:aws:iam::" + awsAccount + ":role/web-stream-" + lang,
					"kms_key_arn": kms, "id": "web-stream-" + lang, "events": events},
				bad:   map[string]string{"kms_key_arn": "arn:aws:kms:us-east-1:" + awsAccount + ":alias/web"},
				setUp: r.trustFromCard, target: streamARN,
				arrivals: func(t *testing.T) []string { return kinesisEventIDs(t, r.kinesalite, stream) }},
			addJourney{connector: "pubsub", lang: lang, api: i,
				fields: []string{"project_id", "topic_id", "id", "events"},
				values: map[string]string{"project_id": "acme-prod", "topic_id": "web-" + lang, "id": "web-topic-" + lang, "events": events},
				bad:    map[string]string{"project_id": "Acme_Prod"},
				setUp: func(t *testing.T, page context.Context, id string) {
					r.labelFromCard(t, page, id, topics, topic)
				}, target: topic,
				arrivals: func(*testing.T) []string { return topicEventIDs(r.ps, topic) }},
		)
	}
	for n, j := range journeys {
		r.run(t, j.connector+"-"+j.lang, func(t *testing.T) { r.addJourney(t, j, 3000+100*n) })
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.console) > 0 {
		t.Errorf("the pages reported errors:\n%s", strings.Join(r.console, "\n"))
	}
}

// run runs f as a subtest whose failures the rig's helpers report.
func (r *consoleRig) run(t *testing.T, name string, f func(t *testing.T)) {
	parent := r.t
	t.Run(name, func(t *testing.T) {
		r.t = t
		defer func() { r.t = parent }()
		f(t)
	})
}

// addJourney runs j's journey (see the test above); its events are jobs from.. of the
// account's tenant.
func (r *consoleRig) addJourney(t *testing.T, j addJourney, from int) {
	en := j.lang == "en"
	say := func(english, spanish string) string {
		if en {
			return english
		}
		return spanish
	}
	docs := en && j.connector == "eventbridge" // the docs' screenshots
	id := j.values["id"]
	card := `document.querySelector('article[data-id="` + id + `"]')`
	base := "/v1/connectors/" + j.connector + "/destinations"
	page := r.tab(r.apis[j.api], say("en-US", "es-ES"))
	r.signInByLink(page, r.apis[j.api], r.apis[1-j.api], "acct_3") // minted on the other replica
	if j.connector == "eventbridge" {
		// What the config file defines says so, and offers neither change nor delete.
		r.waitLive(page, "platform-bus")
		managed := r.evalString(page, `document.querySelector('article[data-id="platform-bus"] .managed')?.textContent ?? ''`)
		if want := say("the platform’s configuration", "la configuración de la plataforma"); !strings.HasPrefix(managed, want) {
			t.Errorf("the config file's card says it is managed by %q, want %q…", managed, want)
		}
		if n := r.evalInt(page, `document.querySelectorAll('article[data-id="platform-bus"] button.change, article[data-id="platform-bus"] button.delete').length`); n != 0 {
			t.Errorf("the config file's card offers %d change or delete buttons", n)
		}
	} else {
		r.open(page, j.connector)
	}

	// The form has exactly the connector's fields, in the page's language.
	r.click(page, "#add-open")
	r.waitJS(page, `!document.getElementById('add-form').hidden && document.querySelector('#add-form input') !== null`, "the add form")
	if got := r.evalString(page, `[...document.querySelectorAll('#add-form .field')].map(f => f.dataset.field).join(',')`); got != strings.Join(j.fields, ",") {
		t.Errorf("the %s form's fields are %s, want %s", j.connector, got, strings.Join(j.fields, ","))
	}
	if s := r.evalString(page, `document.getElementById('add-submit').textContent`); s != say("Add the destination", "Añadir el destino") {
		t.Errorf("the form's button reads %q", s)
	}
	r.fillForm(page, "#add-form", j.fields, j.values)
	if docs {
		r.shotOf(page, "add-form", "#add-form")
	}
	r.click(page, "#add-submit")

	// The new card opens at the top, pending, its setup before Send a test.
	r.waitJS(page, `document.getElementById('page').dataset.ready === 'true' && document.querySelector('#cards article.card')?.dataset.id === '`+id+`' && document.getElementById('add-form').hidden`, "the new card at the top")
	r.waitLive(page, id)
	if s := r.evalString(page, `(() => { const c = `+card+`; return [c.classList.contains('fresh'), c.dataset.status,
		!!(c.querySelector('.setup').compareDocumentPosition(c.querySelector('.actions button.test')) & Node.DOCUMENT_POSITION_FOLLOWING)].join(','); })()`); s != "true,pending,true" {
		t.Errorf("the new card (fresh, status, Send a test after the setup): %s", s)
	}
	if s := r.evalString(page, card+`.querySelector('.fresh-intro').textContent`); !strings.HasPrefix(s, say("Added, waiting for its setup.", "Añadido, pendiente de configurar.")) {
		t.Errorf("the new card's intro reads %q", s)
	}
	// The whole setup and Send a test fit one screen (1280 × 1000): from the card's top to
	// the button's bottom is no taller than the window.
	if s := r.evalString(page, `(() => { const c = `+card+`, b = c.querySelector('.actions button.test').getBoundingClientRect();
		return Math.round(b.bottom - c.getBoundingClientRect().top) + ' of ' + innerHeight; })()`); !fitsOneScreen(s) {
		t.Errorf("the new card's setup and Send a test take %s px: more than one screen", s)
	}
	var made apiCard
	getJSON(t, r.apis[1-j.api]+base+"/"+id, consoleAdminToken, &made)
	if made.ManagedBy != "api" || made.Status != "pending" {
		t.Errorf("the API's card of the new destination: %+v", made)
	}
	switch {
	case docs:
		r.shotOf(page, "add-new-card", `article[data-id="`+id+`"]`)
	case en && j.connector == "pubsub" || !en && j.connector == "kinesis":
		r.shotOf(page, "add-new-card-"+j.connector+"-"+j.lang, `article[data-id="`+id+`"]`)
	}

	// The customer applies the card's setup, then presses Send a test.
	j.setUp(t, page, id)
	r.click(page, `article[data-id="`+id+`"] button.test`)
	r.waitJS(page, card+`.querySelector('.test-outcome')?.dataset.outcome === 'delivered'`, "the test delivered")
	if s := r.evalString(page, card+`.querySelector('.test-outcome').textContent`); !strings.HasPrefix(s, say("Test: delivered", "Prueba: entregado")) {
		t.Errorf("the test's outcome reads %q", s)
	}
	r.waitJS(page, card+`.dataset.status === 'active'`, "the destination active")
	if got := j.arrivals(t); len(got) != 1 || !strings.HasPrefix(got[0], "relay.test.") {
		t.Fatalf("after the test the bus holds %v, want the one test event", got)
	}

	// Five events, at the bus in publish order and on the card.
	var want []string
	for i := from; i < from+5; i++ {
		want = append(want, eventID(i))
	}
	r.publishFor("fleet-tenant", from, from+5)
	waitUntil(t, 30*time.Second, "the five events at the bus", func() bool { return len(j.arrivals(t)) >= 6 })
	if got := j.arrivals(t)[1:]; !slices.Equal(got, want) {
		t.Fatalf("the bus got %v, want %v in that order", got, want)
	}
	r.waitJS(page, card+`.dataset.lastDelivery === '`+want[4]+`'`, "the last delivery on the card")

	r.changeFilter(t, page, j, from)

	// One bad field: its problem beside it in the API's words, every value kept, nothing made.
	values := map[string]string{}
	for k, v := range j.values {
		values[k] = v
	}
	values["id"] = id + "-again"
	var badField string
	for k, v := range j.bad {
		values[k], badField = v, k
	}
	r.click(page, "#add-open")
	r.waitJS(page, `!document.getElementById('add-form').hidden`, "the add form again")
	r.fillForm(page, "#add-form", j.fields, values)
	body := map[string]any{}
	for _, f := range j.fields {
		switch v := strings.TrimSpace(values[f]); {
		case v == "":
		case f == "events":
			body[f] = strings.Split(strings.ReplaceAll(v, " ", ""), ",")
		default:
			body[f] = v
		}
	}
	raw, _ := json.Marshal(body)
	refused := httpSend(t, http.MethodPost, r.apis[j.api]+base, consoleAcct3Token, string(raw))
	words := fieldWords(t, refused, badField)
	r.click(page, "#add-submit")
	sel := `#add-form .field[data-field="` + badField + `"] .field-error`
	r.waitJS(page, `document.querySelector('`+sel+`')?.textContent !== ''`, "the problem beside "+badField)
	if got := r.evalString(page, `document.querySelector('`+sel+`').textContent`); got != words {
		t.Errorf("beside %s the form says %q; the API says %q", badField, got, words)
	}
	if s := r.evalString(page, `[...document.querySelectorAll('#add-form .field-error')].filter(e => e.textContent).map(e => e.closest('.field').dataset.field).join(',')`); s != badField {
		t.Errorf("problems are shown beside %s, want %s alone", s, badField)
	}
	var kept map[string]string
	if err := json.Unmarshal([]byte(r.evalString(page, `JSON.stringify(Object.fromEntries([...document.querySelectorAll('#add-form input')].map(i => [i.name, i.value])))`)), &kept); err != nil {
		t.Fatal(err)
	}
	for _, f := range j.fields {
		if kept[f] != values[f] {
			t.Errorf("after the refusal the form's %s holds %q, want %q as typed", f, kept[f], values[f])
		}
	}
	if s := r.evalString(page, `document.getElementById('add-error').textContent`); s != say("Nothing was added: correct what is marked above.", "No se añadió nada: corrija lo marcado arriba.") {
		t.Errorf("the form's refusal reads %q", s)
	}
	if docs {
		r.shotOf(page, "add-field-error", "#add-form")
		// At 420 px the form, its problem shown, fits the screen.
		r.viewport(page, 420, 900)
		r.waitJS(page, `innerWidth === 420`, "the narrow viewport")
		if s := r.evalString(page, `[...document.querySelectorAll('#add-form *')].filter(e => e.getBoundingClientRect().right > innerWidth + 1)
			.map(e => e.tagName + '.' + e.className).slice(0, 5).join('; ') || (document.documentElement.scrollWidth > innerWidth ? 'the page' : '')`); s != "" {
			t.Errorf("at 420 px, wider than the screen: %s", s)
		}
		r.viewport(page, 1280, 1000)
	}
	if a := httpDo(t, http.MethodGet, r.apis[j.api]+base+"/"+values["id"], consoleAcct3Token); a.status != http.StatusNotFound {
		t.Errorf("the refused form made %s: %d %s", values["id"], a.status, a.body)
	}
	r.click(page, "#add-cancel")

	r.deleteFromCard(t, page, j, from, say)
}

// changeFilter changes the destination's events filter and window (and, in Spanish, its
// rate cap, typed with a decimal comma) from its card: first with bad values (the dialog
// stays, the API's words beside each field), then to job.failed alone and a window of 4,
// which the card shows, after which a completed job is not sent and a failed one is.
func (r *consoleRig) changeFilter(t *testing.T, page context.Context, j addJourney, from int) {
	id := j.values["id"]
	url := r.apis[j.api] + "/v1/connectors/" + j.connector + "/destinations/" + id
	card := `document.querySelector('article[data-id="` + id + `"]')`
	r.click(page, `article[data-id="`+id+`"] button.change`)
	r.waitJS(page, `document.getElementById('action-dialog').open && document.querySelector('#action-body .change-fields') !== null`, "the change dialog")
	fields := r.evalString(page, `[...document.querySelectorAll('#action-body .field')].map(f => f.dataset.field).join(',')`)
	want := map[string]string{"eventbridge": "role_arn,events", "kinesis": "role_arn,kms_key_arn,events", "pubsub": "events"}[j.connector] + ",in_flight,max_rate"
	if fields != want {
		t.Errorf("the change dialog offers %s, want %s", fields, want)
	}
	badField, bad, body := "events", "job.nope", `{"events":["job.nope"]}`
	if j.connector != "pubsub" {
		badField, bad = "role_arn", "arn:aws:iam::222233334444:user/web"
		body = `{"role_arn":"` + bad + `"}`
		if s := r.evalString(page, `document.getElementById('change-role_arn').value`); s != j.values["role_arn"] {
			t.Errorf("the change dialog's role is %q, want the destination's %q", s, j.values["role_arn"])
		}
		r.fill(page, "#change-role_arn", bad)
	} else {
		r.fill(page, "#change-events", bad)
	}
	words := fieldWords(t, httpSend(t, http.MethodPatch, url, consoleAcct3Token, body), badField)
	if s := r.evalString(page, `document.getElementById('change-in_flight').value + '/' + document.getElementById('change-max_rate').value`); s != "16/" {
		t.Errorf("the change dialog's window and rate cap read %q, want the card's 16 and none", s)
	}
	r.fill(page, "#change-in_flight", "65")
	windowWords := fieldWords(t, httpSend(t, http.MethodPatch, url, consoleAcct3Token, `{"in_flight":65}`), "in_flight")
	r.click(page, "#action-confirm")
	sel := `#action-body .field[data-field="` + badField + `"] .field-error`
	r.waitJS(page, `document.querySelector('`+sel+`')?.textContent !== ''`, "the change's problem beside "+badField)
	if got := r.evalString(page, `document.querySelector('`+sel+`').textContent`); got != words {
		t.Errorf("beside %s the change dialog says %q; the API says %q", badField, got, words)
	}
	if got := r.evalString(page, `document.querySelector('#action-body .field[data-field="in_flight"] .field-error').textContent`); got != windowWords {
		t.Errorf("beside in_flight the change dialog says %q; the API says %q", got, windowWords)
	}
	if !r.evalBool(page, `document.getElementById('action-dialog').open`) {
		t.Fatal("the refused change closed its dialog")
	}
	if j.held {
		r.shotOf(page, "add-change-error", "#action-dialog")
	}
	if j.connector != "pubsub" {
		r.fill(page, "#change-role_arn", j.values["role_arn"])
	}
	r.fill(page, "#change-in_flight", "4")
	wantRate := "" // the card's dataset: none
	if j.lang == "es" {
		wantRate = "2.5"
		r.fill(page, "#change-max_rate", "2,5")
	}
	r.fill(page, "#change-events", "job.failed")
	if !r.evalBool(page, `document.querySelector('#action-body input[name="events-kind"][value="only"]').checked`) {
		t.Error("typing event types does not choose «only these types»")
	}
	r.click(page, "#action-confirm")
	r.waitJS(page, `!document.getElementById('action-dialog').open && `+card+`.querySelector('.notice')?.dataset.kind === 'ok'`, "the change saved")
	if s := r.evalString(page, card+`.dataset.inFlight + '/' + `+card+`.dataset.maxRate`); s != "4/"+wantRate {
		t.Errorf("after the change the card's window and rate cap read %q, want 4/%s", s, wantRate)
	}
	var changed apiCard
	getJSON(t, url, consoleAcct3Token, &changed)
	if changed.InFlight != 4 || (changed.MaxRate == nil) != (wantRate == "") {
		t.Errorf("after the change the API's card has in_flight %d, max_rate %v; want 4, %q", changed.InFlight, changed.MaxRate, wantRate)
	}
	before := len(j.arrivals(t))
	completed := jobevent.Job{ID: fmt.Sprintf("0190f2a4-6666-7000-8000-%012d", from+10), Status: "completed"}
	failed := jobevent.Job{ID: fmt.Sprintf("0190f2a4-6666-7000-8000-%012d", from+11), Status: "failed"}
	r.publishJobs("fleet-tenant", completed, failed)
	waitUntil(t, 30*time.Second, "the failed job at the bus", func() bool { return slices.Contains(j.arrivals(t), failed.EventID()) })
	if got := j.arrivals(t)[before:]; !slices.Equal(got, []string{failed.EventID()}) {
		t.Errorf("after the filter changed to job.failed the bus got %v, want the failed job alone", got)
	}
}

// deleteFromCard deletes the destination through its dialog, then checks that nothing
// more reaches its bus while the account's platform destination gets what follows.
func (r *consoleRig) deleteFromCard(t *testing.T, page context.Context, j addJourney, from int, say func(string, string) string) {
	id := j.values["id"]
	base := "/v1/connectors/" + j.connector + "/destinations/"
	var held jobevent.Job
	if j.held {
		// A failed job's write held at the bus: in flight when the delete answers.
		r.bus.Hold()
		held = jobevent.Job{ID: fmt.Sprintf("0190f2a4-6666-7000-8000-%012d", from+20), Status: "failed"}
		r.publishJobs("fleet-tenant", held)
		waitUntil(t, 30*time.Second, "its write and the platform's held at the bus", func() bool { return r.bus.Waiting() >= 2 })
	}
	r.click(page, `article[data-id="`+id+`"] button.delete`)
	r.waitJS(page, `document.getElementById('action-dialog').open && document.getElementById('delete-typed') !== null`, "the delete dialog")
	if s := r.evalString(page, `document.getElementById('action-title').textContent`); s != say("Delete "+id+"?", "¿Borrar "+id+"?") {
		t.Errorf("the delete dialog's title reads %q", s)
	}
	if s := r.evalString(page, `document.querySelector('#action-body .delete-stops').textContent`); !strings.Contains(s, j.target) {
		t.Errorf("the delete dialog does not name what stops (%s): %q", j.target, s)
	}
	if !r.evalBool(page, `document.getElementById('action-confirm').disabled`) {
		t.Error("the delete can be confirmed before the id is typed")
	}
	r.fill(page, "#delete-typed", id+"x")
	if !r.evalBool(page, `document.getElementById('action-confirm').disabled`) {
		t.Error("the delete can be confirmed with another id typed")
	}
	r.fill(page, "#delete-typed", id)
	r.waitJS(page, `!document.getElementById('action-confirm').disabled`, "the delete confirmable once the id is typed")
	if j.held {
		r.shotOf(page, "add-delete-dialog", "#action-dialog")
	}
	r.click(page, "#action-confirm")
	r.waitJS(page, `document.querySelector('article[data-id="`+id+`"]') === null && document.getElementById('page-notice').dataset.deleted === '`+id+`'`, "the card gone")
	notice := r.evalString(page, `document.getElementById('page-notice').textContent`)
	want := say(id+" was deleted. No write was under way: nothing more reaches "+j.target+".",
		"Se borró "+id+". No había ninguna escritura en curso: no llega nada más a "+j.target+".")
	if j.held {
		want = say(id+" was deleted. A write was under way when it was: that one event may still reach "+j.target+"; nothing after it will.",
			"Se borró "+id+". Había una escritura en curso: ese evento aún puede llegar a "+j.target+"; nada posterior llegará.")
		r.bus.Release()
		waitUntil(t, 30*time.Second, "the write in flight landing", func() bool { return slices.Contains(j.arrivals(t), held.EventID()) })
	}
	if notice != want {
		t.Errorf("after the delete the page says %q, want %q", notice, want)
	}
	for i := range r.apis {
		if a := httpDo(t, http.MethodGet, r.apis[i]+base+id, consoleAcct3Token); a.status != http.StatusNotFound {
			t.Errorf("relay %d answers %d for the deleted destination", i, a.status)
		}
	}
	atDelete := len(j.arrivals(t))
	after := jobevent.Job{ID: fmt.Sprintf("0190f2a4-6666-7000-8000-%012d", from+30), Status: "failed"}
	r.publishJobs("fleet-tenant", after)
	waitUntil(t, 30*time.Second, "the platform's destination to get what followed", func() bool {
		ids, _ := r.bus.EventIDs(platformBus)
		return slices.Contains(ids, after.EventID())
	})
	if n := len(j.arrivals(t)); n != atDelete {
		t.Errorf("%d events reached the deleted destination's bus after its delete", n-atDelete)
	}
}

// trustFromCard plays an AWS customer: the role gets the trust policy and permissions
// policy copied from the card, and the copied ExternalId is the one the trust requires.
func (r *consoleRig) trustFromCard(t *testing.T, page context.Context, id string) {
	var c apiCard
	connector := r.evalString(page, `document.getElementById('page').dataset.connector`)
	getJSON(t, r.apis[0]+"/v1/connectors/"+connector+"/destinations/"+id, consoleAcct3Token, &c)
	ext := r.copyFromCard(page, id, "external-id")
	if c.ExternalID == nil || ext == "" || ext != *c.ExternalID {
		t.Fatalf("the card's ExternalId copied as %q; the API's card has %v", ext, c.ExternalID)
	}
	trust := r.copyFromCard(page, id, "trust-policy")
	if !strings.Contains(trust, `"`+ext+`"`) || !strings.Contains(trust, awstest.CallerARN) {
		t.Fatalf("the copied trust policy does not require the ExternalId %s of our principal:\n%s", ext, trust)
	}
	perms := r.copyFromCard(page, id, "permissions-policy")
	role := c.Target["role_arn"]
	if err := r.sts.SetTrustPolicy(role, trust); err != nil {
		t.Fatalf("STS refuses the copied trust policy: %v\n%s", err, trust)
	}
	r.sts.SetPermissionsPolicy(role, perms)
}

// labelFromCard plays a Google Cloud customer: it runs the card's label command on the
// topic (pstest has no IAM, so the two grants have nothing to act on).
func (r *consoleRig) labelFromCard(t *testing.T, page context.Context, id string, topics *vkit.TopicAdminClient, topic string) {
	if sa := r.copyFromCard(page, id, "service-account"); sa != "relay@mercamap-prod.iam.gserviceaccount.com" {
		t.Errorf("the card's service account copied as %q", sa)
	}
	cmd := r.copyFromCard(page, id, "command-3")
	m := regexp.MustCompile(`^gcloud pubsub topics update (\S+) --project=(\S+) --update-labels=([^=\s]+)=(\S+)$`).FindStringSubmatch(cmd)
	if m == nil || "projects/"+m[2]+"/topics/"+m[1] != topic {
		t.Fatalf("the card's label command is %q, not one that labels %s", cmd, topic)
	}
	if _, err := topics.UpdateTopic(t.Context(), &pubsubpb.UpdateTopicRequest{
		Topic:      &pubsubpb.Topic{Name: topic, Labels: map[string]string{m[3]: m[4]}},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"labels"}},
	}); err != nil {
		t.Fatal(err)
	}
}

// fitsOneScreen reads "<height> of <window height>".
func fitsOneScreen(s string) bool {
	var h, of int
	_, err := fmt.Sscanf(s, "%d of %d", &h, &of)
	return err == nil && h <= of
}

// fieldWords is what a 400 answer says of one field (its problems, space-separated, as
// the page shows them).
func fieldWords(t *testing.T, a httpAnswer, field string) string {
	t.Helper()
	if a.status != http.StatusBadRequest {
		t.Fatalf("the bad value was not refused: %d %s", a.status, a.body)
	}
	var msgs []string
	for _, f := range decodeAs[apiErrorBody](t, a).Error.Fields {
		if strings.TrimSuffix(strings.SplitN(f.Field, "[", 2)[0], ".") == field {
			msgs = append(msgs, f.Message)
		}
	}
	if len(msgs) == 0 {
		t.Fatalf("the API's refusal names no problem of %s: %s", field, a.body)
	}
	return strings.Join(msgs, " ")
}

// fillForm types values into a form's fields, by name.
func (r *consoleRig) fillForm(ctx context.Context, form string, fields []string, values map[string]string) {
	for _, f := range fields {
		r.fill(ctx, form+` input[name="`+f+`"]`, values[f])
	}
}

// fill replaces an input's text by typing it, as a user does.
func (r *consoleRig) fill(ctx context.Context, sel, text string) {
	actions := []chromedp.Action[chromedp.Void]{chromedp.Evaluate[chromedp.Void](`(() => { const i = document.querySelector('` + sel + `');
		i.value = ''; i.dispatchEvent(new Event('input')); })()`)}
	if text != "" {
		actions = append(actions, chromedp.SendKeys(chromedp.CSS(sel), text))
	}
	if err := chromedp.Do(ctx, actions...); err != nil {
		r.t.Fatalf("type into %s: %v", sel, err)
	}
}

func (r *consoleRig) evalBool(ctx context.Context, expr string) bool {
	b, err := chromedp.Run(ctx, chromedp.Evaluate[bool](expr))
	if err != nil {
		r.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return b
}

// publishJobs publishes jobs of tenant, in order, each confirmed before the next.
func (r *consoleRig) publishJobs(tenant string, jobs ...jobevent.Job) {
	for _, job := range jobs {
		job.Tenant = tenant
		dc, err := r.ch.PublishWithDeferredConfirm(r.exchange, job.RoutingKey(), false, false, jobevent.Build(job, r.exchange, r.key, time.Now()))
		if err != nil || !dc.Wait() {
			r.t.Fatalf("publish %s: %v", job.ID, err)
		}
	}
}

// kinesisEventIDs are the event ids on the stream's one shard, first arrivals in order.
// Each read is a new connection, and one that breaks is read again: the test polls, and
// kinesalite may close a kept-alive connection just as it is reused.
func kinesisEventIDs(t *testing.T, endpoint, stream string) []string {
	t.Helper()
	c := kinesis.New(kinesis.Options{Region: "us-east-1", BaseEndpoint: aws.String(endpoint),
		Credentials: credentials.NewStaticCredentialsProvider("AKIDKINESALITE", "secret", ""), Retryer: aws.NopRetryer{},
		HTTPClient: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}})
	read := func() ([]string, error) {
		it, err := c.GetShardIterator(t.Context(), &kinesis.GetShardIteratorInput{StreamName: aws.String(stream),
			ShardId: aws.String("shardId-000000000000"), ShardIteratorType: kinesistypes.ShardIteratorTypeTrimHorizon})
		if err != nil {
			return nil, err
		}
		var ids []string
		for iter := it.ShardIterator; iter != nil; {
			out, err := c.GetRecords(t.Context(), &kinesis.GetRecordsInput{ShardIterator: iter})
			if err != nil {
				return nil, err
			}
			if len(out.Records) == 0 {
				break
			}
			for _, rec := range out.Records {
				var body struct {
					EventID string `json:"event_id"`
				}
				if err := json.Unmarshal(rec.Data, &body); err != nil {
					t.Fatalf("record %q: %v", rec.Data, err)
				}
				ids = append(ids, body.EventID)
			}
			iter = out.NextShardIterator
		}
		return firstOf(ids), nil
	}
	ids, err := read()
	for try := 1; err != nil && try < 3; try++ {
		ids, err = read()
	}
	if err != nil {
		t.Fatalf("read %s: %v", stream, err)
	}
	return ids
}

// firstOf keeps each id's first arrival, in order (a write retried may land twice).
func firstOf(ids []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}
