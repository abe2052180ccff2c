package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mercamap/relay/client"
	"github.com/mercamap/relay/internal/api/apitest"
	"github.com/mercamap/relay/internal/api/contracttest"
	"github.com/mercamap/relay/internal/awstest"
	"github.com/mercamap/relay/internal/testpeer"
)

const (
	adminToken = "client-test-admin-token-0123456789"
	acctToken  = "client-test-acct1-token-0123456789"
	busRole    = "arn:aws:iam::111122223333:role/relay-delivery"
)

// relay is one `relay serve` for the client's tests, reached through a check of every
// request and answer against the API's document.
type relay struct {
	url  string // through the check
	addr string // the relay itself: host:port
	logs *lockedBuffer
}

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// startRelay builds and starts `relay serve` on real Redis and RabbitMQ, with the
// EventBridge and STS test servers; api and delivery are more keys of those maps.
func startRelay(t *testing.T, api, delivery string) *relay {
	t.Helper()
	check := contracttest.New(t)
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "relay-client-test")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "relay")
		if out, err := exec.Command("go", "build", "-o", binPath, "../cmd/relay").CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	amqpURL, redisURL := testpeer.SharedRabbitMQ(t), testpeer.RedisURL(t)
	sts, bus := awstest.NewSTS(t), awstest.NewEventBridge(t)
	bus.RequireSessionFrom(sts)
	addr := fmt.Sprintf("127.0.0.1:%d", testpeer.FreePort(t))
	suffix := fmt.Sprint(time.Now().UnixNano())
	cfg := filepath.Join(t.TempDir(), "relay.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`
identity:
  name: mercamap
  aws_principal_arn: arn:aws:iam::999999999999:role/relay
  gcp_service_account: relay@relay-test.iam.gserviceaccount.com
  external_id_secret: external-id-secret-for-the-test-0123456789
rabbitmq: {url: %s, exchange: relay-client-test-%s, queue: relay-client-test-%s}
redis: {url: %s}
signature: {keys: [env:TEST_HMAC_KEY]}
api: {listen: "%s", tokens: [{scope: admin, token: env:TEST_ADMIN_TOKEN}, {scope: "account:acct_1", token: env:TEST_ACCT_TOKEN}]%s}
aws:
  region: us-east-1
  endpoints: {sts: %s, events: %s}
delivery: {lease_ttl: 1s%s}
accounts:
  - {id: acct_1, tenants: [single-tenant]}
destinations:
  - {id: orders-bus, account: acct_1, connector: eventbridge, bus_arn: "arn:aws:events:us-east-1:111122223333:event-bus/orders", role_arn: "%s"}
`, amqpURL, suffix, suffix, redisURL, addr, api, sts.URL, bus.URL, delivery, busRole)), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binPath, "serve", "--config", cfg)
	cmd.Env = append(os.Environ(), "TEST_HMAC_KEY=f4ab532dc6dcf763bf8139e75e9bef6d8af5c329ce3e03ba05fd39ff729f6ffa",
		"TEST_ADMIN_TOKEN="+adminToken, "TEST_ACCT_TOKEN="+acctToken,
		"AWS_ACCESS_KEY_ID=AKIDRELAYTEST", "AWS_SECRET_ACCESS_KEY=test", "AWS_EC2_METADATA_DISABLED=true")
	r := &relay{addr: addr, logs: &lockedBuffer{}}
	cmd.Stderr = r.logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("the relay's log:\n%s", r.logs)
		}
	})
	r.url = check.Proxy("http://" + addr)
	// A start on a machine busy with the rest of the suite (its RabbitMQ shared) may take
	// a while: what these tests check is the client, not how fast a relay starts.
	apitest.WaitFor(t, 2*time.Minute, "the relay ready", func() bool {
		resp, err := http.Get(r.url + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	// The customer trusts us with orders-bus's ExternalId, and a test runs its setup check
	// at once: it is active, and no check is left to add events to its channel.
	admin, ordersBus := client.New(r.url, adminToken, client.Options{}), client.Ref{Connector: client.Eventbridge, ID: "orders-bus"}
	card, err := admin.Destination(context.Background(), ordersBus)
	if err != nil || card.ExternalID == nil {
		t.Fatalf("orders-bus: %v, %+v", err, card)
	}
	sts.RequireExternalID(busRole, *card.ExternalID)
	if res, err := admin.Test(context.Background(), ordersBus); err != nil || res.Outcome != client.TestResultOutcomeDelivered {
		t.Fatalf("orders-bus's test: %v, %+v", err, res)
	}
	return r
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func ptr[T any](v T) *T { return &v }

// TestCreateWithAnIdempotencyKeyPagesAndAnErrorWithFields: a create answers the pending
// card with its setup; the same Idempotency-Key makes no second destination; the list
// pages come back as one sequence of every card, each once; a create with problems is an
// *Error naming each field.
func TestCreateWithAnIdempotencyKeyPagesAndAnErrorWithFields(t *testing.T) {
	r := startRelay(t, "", "")
	ctx := context.Background()
	acct := client.New(r.url, acctToken, client.Options{})
	body := client.DestinationCreate{BusArn: ptr("arn:aws:events:us-east-1:111122223333:event-bus/api-0"), RoleArn: ptr(busRole)}
	first, err := acct.CreateDestination(ctx, client.Eventbridge, body, "key-0")
	if err != nil {
		t.Fatal(err)
	}
	if first.Status != client.StatusPending || first.ExternalID == nil || first.Setup.TrustPolicy == nil || first.ManagedBy != client.API {
		t.Errorf("a new destination's card: %+v", first)
	}
	again, err := acct.CreateDestination(ctx, client.Eventbridge, body, "key-0")
	if err != nil || again.ID != first.ID {
		t.Errorf("the same Idempotency-Key again: %s, %v; want %s", again.ID, err, first.ID)
	}
	want := map[string]bool{"orders-bus": true, first.ID: true}
	for i := 1; i < 5; i++ {
		id := fmt.Sprintf("api-%d", i)
		if _, err := acct.CreateDestination(ctx, client.Eventbridge, client.DestinationCreate{ID: &id,
			BusArn: ptr("arn:aws:events:us-east-1:111122223333:event-bus/" + id), RoleArn: ptr(busRole)}, ""); err != nil {
			t.Fatal(err)
		}
		want[id] = true
	}
	seen := map[string]int{}
	for card, err := range acct.Destinations(ctx, client.Eventbridge, client.ListQuery{PageSize: 2}) {
		if err != nil {
			t.Fatal(err)
		}
		seen[card.ID]++
	}
	if len(seen) != len(want) {
		t.Errorf("pages of 2 gave %v, want each of %v once", seen, want)
	}
	for id, n := range seen {
		if !want[id] || n != 1 {
			t.Errorf("pages of 2 gave %s %d times", id, n)
		}
	}
	all, err := acct.AllDestinations(ctx)
	if err != nil || len(all) != len(want) {
		t.Errorf("AllDestinations: %d cards, %v; want %d", len(all), err, len(want))
	}

	_, err = acct.CreateDestination(ctx, client.Eventbridge, client.DestinationCreate{BusArn: ptr("nope")}, "")
	var e *client.Error
	if !errors.As(err, &e) || e.Status != 400 || e.Code != client.CodeInvalidArgument || len(e.Fields) < 2 {
		t.Fatalf("a create with problems: %v", err)
	}
	fields := map[string]bool{}
	for _, f := range e.Fields {
		fields[f.Field] = f.Message != ""
	}
	if !fields["bus_arn"] || !fields["role_arn"] {
		t.Errorf("the problems name %v; want bus_arn and role_arn, each with its message", fields)
	}
	if _, err := acct.Destination(ctx, client.Ref{Connector: client.Kinesis, ID: first.ID}); !client.IsCode(err, client.CodeNotFound) {
		t.Errorf("a card under another connector: %v, want NOT_FOUND", err)
	}
}

// TestA429WithRetryAfterIsWaitedOutAndSentAgain: an account token's second pause within
// the destination's action rate is answered 429 with Retry-After; the client waits it
// out and the pause goes through. With retries off, the *Error says how long to wait.
func TestA429WithRetryAfterIsWaitedOutAndSentAgain(t *testing.T) {
	r := startRelay(t, ", actions_per_destination: {count: 1, per: 2s}, actions_per_account: {count: 50, per: 2s}", "")
	ctx := context.Background()
	bus := client.Ref{Connector: client.Eventbridge, ID: "orders-bus"}
	patient := client.New(r.url, acctToken, client.Options{})
	if _, err := patient.Pause(ctx, bus); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	card, err := patient.Pause(ctx, bus)
	if err != nil || card.Status != client.StatusPaused {
		t.Fatalf("the second pause: %v, %+v", err, card.Status)
	}
	if took := time.Since(start); took < 500*time.Millisecond {
		t.Errorf("the second pause took %s: it was not held back", took)
	}
	impatient := client.New(r.url, acctToken, client.Options{RetryLimit: -1})
	_, err = impatient.Activate(ctx, bus, "")
	var e *client.Error
	if !errors.As(err, &e) || e.Status != http.StatusTooManyRequests || e.Code != client.CodeResourceExhausted || e.RetryAfter <= 0 {
		t.Fatalf("an action past the rate without retries: %v", err)
	}
}

// TestFollowReplaysAcrossA410WithANewSnapshot: a follower cut off while the channel moves
// on past its retention (2 s) comes back, finds its cursor expired (410), loads a new
// snapshot and ends with the relay's own state, each event after it applied once.
func TestFollowReplaysAcrossA410WithANewSnapshot(t *testing.T) {
	r := startRelay(t, "", ", channel_retention: 2s")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin := client.New(r.url, adminToken, client.Options{})
	bus := client.Ref{Connector: client.Eventbridge, ID: "orders-bus"}
	cut := apitest.NewProxy(t, r.addr)
	follower := client.New(cut.URL, adminToken, client.Options{})
	logs := &lockedBuffer{}
	updates := make(chan client.Update, 100)
	go func() {
		defer close(updates)
		for u, err := range follower.Follow(ctx, "destination:orders-bus", client.FollowOptions{
			Logger: slog.New(slog.NewTextHandler(logs, nil))}) {
			if err != nil {
				t.Errorf("follow: %v", err)
				return
			}
			updates <- u
		}
	}()
	next := func(what string) client.Update {
		t.Helper()
		select {
		case u, ok := <-updates:
			if !ok {
				t.Fatalf("the follower stopped before %s", what)
			}
			return u
		case <-ctx.Done():
			t.Fatalf("no %s: %s", what, logs.String())
		}
		return client.Update{}
	}
	if u := next("the first snapshot"); !u.Snapshot || u.Destinations["orders-bus"].ID != "orders-bus" {
		t.Fatalf("first update: %+v", u)
	}
	if _, err := admin.Pause(ctx, bus); err != nil {
		t.Fatal(err)
	}
	u := next("the pause")
	if u.Event == nil || u.Event.Type != client.DestinationPaused || u.Card.Status != client.StatusPaused {
		t.Fatalf("after the pause: %+v", u)
	}
	cursor := u.Sequence

	cut.SetDown(true)
	if _, err := admin.Activate(ctx, bus, ""); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2500 * time.Millisecond) // past the channel's retention
	// A channel is trimmed at every 32nd event: go past the next one, so what the
	// follower missed is gone.
	var last client.ChangedCard
	for last.Sequence == 0 || last.Sequence%32 != 1 {
		var err error
		if last, err = toggleOf(admin, last)(ctx, bus); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := follower.Events(ctx, "destination:orders-bus", 0, 0); err == nil {
		t.Fatal("the follower's relay answered while cut off")
	}
	if _, err := admin.Events(ctx, "destination:orders-bus", cursor, 0); !client.IsCode(err, client.CodeCursorExpired) {
		t.Fatalf("events after the follower's cursor: %v, want CURSOR_EXPIRED", err)
	}
	cut.SetDown(false)

	for {
		u := next("a new snapshot")
		if u.Snapshot {
			if got := u.Destinations["orders-bus"]; u.Sequence != last.Sequence || got.Status != last.Status {
				t.Errorf("the new snapshot: sequence %d status %s; want %d %s", u.Sequence, got.Status, last.Sequence, last.Status)
			}
			break
		}
		if u.Event != nil && u.Event.Sequence > last.Sequence {
			t.Fatalf("event %d past the last one %d", u.Event.Sequence, last.Sequence)
		}
	}
	if !strings.Contains(logs.String(), "cursor older than retention") {
		t.Errorf("the follower loaded its snapshot without a 410:\n%s", logs.String())
	}
	after, err := toggleOf(admin, last)(ctx, bus)
	if err != nil {
		t.Fatal(err)
	}
	if u := next("the change after"); u.Event == nil || u.Event.Sequence != last.Sequence+1 || u.Card.Status != after.Status {
		t.Errorf("after the new snapshot: %+v", u)
	}
}

// toggleOf is the action that changes a destination's status from card's: activate a
// paused one, pause an active one (each a channel event).
func toggleOf(c *client.Client, card client.ChangedCard) func(context.Context, client.Ref) (client.ChangedCard, error) {
	if card.Status == client.StatusPaused {
		return func(ctx context.Context, r client.Ref) (client.ChangedCard, error) { return c.Activate(ctx, r, "") }
	}
	return c.Pause
}
