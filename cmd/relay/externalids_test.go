package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/mercamap/relay/internal/api/contracttest"
	"github.com/mercamap/relay/internal/awstest"
	"github.com/mercamap/relay/internal/jobevent"
	"github.com/mercamap/relay/internal/store"
	"github.com/mercamap/relay/internal/stream"
	"github.com/mercamap/relay/internal/testpeer"
)

const (
	testPin       = "relay-0123456789abcdef0123456789abcdef"
	testExtSecret = "external-id-secret-for-the-test-0123456789"
)

var issuedForm = regexp.MustCompile(`^relay-[0-9a-f]{32}$`)

// TestExternalIDsSurviveAnEmptyRedis runs the relay binary with two EventBridge
// destinations behind an STS that enforces each role's ExternalId: one pins its id in the
// config, the other derives it from identity.external_id_secret. The customer trusts the
// ids the cards show; events are delivered; the relay stops, Redis is emptied (FLUSHALL),
// the relay starts again: the cards show the same ExternalIds, and the next events are
// delivered through the same roles with the same ExternalIds without a single rejection.
// A reload that would change the pinned id is refused and delivery goes on.
func TestExternalIDsSurviveAnEmptyRedis(t *testing.T) {
	amqpURL, rds := testpeer.SharedRabbitMQ(t), testpeer.StartRedis(t)
	sts, bus := awstest.NewSTS(t), awstest.NewEventBridge(t)
	bus.RequireSessionFrom(sts)
	bin := buildRelay(t)
	suffix := fmt.Sprint(time.Now().UnixNano())
	exchange, queue := "relay-test-extid-"+suffix, "relay-test-extid-"+suffix
	listen := fmt.Sprintf("127.0.0.1:%d", testpeer.FreePort(t))
	base := contracttest.New(t).Proxy("http://" + listen) // every call and answer checked against the document
	const adminToken = "admin-token-3b8e1f6a9c"
	roles := map[string]string{
		"pinned-bus":  "arn:aws:iam::111122223333:role/pinned-delivery",
		"derived-bus": "arn:aws:iam::111122223333:role/derived-delivery",
	}
	busARN := func(id string) string { return "arn:aws:events:us-east-1:111122223333:event-bus/" + id }
	path := filepath.Join(t.TempDir(), "relay.yaml")
	writeCfg := func(pin string) {
		t.Helper()
		cfg := fmt.Sprintf(`
identity:
  aws_principal_arn: arn:aws:iam::999999999999:role/relay
  external_id_secret: env:TEST_EXT_SECRET
rabbitmq: {url: %s, exchange: %s, queue: %s}
redis: {url: %s}
signature: {keys: [env:TEST_HMAC_KEY]}
api:
  listen: %s
  metrics_listen: 127.0.0.1:0
  tokens: [{scope: admin, token: env:TEST_ADMIN_TOKEN}]
aws:
  endpoints: {sts: %s, events: %s}
delivery:
  not_taken_backoff: {initial: 10ms, max: 200ms}
  setup_check: {initial: 20ms, max: 200ms}  # a pending destination is checked again soon
accounts:
  - {id: acct_1, tenants: [single-tenant]}
destinations:
  - {id: pinned-bus, account: acct_1, connector: eventbridge, bus_arn: "%s", role_arn: "%s", external_id: %s}
  - {id: derived-bus, account: acct_1, connector: eventbridge, bus_arn: "%s", role_arn: "%s"}
`, amqpURL, exchange, queue, rds.URL(), listen, sts.URL, bus.URL,
			busARN("pinned-bus"), roles["pinned-bus"], pin, busARN("derived-bus"), roles["derived-bus"])
		if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writeCfg(testPin)
	start := func() (*exec.Cmd, *syncBuffer) {
		t.Helper()
		cmd, logs := startRelay(t, bin, path, "TEST_EXT_SECRET="+testExtSecret, "TEST_ADMIN_TOKEN="+adminToken)
		waitUntil(t, 60*time.Second, "/readyz 200", func() bool { return httpDo(t, "GET", base+"/readyz", "").status == 200 })
		return cmd, logs
	}
	card := func(id string) stream.Card {
		t.Helper()
		a := httpDo(t, "GET", base+"/v1/connectors/eventbridge/destinations/"+id, adminToken)
		var c stream.Card
		if a.status != 200 || json.Unmarshal([]byte(a.body), &c) != nil || c.ExternalID == nil {
			t.Fatalf("card %s: %d %s", id, a.status, a.body)
		}
		return c
	}
	conn, ch := brokerChannel(t, amqpURL, queue)
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	key, _ := hex.DecodeString(testKeyHex)
	var published []string
	publish := func(n int) {
		t.Helper()
		for range n {
			job := jobevent.Job{ID: fmt.Sprintf("0190f2a4-e1d0-7000-8000-%012d", len(published)), Status: "completed"}
			msg := jobevent.Build(job, exchange, key, time.Now())
			dc, err := ch.PublishWithDeferredConfirm(exchange, job.RoutingKey(), false, false, msg)
			if err != nil || !dc.Wait() {
				t.Fatalf("publish: %v", err)
			}
			published = append(published, fmt.Sprintf("%s", msg.Headers["ce-id"]))
		}
	}
	from := 0 // bus entries before this index belong to an earlier life of the relay
	entries := func(id string) []awstest.Entry {
		var mine []awstest.Entry
		for _, e := range bus.Entries()[from:] {
			if e.EventBusName == busARN(id) {
				mine = append(mine, e)
			}
		}
		return mine
	}
	delivered := func(id string) []string { return firstArrivals(t, entries(id)) }
	waitDelivered := func(logs fmt.Stringer) {
		t.Helper()
		for id := range roles {
			deadline := time.Now().Add(60 * time.Second)
			// The bus holds every event, and the card its last delivery (committed behind the write).
			for !slices.Equal(delivered(id), published) || !cardDelivered(card(id), published[len(published)-1]) {
				if time.Now().After(deadline) {
					t.Fatalf("%s got %d of %d events; card %+v\nlogs:\n%s", id, len(delivered(id)), len(published), card(id), logs)
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	}

	// First life: the cards show the ids, and the customer's roles trust exactly those.
	relay, logs := start()
	first := map[string]string{"pinned-bus": *card("pinned-bus").ExternalID, "derived-bus": *card("derived-bus").ExternalID}
	if first["pinned-bus"] != testPin {
		t.Fatalf("the pinned destination's card shows %s, want the pin %s", first["pinned-bus"], testPin)
	}
	if !issuedForm.MatchString(first["derived-bus"]) {
		t.Fatalf("the derived ExternalId %q is not in the issued form", first["derived-bus"])
	}
	for id, role := range roles {
		sts.RequireExternalID(role, first[id])
	}
	waitConsumers(t, conn, queue, 1)
	publish(5)
	waitDelivered(logs)
	if err := relay.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := waitExit(t, relay, 30*time.Second, logs); err != nil {
		t.Fatalf("relay did not stop cleanly: %v\n%s", err, logs)
	}

	// Redis is rebuilt empty.
	st, err := store.Open(rds.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rdb := st.Client()
	if err := rdb.FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	if n, _ := rdb.DBSize(context.Background()).Result(); n != 0 {
		t.Fatalf("Redis holds %d keys after FLUSHALL", n)
	}
	stsCalls := len(sts.Requests())

	// Second life: the same ids, and delivery goes on with no rejection.
	relay, logs = start()
	for id := range roles {
		if got := *card(id).ExternalID; got != first[id] {
			t.Fatalf("after an empty Redis %s's ExternalId is %s, was %s: the customer's trust policy no longer matches", id, got, first[id])
		}
	}
	waitConsumers(t, conn, queue, 1)
	// The destinations start again at the end of the new, empty log; the bus keeps what it
	// took before, so the check is on what it took from here on.
	from, published = len(bus.Entries()), nil
	publish(5)
	waitDelivered(logs)
	for id, role := range roles {
		c := card(id)
		if c.Status != store.Active || c.ConsecutiveFailures != 0 || c.LastFailure != nil ||
			c.LastDelivery == nil || c.LastDelivery.EventID != published[len(published)-1] {
			t.Errorf("%s's card after the rebuild: status %s, %d failures, last failure %+v, last delivery %+v",
				id, c.Status, c.ConsecutiveFailures, c.LastFailure, c.LastDelivery)
		}
		for _, e := range entries(id) {
			s, ok := sts.Session(e.AccessKeyID)
			if !ok || s.RoleARN != role || s.ExternalID != first[id] {
				t.Errorf("%s: a write was signed by %+v, want a session of %s with ExternalId %s", id, s, role, first[id])
			}
		}
	}
	// Every AssumeRole with a destination's real ExternalId was granted; only the probes'
	// wrong ones were refused.
	for _, r := range sts.Requests()[stsCalls:] {
		real := r.ExternalID == first["pinned-bus"] || r.ExternalID == first["derived-bus"]
		if real != r.Granted {
			t.Errorf("after the rebuild STS answered %+v: a real ExternalId must be granted, a probe's refused", r)
		}
	}

	// A reload that would change the issued pin is refused whole; delivery goes on.
	writeCfg(strings.Replace(testPin, "0123", "9999", 1))
	if err := relay.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 30*time.Second, "the reload refused", func() bool {
		return strings.Contains(logs.String(), `"problem":"destinations[0].external_id: pins relay-9999`) &&
			strings.Contains(logs.String(), "pin external_id: "+testPin)
	})
	if got := *card("pinned-bus").ExternalID; got != testPin {
		t.Errorf("after a refused reload the card shows %s", got)
	}
	publish(1)
	waitDelivered(logs)
	if strings.Contains(logs.String(), testExtSecret) {
		t.Error("the ExternalId secret appears in the logs")
	}
}

// TestIssuedExternalIDsArePrintedReadyToPinAndNeverChanged: Redis holds ExternalIds the
// relay issued at random. relay external-ids prints them as config lines; pinning what it
// printed passes check-config; a file that pins or derives another id is refused by
// check-config (with the id to pin) and by serve; an unreachable Redis is said to leave
// the comparison unmade.
func TestIssuedExternalIDsArePrintedReadyToPinAndNeverChanged(t *testing.T) {
	redisURL := testpeer.RedisURL(t)
	st, err := store.Open(redisURL)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	const issued, gone = "relay-aaaaaaaaaaaaaaaa0000000000000001", "relay-cccccccccccccccc0000000000000003"
	for _, s := range []struct{ id, ext string }{{"orders-bus", issued}, {"gone-bus", gone}, {"orders-topic", "relay-dddddddddddddddd0000000000000004"}} {
		if _, err := st.Ensure(ctx, store.Ref{Account: "acct_1", ID: s.id}, s.ext, "fp", time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(t.TempDir(), "relay.yaml")
	write := func(redisURL, secret, pin string) {
		t.Helper()
		identity := `{aws_principal_arn: "arn:aws:iam::999999999999:role/relay", gcp_service_account: relay@relay-prod.iam.gserviceaccount.com` + secret + "}"
		cfg := fmt.Sprintf(`
identity: %s
rabbitmq: {url: "amqp://guest:guest@127.0.0.1:5672/", exchange: fetcher.job.events}
redis: {url: "%s"}
signature: {keys: [env:HMAC]}
api: {listen: "127.0.0.1:0", metrics_listen: "127.0.0.1:0"}
accounts:
  - {id: acct_1, tenants: [single-tenant]}
destinations:
  - {id: orders-bus, account: acct_1, connector: eventbridge, bus_arn: "arn:aws:events:us-east-1:111122223333:event-bus/orders", role_arn: "arn:aws:iam::111122223333:role/r"%s}
  - {id: new-bus, account: acct_1, connector: eventbridge, bus_arn: "arn:aws:events:us-east-1:111122223333:event-bus/new", role_arn: "arn:aws:iam::111122223333:role/r"}
  - {id: orders-topic, account: acct_1, connector: pubsub, project_id: acme-prod, topic_id: relay-events}
`, identity, redisURL, pin)
		if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	envs := map[string]string{"HMAC": testKeyHex, "EXT": testExtSecret}
	const withSecret = ", external_id_secret: env:EXT"

	// The ids issued so far, as the operator pastes them.
	write(redisURL, "", "")
	out, err := runRelay(t, envs, "", "external-ids", "--config", path)
	if err != nil {
		t.Fatalf("external-ids: %v\n%s", err, out)
	}
	var printed struct {
		Destinations []struct {
			ID         string `yaml:"id"`
			ExternalID string `yaml:"external_id"`
		} `yaml:"destinations"`
	}
	if err := yaml.Unmarshal([]byte(out), &printed); err != nil {
		t.Fatalf("external-ids did not print YAML: %v\n%s", err, out)
	}
	if len(printed.Destinations) != 1 || printed.Destinations[0].ID != "orders-bus" || printed.Destinations[0].ExternalID != issued {
		t.Fatalf("external-ids printed %+v, want orders-bus %s only:\n%s", printed.Destinations, issued, out)
	}
	for _, want := range []string{"lives only in Redis: pin it", "# new-bus: no ExternalId issued yet", "#   - id: gone-bus   # account acct_1\n#     external_id: " + gone} {
		if !strings.Contains(out, want) {
			t.Errorf("external-ids output lacks %q:\n%s", want, out)
		}
	}

	// Pinning what it printed passes, with the secret deriving the new destination's id.
	write(redisURL, withSecret, ", external_id: "+printed.Destinations[0].ExternalID)
	if out, err := runRelay(t, envs, "", "check-config", "--config", path); err != nil || !strings.Contains(out, ": ok (1 accounts, 3 destinations)") {
		t.Fatalf("check-config with the printed pin: %v\n%s", err, out)
	}

	// A pin or a derivation that would change the issued id is refused, naming the id to pin.
	for name, c := range map[string]struct{ secret, pin, says string }{
		"another pin":         {withSecret, ", external_id: " + testPin, "destinations[0].external_id: pins " + testPin + " but the relay issued " + issued},
		"a secret added late": {withSecret, "", "destinations[0].external_id: identity.external_id_secret derives relay-"},
	} {
		write(redisURL, c.secret, c.pin)
		out, err := runRelay(t, envs, "", "check-config", "--config", path)
		if err == nil || !strings.Contains(out, c.says) || !strings.Contains(out, "pin external_id: "+issued+"\n") {
			t.Errorf("%s: check-config said %v:\n%s", name, err, out)
		}
		if strings.Contains(out, testExtSecret) {
			t.Errorf("%s: check-config printed the secret", name)
		}
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err = run(sctx, []string{"serve", "--config", path}, func(k string) string { return envs[k] }, nil, io.Discard, io.Discard)
		cancel()
		if err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: serve ended with %v, want it refused", name, err)
		}
	}
	if ids, err := st.ExternalIDs(ctx, []store.Ref{{Account: "acct_1", ID: "orders-bus"}, {Account: "acct_1", ID: "new-bus"}}); err != nil || ids[0] != issued || ids[1] != "" {
		t.Errorf("after the refusals Redis holds %v (%v), want %s and nothing for new-bus", ids, err, issued)
	}

	// Redis out of reach: the file is still checked, and the output says what was not.
	write(fmt.Sprintf("redis://127.0.0.1:%d/0", testpeer.FreePort(t)), withSecret, ", external_id: "+testPin)
	out, err = runRelay(t, envs, "", "check-config", "--config", path)
	if err != nil || !strings.Contains(out, "the ExternalIds were not compared with those Redis holds") || !strings.Contains(out, ": ok") {
		t.Errorf("check-config without Redis: %v\n%s", err, out)
	}
}

// TestServeAndCheckConfigRefuseExternalIDsThatWouldLiveOnlyInRedis: the promise that an
// ExternalId never changes holds by default. An AWS destination with neither a pin nor
// identity.external_id_secret is refused by check-config and serve, each named by its
// path with the fix (the secret, or relay external-ids' pins); Pub/Sub has no ExternalId.
// With the secret set the same file passes. serve refuses before it waits for Redis.
func TestServeAndCheckConfigRefuseExternalIDsThatWouldLiveOnlyInRedis(t *testing.T) {
	path := filepath.Join(t.TempDir(), "relay.yaml")
	write := func(secret string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(`
identity: {aws_principal_arn: "arn:aws:iam::999999999999:role/relay", gcp_service_account: relay@relay-prod.iam.gserviceaccount.com`+secret+`}
rabbitmq: {url: "amqp://guest:guest@127.0.0.1:5672/", exchange: fetcher.job.events}
redis: {url: "redis://127.0.0.1:`+fmt.Sprint(testpeer.FreePort(t))+`/0"}
signature: {keys: [`+testKeyHex+`]}
api: {listen: "127.0.0.1:0", metrics_listen: "127.0.0.1:0"}
accounts:
  - {id: acct_1, tenants: [single-tenant]}
destinations:
  - {id: loose-bus, account: acct_1, connector: eventbridge, bus_arn: "arn:aws:events:us-east-1:111122223333:event-bus/a", role_arn: "arn:aws:iam::111122223333:role/r"}
  - {id: kept-bus, account: acct_1, connector: eventbridge, bus_arn: "arn:aws:events:us-east-1:111122223333:event-bus/b", role_arn: "arn:aws:iam::111122223333:role/r", external_id: `+testPin+`}
  - {id: loose-stream, account: acct_1, connector: kinesis, stream_arn: "arn:aws:kinesis:us-east-1:111122223333:stream/s", role_arn: "arn:aws:iam::111122223333:role/r"}
  - {id: a-topic, account: acct_1, connector: pubsub, project_id: acme-prod, topic_id: relay-events}
`), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	envs := map[string]string{"EXT": testExtSecret}
	write("")
	out, err := runRelay(t, envs, "", "check-config", "--config", path)
	fix := "is not pinned and identity.external_id_secret is not set"
	for _, want := range []string{"destinations[0].external_id: " + fix, "destinations[2].external_id: " + fix,
		"relay external-ids --config " + path, "openssl rand -hex 32"} {
		if err == nil || !strings.Contains(out, want) {
			t.Errorf("check-config (%v) does not say %q:\n%s", err, want, out)
		}
	}
	if strings.Contains(out, "destinations[1]") || strings.Contains(out, "destinations[3]") {
		t.Errorf("check-config names the pinned destination or the Pub/Sub one:\n%s", out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = run(ctx, []string{"serve", "--config", path}, func(k string) string { return envs[k] }, nil, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "destinations[0].external_id: "+fix) {
		t.Errorf("serve ended with %v, want it refused naming destinations[0].external_id", err)
	}

	write(", external_id_secret: env:EXT")
	if out, err := runRelay(t, envs, "", "check-config", "--config", path); err != nil || !strings.Contains(out, ": ok (1 accounts, 4 destinations)") {
		t.Errorf("check-config with identity.external_id_secret: %v\n%s", err, out)
	}
}

// cardDelivered says the card's last delivery is the event eventID.
func cardDelivered(c stream.Card, eventID string) bool {
	return c.LastDelivery != nil && c.LastDelivery.EventID == eventID
}
