package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"image"
	"image/color/palette"
	"image/draw"
	"image/png"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/pstest"
	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/fetch"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/mercamap/relay/internal/api/contracttest"
	"github.com/mercamap/relay/internal/awstest"
	"github.com/mercamap/relay/internal/console"
	"github.com/mercamap/relay/internal/jobevent"
	"github.com/mercamap/relay/internal/store"
	"github.com/mercamap/relay/internal/testpeer"
)

// Tokens of the console test's config.
const (
	consoleAdminToken = "console-admin-token-0123456789"
	consoleAcct1Token = "console-acct1-token-0123456789"
	consoleAcct2Token = "console-acct2-token-0123456789"
	consoleAcct3Token = "console-acct3-token-0123456789"
	consoleRoleARN    = "arn:aws:iam::111122223333:role/relay-delivery"
)

// consoleRig is two `relay serve` processes on one Redis and one broker queue, with
// EventBridge behind an STS that enforces the trust policy the test puts on the role,
// Pub/Sub (pstest), Kinesis (kinesalite, when asked for) and a headless Chromium.
type consoleRig struct {
	t          testing.TB
	bin        string
	redisURL   string // the relays' Redis
	cfgs       [2]string
	env        []string
	apis       [2]string
	procs      [2]*exec.Cmd
	logs       [2]*syncBuffer
	sts        *awstest.STS
	bus        *awstest.EventBridge
	ps         *pstest.Server
	kinesalite string // its endpoint, when the rig has Kinesis
	exchange   string
	ch         *amqp.Channel
	key        []byte
	browser    context.Context
	shots      string // where screenshots go

	mu      sync.Mutex
	console []string // page exceptions and console errors, CSP violations among them
}

func TestConsoleInChromium(t *testing.T) {
	testpeer.Need(t, "chromium")
	r := startConsoleRig(t, "")

	// Sign in as an operator on relay 1, and as account 1 on relay 0 (the one killed later).
	admin := r.tab(r.apis[1], "en-US")
	r.signIn(admin, consoleAdminToken)
	r.shot(admin, "eventbridge")
	// The EventBridge page lists the EventBridge destinations of every account, and no other.
	if got := r.cardIDs(admin); strings.Join(got, ",") != "orders-bus,other-bus" {
		t.Errorf("the operator's EventBridge page lists %v, want orders-bus and other-bus only", got)
	}
	r.open(admin, "kinesis")
	if got := r.cardIDs(admin); strings.Join(got, ",") != "orders-stream" {
		t.Errorf("the Kinesis page lists %v", got)
	}
	r.waitJS(admin, `document.querySelector('article[data-id="orders-stream"] pre[data-copy="kms-statement"]')?.textContent.includes('kms:GenerateDataKey') === true`, "the KMS statement on the Kinesis card")
	r.shot(admin, "kinesis")
	r.open(admin, "pubsub")
	if got := r.cardIDs(admin); strings.Join(got, ",") != "orders-topic" {
		t.Errorf("the Pub/Sub page lists %v", got)
	}
	if n := r.evalInt(admin, `document.querySelectorAll('article[data-id="orders-topic"] pre[data-copy^="command-"]').length`); n != 3 {
		t.Errorf("the Pub/Sub card shows %d gcloud commands, want 3", n)
	}
	r.shot(admin, "pubsub")
	r.open(admin, "eventbridge")
	r.waitLive(admin, "orders-bus")

	// Account 2, in a browser that prefers Spanish, sees only its own card, in Spanish,
	// and the API refuses it account 1's card and channel.
	other := r.tab(r.apis[1], "es-ES")
	r.signIn(other, consoleAcct2Token)
	if got := r.cardIDs(other); strings.Join(got, ",") != "other-bus" {
		t.Errorf("account 2's EventBridge page lists %v, want other-bus only", got)
	}
	r.waitJS(other, `document.querySelector('article[data-id="other-bus"] button.test').textContent === 'Enviar una prueba'`, "the Spanish «Enviar una prueba»")
	if s := r.evalString(other, `document.querySelector('article[data-id="other-bus"] button.activate').textContent`); s != "Activar" {
		t.Errorf("the activate button reads %q in Spanish", s)
	}
	if n := r.evalInt(other, `document.querySelectorAll('button.disable').length`); n != 0 {
		t.Errorf("an account token is shown %d Disable buttons", n)
	}
	r.shot(other, "account-2-es")
	probe := `(async () => { const h = {Authorization: 'Bearer ' + sessionStorage.getItem('relay.token')};
		const card = await fetch('/v1/connectors/eventbridge/destinations/orders-bus', {headers: h});
		const snap = await fetch('/v1/streams/destination:orders-bus/snapshot', {headers: h});
		return card.status + ',' + snap.status; })()`
	if got := r.evalString(other, probe); got != "404,403" {
		t.Errorf("account 2's token reading account 1's card and channel got %s, want 404,403", got)
	}

	page := r.tab(r.apis[0], "en-US")
	r.signIn(page, consoleAcct1Token)
	if got := r.cardIDs(page); strings.Join(got, ",") != "orders-bus" {
		t.Errorf("account 1's EventBridge page lists %v", got)
	}
	r.waitLive(page, "orders-bus")
	r.waitLive(admin, "orders-bus")

	// The trust policy the card's Copy button puts on the clipboard is what STS enforces:
	// with it on the role, an event is delivered.
	trust := r.copyFromCard(page, "orders-bus", "trust-policy")
	if !strings.Contains(trust, awstest.CallerARN) || !strings.Contains(trust, "sts:ExternalId") {
		t.Fatalf("the copied trust policy:\n%s", trust)
	}
	if err := r.sts.SetTrustPolicy(consoleRoleARN, trust); err != nil {
		t.Fatalf("STS refuses the copied trust policy: %v\n%s", err, trust)
	}
	r.publish(0, 1)
	r.waitJS(page, `document.querySelector('article[data-id="orders-bus"]').dataset.lastDelivery === '`+eventID(0)+`'`, "the delivery on account 1's card")
	if n := len(r.bus.Entries()); n != 1 {
		t.Fatalf("the bus holds %d entries, want 1", n)
	}

	// «Send a test» shows its outcome.
	r.click(page, `article[data-id="orders-bus"] button.test`)
	r.waitJS(page, `document.querySelector('article[data-id="orders-bus"] .test-outcome')?.dataset.outcome === 'delivered'`, "the test outcome")
	if s := r.evalString(page, `document.querySelector('article[data-id="orders-bus"] .test-outcome').textContent`); !strings.HasPrefix(s, "Test: delivered") {
		t.Errorf("the test outcome reads %q", s)
	}
	r.shot(page, "test-delivered")

	// The operator's page switches to Spanish.
	if err := chromedp.Do(admin, chromedp.SetValue(chromedp.CSS("#lang"), "es"),
		chromedp.Evaluate[chromedp.Void](`document.getElementById('lang').dispatchEvent(new Event('change'))`)); err != nil {
		t.Fatal(err)
	}
	r.waitJS(admin, `document.querySelector('article[data-id="orders-bus"] button.test').textContent === 'Enviar una prueba'`, "the switch to Spanish")

	// Relay 0 is killed under account 1's page; 20 rejections happen while it is down (relay
	// 1 delivers them); it comes back. The page reconnects and ends where the operator's
	// page, which never lost its connection, is: disabled, no event applied twice.
	r.kill(0)
	r.waitJS(page, `document.getElementById('live').dataset.state === 'reconnecting'`, "the page showing reconnecting")
	r.shot(page, "reconnecting")
	r.bus.FailEntries(20, "AccessDeniedException", "User is not authorized to perform: events:PutEvents")
	r.publish(1, 21)
	r.waitJS(admin, `document.querySelector('article[data-id="orders-bus"]').dataset.status === 'disabled'`, "20 rejections disabling the card on the live page")
	r.start(0)
	r.waitJS(page, `document.querySelector('article[data-id="orders-bus"]').dataset.status === 'disabled'`, "the card disabled after the reconnection")
	r.waitLive(page, "orders-bus")
	r.shot(page, "disabled")
	r.shot(admin, "disabled-es")

	a, b := r.cardState(page, "orders-bus"), r.cardState(admin, "orders-bus")
	t.Logf("reconnected page: %+v; live page: %+v", a, b)
	if a.Sequence != b.Sequence || a.Status != b.Status || a.Failures != b.Failures ||
		a.LastFailure != b.LastFailure || a.LastDelivery != b.LastDelivery {
		t.Errorf("after the restart the card holds %+v, the page that never left %+v", a, b)
	}
	if a.Status != "disabled" || a.Failures != 20 || a.LastFailure != eventID(20) {
		t.Errorf("the card after 20 rejections: %+v", a)
	}
	for name, s := range map[string]cardState{"reconnected page": a, "live page": b} {
		// One snapshot, then every event after it exactly once: first + applied = last.
		if s.Snapshots != 1 || s.FirstSnapshot+s.Applied != s.Sequence {
			t.Errorf("%s: %d snapshots, snapshot at %d + %d events applied, card at %d: an event applied twice or missed",
				name, s.Snapshots, s.FirstSnapshot, s.Applied, s.Sequence)
		}
	}
	// The stream resent what the reconnected page had replayed: it came twice, was applied once.
	if a.DuplicatesDropped == 0 {
		t.Error("the reconnected page dropped no duplicate: the resent events were not seen")
	}
	var api struct{ Sequence int64 }
	getJSON(t, r.apis[1]+"/v1/connectors/eventbridge/destinations/orders-bus", consoleAdminToken, &api)
	if api.Sequence != a.Sequence {
		t.Errorf("the API's card is at sequence %d, the pages at %d", api.Sequence, a.Sequence)
	}
	// The attempt log is paginated: 22 attempts, 10 a page.
	r.click(page, `article[data-id="orders-bus"] details.attempts summary`)
	r.waitJS(page, `document.querySelectorAll('article[data-id="orders-bus"] .attempts tbody tr').length === 10`, "the first page of attempts")
	r.click(page, `article[data-id="orders-bus"] .attempts button.older`)
	r.waitJS(page, `document.querySelectorAll('article[data-id="orders-bus"] .attempts tbody tr').length === 20`, "the second page of attempts")

	// other-bus's customer trusts any ExternalId: still pending, but the badge reads
	// refused for a security reason, not "being set up".
	if err := r.sts.SetTrustPolicy("arn:aws:iam::444455556666:role/relay-delivery", `{"Version":"2012-10-17","Statement":[{"Effect":"Allow",`+
		`"Principal":{"AWS":"`+awstest.CallerARN+`"},"Action":"sts:AssumeRole","Condition":{"StringLike":{"sts:ExternalId":"*"}}}]}`); err != nil {
		t.Fatal(err)
	}
	// Disable, as an operator, shows its cascade before anything changes.
	r.open(admin, "eventbridge")
	r.waitLive(admin, "other-bus")
	r.waitJS(admin, `document.querySelector('article[data-id="other-bus"] .badge.status').dataset.security === 'true'`,
		"other-bus's badge marked refused for security")
	// The operator's page is in Spanish by now.
	if s := r.evalString(admin, `document.querySelector('article[data-id="other-bus"] .badge.status').textContent`); s != "Rechazado: el rol deja entrar a otros" {
		t.Errorf("other-bus's badge reads %q, want it refused for security", s)
	}
	// Its role is not set up: pending, until the disable.
	before := r.evalString(admin, `document.querySelector('article[data-id="other-bus"]').dataset.status`)
	r.click(admin, `article[data-id="other-bus"] button.disable`)
	r.waitJS(admin, `document.getElementById('disable-dialog').open && document.querySelectorAll('#disable-list li').length === 1`, "the disable dialog")
	if s := r.evalString(admin, `document.querySelector('article[data-id="other-bus"]').dataset.status`); s != before || s != "pending" {
		t.Errorf("other-bus is %s before the disable is confirmed", s)
	}
	r.shot(admin, "disable-dialog")
	r.click(admin, `#disable-confirm`)
	r.waitJS(admin, `document.querySelector('article[data-id="other-bus"]').dataset.status === 'disabled'`, "other-bus disabled")

	// A refused action reads as one, with the relay's reason, and the page stays signed
	// in: the contract's 403 FORBIDDEN, and ACCESS_REVOKED, which the API answers an
	// account token's Disable today. The tab's Disable call gets each answer in turn.
	const reason = "disabling a destination takes an admin token; pause it instead"
	answers := make(chan string, 2)
	r.answerInTab(admin, "*/destinations/orders-bus/disable", func() (int, string) {
		return http.StatusForbidden, `{"error":{"code":"` + <-answers + `","message":"` + reason + `"}}`
	})
	for _, code := range []string{"FORBIDDEN", "ACCESS_REVOKED"} {
		answers <- code
		r.click(admin, `article[data-id="orders-bus"] button.disable`)
		r.waitJS(admin, `document.getElementById('disable-dialog').open`, "the disable dialog of orders-bus")
		r.click(admin, `#disable-confirm`)
		r.waitJS(admin, `document.querySelector('article[data-id="orders-bus"] .notice')?.textContent === 'Este token no puede hacer eso: `+reason+`'`, "the refusal "+code+" on the card")
		if s := r.evalString(admin, `document.getElementById('page').hidden + ',' + document.getElementById('signin').hidden`); s != "false,true" {
			t.Errorf("after a %s refusal the page is hidden, sign-in hidden: %s (signed out?)", code, s)
		}
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.console) > 0 {
		t.Errorf("the pages reported errors (CSP violations, exceptions):\n%s", strings.Join(r.console, "\n"))
	}
}

func eventID(i int) string {
	return jobevent.Job{ID: fmt.Sprintf("0190f2a4-6666-7000-8000-%012d", i), Status: "completed"}.EventID()
}

// startConsoleRig starts the rig; extraDestinations are more YAML entries of the
// destinations list (acct_3, whose tenant is fleet-tenant, has none otherwise).
func startConsoleRig(t testing.TB, extraDestinations string) *consoleRig {
	return startConsoleRigOf(t, consoleRigOptions{destinations: extraDestinations})
}

// startConsoleRigWith is startConsoleRig with the delivery.setup_check backoff: a rig of
// hundreds of destinations that stay pending checks them seldom.
func startConsoleRigWith(t testing.TB, extraDestinations, setupCheck string) *consoleRig {
	return startConsoleRigOf(t, consoleRigOptions{destinations: extraDestinations, setupCheck: setupCheck})
}

// consoleRigOptions: more destinations for the config (YAML entries of its list), the
// delivery.setup_check backoff, and whether Kinesis is served (by kinesalite, behind a
// proxy that takes only writes signed with a session the rig's STS handed out).
type consoleRigOptions struct {
	destinations, setupCheck string
	kinesis                  bool
}

func startConsoleRigOf(t testing.TB, o consoleRigOptions) *consoleRig {
	if o.setupCheck == "" {
		o.setupCheck = "{initial: 20ms, max: 200ms}"
	}
	check := contracttest.New(t) // before the relays: it reports after they stop
	amqpURL, redisURL := testpeer.SharedRabbitMQ(t), testpeer.RedisURL(t)
	r := &consoleRig{t: t, sts: awstest.NewSTS(t), bus: awstest.NewEventBridge(t), bin: buildRelay(t), redisURL: redisURL}
	r.bus.RequireSessionFrom(r.sts)
	ps := pstest.NewServer()
	t.Cleanup(func() { _ = ps.Close() })
	r.ps = ps
	kinesisEndpoint := ""
	if o.kinesis {
		r.kinesalite = awstest.StartKinesalite(t)
		proxy := awstest.NewFaultProxy(t, r.kinesalite)
		proxy.RequireSessionFrom(r.sts)
		kinesisEndpoint = ", kinesis: " + proxy.URL
	}
	suffix := fmt.Sprint(time.Now().UnixNano())
	r.exchange = "relay-test-console-" + suffix
	queue := "relay-test-console-" + suffix
	r.key, _ = hex.DecodeString(testKeyHex)
	r.env = append(os.Environ(), "AWS_ACCESS_KEY_ID=AKIDRELAYTEST", "AWS_SECRET_ACCESS_KEY=test", "AWS_EC2_METADATA_DISABLED=true",
		"TEST_HMAC_KEY="+testKeyHex, "T_ADMIN="+consoleAdminToken, "T_ACCT1="+consoleAcct1Token, "T_ACCT2="+consoleAcct2Token,
		"T_ACCT3="+consoleAcct3Token)
	_, r.ch = brokerChannel(t, amqpURL, queue)
	if err := r.ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	r.shots = os.Getenv("RELAY_CONSOLE_SCREENSHOTS")
	if r.shots == "" {
		r.shots = t.TempDir()
	}
	for i := range r.apis {
		listen := fmt.Sprintf("127.0.0.1:%d", testpeer.FreePort(t))
		// The browser and the tests reach relay i through a check of every request and
		// answer against the API's document.
		r.apis[i] = check.Proxy("http://" + listen)
		// One file for both but the listen address.
		cfg := filepath.Join(t.TempDir(), "relay.yaml")
		if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`
identity:
  name: mercamap
  aws_principal_arn: %s
  external_id_secret: external-id-secret-for-the-test-0123456789
  gcp_service_account: relay@mercamap-prod.iam.gserviceaccount.com
rabbitmq: {url: %s, exchange: %s, queue: %s, prefetch: 32}
redis: {url: %s}
signature: {keys: [env:TEST_HMAC_KEY]}
api:
  listen: "%s"
  metrics_listen: 127.0.0.1:0
  tokens:
    - {scope: admin, token: env:T_ADMIN}
    - {scope: "account:acct_1", token: env:T_ACCT1}
    - {scope: "account:acct_2", token: env:T_ACCT2}
    - {scope: "account:acct_3", token: env:T_ACCT3}
aws:
  region: us-east-1
  endpoints: {sts: %s, events: %s%s}
  # 20 refused writes in a row disable a card here: each drops its session, and the new
  # one must not wait minutes of production backoff and budget.
  sts_budget: {per_destination: {count: 1000, per: 1m}, per_account: {count: 5000, per: 1m}}
  session_backoff: {initial: 1ms, max: 10ms}
gcp: {pubsub_endpoint: %s}
delivery:
  lease_ttl: 1s
  not_taken_backoff: {initial: 10ms, max: 200ms}
  setup_check: %s  # a pending destination is checked again soon
accounts:
  - {id: acct_1, tenants: [single-tenant]}
  - {id: acct_2, tenants: [another-tenant]}
  - {id: acct_3, tenants: [fleet-tenant]}
destinations:
  - {id: orders-bus, account: acct_1, connector: eventbridge, role_arn: %s,
     bus_arn: "arn:aws:events:us-east-1:111122223333:event-bus/orders"}
  - {id: orders-stream, account: acct_1, connector: kinesis, role_arn: %s, events: [job.failed],
     stream_arn: "arn:aws:kinesis:us-east-1:111122223333:stream/orders",
     kms_key_arn: "arn:aws:kms:us-east-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab"}
  - {id: orders-topic, account: acct_1, connector: pubsub, project_id: acme-prod, topic_id: relay-events, events: [job.failed]}
  - {id: other-bus, account: acct_2, connector: eventbridge, role_arn: "arn:aws:iam::444455556666:role/relay-delivery",
     bus_arn: "arn:aws:events:us-east-1:444455556666:event-bus/other"}
%s`, awstest.CallerARN, amqpURL, r.exchange, queue, redisURL, listen, r.sts.URL, r.bus.URL, kinesisEndpoint, ps.Addr, o.setupCheck,
			consoleRoleARN, consoleRoleARN, o.destinations)), 0o600); err != nil {
			t.Fatal(err)
		}
		r.cfgs[i] = cfg
		r.startWith(i, cfg)
	}
	st, err := store.Open(redisURL)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	waitUntil(t, 30*time.Second, "orders-bus's ExternalId", func() bool {
		s, err := st.LoadState(context.Background(), store.Ref{Account: "acct_1", ID: "orders-bus"})
		return err == nil && s.ExternalID != ""
	})
	for i := range r.logs {
		waitUntil(t, 60*time.Second, fmt.Sprintf("relay %d consuming", i), func() bool {
			return strings.Contains(r.logs[i].String(), `"msg":"consuming"`)
		})
	}

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath("chromium"), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 1000))
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	b, cancelBrowser := chromedp.NewContext(alloc)
	t.Cleanup(cancelBrowser)
	if err := chromedp.Do(b); err != nil {
		t.Fatalf("chromium does not start: %v", err)
	}
	r.browser = b
	return r
}

// startWith starts relay i on cfg.
func (r *consoleRig) startWith(i int, cfg string) {
	cmd := exec.Command(r.bin, "serve", "--config", cfg)
	cmd.Env = r.env
	logs := &syncBuffer{}
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	r.procs[i], r.logs[i] = cmd, logs
}

// kill SIGKILLs relay i: no goodbye to the browser's streams.
func (r *consoleRig) kill(i int) {
	_ = r.procs[i].Process.Kill()
	_ = r.procs[i].Wait()
}

// start starts relay i again, on the config it had, and waits until its API answers.
func (r *consoleRig) start(i int) {
	r.startWith(i, r.cfgs[i])
	waitUntil(r.t, 60*time.Second, fmt.Sprintf("relay %d answering again", i), func() bool {
		resp, err := http.Get(r.apis[i] + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// publish sends job events from..to-1 and waits for the broker's confirms.
func (r *consoleRig) publish(from, to int) { r.publishFor("", from, to) }

// publishFor publishes as publish does, for a tenant ("" is single-tenant, acct_1's).
func (r *consoleRig) publishFor(tenant string, from, to int) {
	for i := from; i < to; i++ {
		job := jobevent.Job{ID: fmt.Sprintf("0190f2a4-6666-7000-8000-%012d", i), Status: "completed", Tenant: tenant}
		dc, err := r.ch.PublishWithDeferredConfirm(r.exchange, job.RoutingKey(), false, false, jobevent.Build(job, r.exchange, r.key, time.Now()))
		if err != nil || !dc.Wait() {
			r.t.Fatalf("publish %d: %v", i, err)
		}
	}
}

// tab opens a new tab on the console of api, in a browser whose language is lang.
func (r *consoleRig) tab(api, lang string) context.Context {
	listen := func(ev any) {
		var line string
		switch e := ev.(type) {
		case *runtime.EventExceptionThrown:
			line = "exception: " + e.ExceptionDetails.Text
			if e.ExceptionDetails.Exception != nil {
				line += " " + e.ExceptionDetails.Exception.Description
			}
		case *cdplog.EventEntryAdded:
			// A killed relay makes network errors; anything else at error level is a fault.
			if e.Entry.Level == cdplog.EntryLevelError && e.Entry.Source != cdplog.EntrySourceNetwork {
				line = "log: " + e.Entry.Text
			}
		case *runtime.EventConsoleAPICalled:
			if e.Type == runtime.ConsoleAPICalledTypeError {
				line = "console.error"
			}
		}
		if line != "" {
			r.mu.Lock()
			r.console = append(r.console, api+": "+line)
			r.mu.Unlock()
		}
	}
	ctx, cancel := chromedp.NewContext(r.browser, chromedp.WithListener(listen))
	r.t.Cleanup(cancel)
	setup := chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		if _, err := cdp.Call(ctx, t, cdplog.Enable, cdp.Empty{}); err != nil {
			return err
		}
		ua := "Mozilla/5.0 (X11; Linux x86_64) relay-console-test"
		if _, err := cdp.Call(ctx, t, emulation.SetUserAgentOverride, emulation.SetUserAgentOverrideParams{UserAgent: ua, AcceptLanguage: lang}); err != nil {
			return err
		}
		// Several tabs, one focus: the clipboard wants a focused page.
		if _, err := cdp.Call(ctx, t, emulation.SetFocusEmulationEnabled, emulation.SetFocusEmulationEnabledParams{Enabled: true}); err != nil {
			return err
		}
		b := chromedp.FromContext(ctx).Browser
		for _, name := range []string{"clipboard-read", "clipboard-write"} {
			if _, err := cdp.Call(ctx, b, browser.SetPermission, browser.SetPermissionParams{
				Permission: &browser.PermissionDescriptor{Name: name}, Setting: browser.PermissionSettingGranted, Origin: api}); err != nil {
				return err
			}
		}
		return nil
	})
	if err := chromedp.Do(ctx, setup, chromedp.Navigate(api+console.Prefix), chromedp.WaitVisible(chromedp.CSS("#token"))); err != nil {
		r.t.Fatalf("open the console on %s: %v", api, err)
	}
	return ctx
}

func (r *consoleRig) signIn(ctx context.Context, token string) {
	r.shot(ctx, "sign-in")
	if err := chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.CSS("#token"), token),
		chromedp.Click(chromedp.CSS(`#signin button[type="submit"]`)),
	); err != nil {
		r.t.Fatal(err)
	}
	r.waitJS(ctx, `document.getElementById('page').dataset.ready === 'true' && document.getElementById('page').dataset.connector === 'eventbridge'`, "the EventBridge page after sign-in")
	// The token is in this tab's sessionStorage and in no URL.
	if u := r.evalString(ctx, `location.href`); strings.Contains(u, token) {
		r.t.Errorf("the token is in the URL %s", u)
	}
}

// mintLink asks api, as the platform's backend (an admin token), for a sign-in link of
// account: its URL.
func (r *consoleRig) mintLink(api, account string) string {
	r.t.Helper()
	a := httpSend(r.t.(*testing.T), http.MethodPost, api+"/v1/accounts/"+account+"/sign-in-links", consoleAdminToken, "")
	var link struct {
		URL string `json:"url"`
	}
	if a.status != http.StatusCreated || json.Unmarshal([]byte(a.body), &link) != nil || !strings.Contains(link.URL, "/console/#code=") {
		r.t.Fatalf("sign-in link for %s: %d %s", account, a.status, a.body)
	}
	return link.URL
}

// signInByLink opens, in a tab on the console of api, a sign-in link of account minted
// on mintAPI: the customer's way in. Both replicas stand behind one public address (as
// api.public_url names it), so the link is opened on the tab's own. The page exchanges
// the code, takes it out of the address bar and shows when the session ends.
func (r *consoleRig) signInByLink(ctx context.Context, api, mintAPI, account string) {
	r.t.Helper()
	_, fragment, _ := strings.Cut(r.mintLink(mintAPI, account), console.Prefix)
	r.openLink(ctx, api+console.Prefix+fragment)
}

// openLink opens a sign-in link in the tab, which must sign in (see signInByLink).
func (r *consoleRig) openLink(ctx context.Context, link string) {
	r.t.Helper()
	if err := chromedp.Do(ctx, chromedp.Navigate(link)); err != nil {
		r.t.Fatal(err)
	}
	r.waitJS(ctx, `document.getElementById('page').dataset.ready === 'true' && document.getElementById('page').dataset.connector === 'eventbridge'`, "the EventBridge page after the sign-in link")
	_, code, _ := strings.Cut(link, "#code=")
	if u := r.evalString(ctx, `location.href`); strings.Contains(u, code) || strings.Contains(u, "code=") {
		r.t.Errorf("the sign-in link's code is still in the address bar: %s", u)
	}
	if r.evalString(ctx, `document.getElementById('who').dataset.sessionEnds ?? ''`) == "" {
		r.t.Errorf("the page does not say when the session ends: %q", r.evalString(ctx, `document.getElementById('who').textContent`))
	}
}

// open shows a connector's page.
func (r *consoleRig) open(ctx context.Context, connector string) {
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#nav a[data-connector="`+connector+`"]`))); err != nil {
		r.t.Fatal(err)
	}
	r.waitJS(ctx, `document.getElementById('page').dataset.ready === 'true' && document.getElementById('page').dataset.connector === '`+connector+`'`, "the "+connector+" page")
}

func (r *consoleRig) cardIDs(ctx context.Context) []string {
	ids, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('article.card')].map(a => a.dataset.id).sort()`))
	if err != nil {
		r.t.Fatal(err)
	}
	return ids
}

func (r *consoleRig) waitLive(ctx context.Context, id string) {
	r.waitJS(ctx, `document.querySelector('article[data-id="`+id+`"]')?.dataset.live === 'live'`, id+" live")
}

// copyFromCard clicks a card's Copy button and returns what it put on the clipboard.
func (r *consoleRig) copyFromCard(ctx context.Context, id, name string) string {
	sel := `article[data-id="` + id + `"] button.copy[data-copy="` + name + `"]`
	r.click(ctx, sel)
	r.waitJS(ctx, `document.querySelector('`+sel+`').dataset.copied === 'true'`, "the copy of "+name)
	text, err := chromedp.Run(ctx, chromedp.Evaluate[string](`navigator.clipboard.readText()`, chromedp.EvalAwaitPromise))
	if err != nil {
		r.t.Fatalf("read the clipboard: %v", err)
	}
	return text
}

func (r *consoleRig) click(ctx context.Context, sel string) {
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(sel))); err != nil {
		r.t.Fatalf("click %s: %v", sel, err)
	}
}

// waitJS waits until expr is true in the tab.
func (r *consoleRig) waitJS(ctx context.Context, expr, what string) {
	r.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`(() => { try { return Boolean(`+expr+`); } catch { return false; } })()`))
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			body, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
			r.t.Fatalf("timed out waiting for %s (%v); the page reads:\n%s", what, err, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (r *consoleRig) evalString(ctx context.Context, expr string) string {
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		r.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return s
}

func (r *consoleRig) evalInt(ctx context.Context, expr string) int {
	n, err := chromedp.Run(ctx, chromedp.Evaluate[int](expr))
	if err != nil {
		r.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return n
}

// cardState is what a card shows, read off its data-* attributes.
type cardState struct {
	Status, LastFailure, LastDelivery      string
	Sequence, Applied, FirstSnapshot       int64
	Failures, Snapshots, DuplicatesDropped int
}

func (r *consoleRig) cardState(ctx context.Context, id string) cardState {
	raw, err := chromedp.Run(ctx, chromedp.Evaluate[string](`JSON.stringify(document.querySelector('article[data-id="`+id+`"]').dataset)`))
	if err != nil {
		r.t.Fatal(err)
	}
	var d map[string]string
	_ = json.Unmarshal([]byte(raw), &d)
	n := func(k string) int64 {
		var v int64
		fmt.Sscan(d[k], &v)
		return v
	}
	return cardState{Status: d["status"], LastFailure: d["lastFailure"], LastDelivery: d["lastDelivery"],
		Sequence: n("sequence"), Applied: n("applied"), FirstSnapshot: n("firstSnapshot"),
		Failures: int(n("consecutiveFailures")), Snapshots: int(n("snapshots")), DuplicatesDropped: int(n("duplicatesDropped"))}
}

// shot takes a screenshot of the tab, checks it is not blank (a page drawn has many
// colours; a blank one a handful) and keeps it under r.shots.
func (r *consoleRig) shot(ctx context.Context, name string) {
	r.t.Helper()
	if err := chromedp.Do(ctx, chromedp.Evaluate[chromedp.Void](`window.scrollTo(0, 0)`)); err != nil {
		r.t.Fatal(err)
	}
	buf, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		r.t.Fatalf("screenshot %s: %v", name, err)
	}
	img, err := png.Decode(bytes.NewReader(buf))
	if err != nil {
		r.t.Fatalf("screenshot %s is not a PNG: %v", name, err)
	}
	colours := map[uint32]bool{}
	bounds := img.Bounds()
	for y := bounds.Min.Y; y < bounds.Max.Y; y += 2 {
		for x := bounds.Min.X; x < bounds.Max.X; x += 2 {
			cr, cg, cb, _ := img.At(x, y).RGBA()
			colours[cr>>8<<16|cg>>8<<8|cb>>8] = true
		}
	}
	if len(colours) < 50 {
		r.t.Errorf("screenshot %s looks blank: %d colours", name, len(colours))
	}
	r.writeShot(name, img)
}

// writeShot keeps a screenshot under r.shots as a 256-colour PNG (a third of the size
// of Chromium's: the docs keep some, docs/console.md).
func (r *consoleRig) writeShot(name string, img image.Image) {
	p := image.NewPaletted(img.Bounds(), palette.Plan9)
	draw.Draw(p, p.Bounds(), img, img.Bounds().Min, draw.Src)
	var out bytes.Buffer
	if err := (&png.Encoder{CompressionLevel: png.BestCompression}).Encode(&out, p); err != nil {
		r.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(r.shots, name+".png"), out.Bytes(), 0o644); err != nil {
		r.t.Fatal(err)
	}
}

// answerInTab answers the tab's requests to URLs matching pattern with answer's status
// and JSON body, in place of the relay: for answers the relay cannot be made to give.
func (r *consoleRig) answerInTab(ctx context.Context, pattern string, answer func() (int, string)) {
	if err := chromedp.Listen(ctx, func(ev any) {
		e, ok := ev.(*fetch.EventRequestPaused)
		if !ok {
			return
		}
		go func() {
			status, body := answer()
			_ = chromedp.Do(ctx, chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
				_, err := cdp.Call(ctx, t, fetch.FulfillRequest, fetch.FulfillRequestParams{RequestID: e.RequestID, ResponseCode: int64(status),
					ResponseHeaders: []*fetch.HeaderEntry{{Name: "Content-Type", Value: "application/json"}}, Body: []byte(body)})
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

// getJSON GETs url with a bearer token and decodes the answer into v.
func getJSON(t *testing.T, url, token string, v any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d", url, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatal(err)
	}
}
