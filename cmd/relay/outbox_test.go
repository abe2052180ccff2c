package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/mercamap/relay/internal/awstest"
	"github.com/mercamap/relay/internal/jobevent"
	"github.com/mercamap/relay/internal/store"
	"github.com/mercamap/relay/internal/testpeer"
)

// TestDisableWhileTheBrokerIsDownReachesTheMailerOnceAfterARestart: 20 events are stored
// while STS does not answer (not taken: they wait). The broker stops; STS then denies the
// role, so the 20 events are rejected in a row and the destination is disabled while no
// broker is there. The relay keeps running, is restarted (still no broker), and once the
// broker is back, destination.disabled reaches the mailer's queue, exactly once.
func TestDisableWhileTheBrokerIsDownReachesTheMailerOnceAfterARestart(t *testing.T) {
	broker := testpeer.StartRabbitMQ(t)
	amqpURL, redisURL := broker.URL(), testpeer.RedisURL(t)
	bus := awstest.NewEventBridge(t)
	// STS in front of awstest's: "hold" answers 503 (not taken); then the role, which
	// trusts nobody, is denied (rejected).
	var deny atomic.Bool
	realSTS := awstest.NewSTSHandler()
	sts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if deny.Load() {
			realSTS.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/xml")
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprint(w, `<ErrorResponse><Error><Type>Receiver</Type><Code>ServiceUnavailable</Code>`+
			`<Message>Service unavailable</Message></Error><RequestId>hold</RequestId></ErrorResponse>`)
	}))
	t.Cleanup(sts.Close)

	bin := buildRelay(t)
	const exchange, queue, operatorExchange = "fetcher.job.events", "relay.job-events", "relay.operator.events"
	listen := fmt.Sprintf("127.0.0.1:%d", testpeer.FreePort(t))
	metricsListen := fmt.Sprintf("127.0.0.1:%d", testpeer.FreePort(t))
	cfg := filepath.Join(t.TempDir(), "relay.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`
identity: {name: mercamap, aws_principal_arn: "arn:aws:iam::999999999999:role/relay", external_id_secret: external-id-secret-for-the-test-0123456789}
rabbitmq: {url: %s, exchange: %s, queue: %s}
redis: {url: %s}
signature: {keys: [env:TEST_HMAC_KEY]}
api: {listen: %s, metrics_listen: %s}
aws:
  region: us-east-1
  endpoints: {sts: %s, events: %s}
  # 20 refused sessions in a row, quickly: the default budget and backoff (the defence
  # against one role spending our STS rate) would make them take minutes.
  sts_budget: {per_destination: {count: 1000, per: 1m}, per_account: {count: 5000, per: 1m}}
  session_backoff: {initial: 1ms, max: 10ms}
delivery:
  not_taken_backoff: {initial: 10ms, max: 100ms}
  setup_check: {initial: 20ms, max: 200ms}  # a pending destination is checked again soon
  operator_events_exchange: %s
  warn_after: []  # this test follows the disable's event alone
accounts:
  - {id: acct_1, tenants: [single-tenant]}
destinations:
  - id: orders-bus
    account: acct_1
    connector: eventbridge
    bus_arn: arn:aws:events:us-east-1:111122223333:event-bus/orders
    role_arn: arn:aws:iam::111122223333:role/relay-delivery
`, amqpURL, exchange, queue, redisURL, listen, metricsListen, sts.URL, bus.URL, operatorExchange)), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"AWS_ACCESS_KEY_ID=AKIDRELAYTEST", "AWS_SECRET_ACCESS_KEY=test", "AWS_EC2_METADATA_DISABLED=true"}

	// The platform's mailer, set up as the operator guide says.
	mailerQueue := "platform.relay-events"
	withChannel(t, amqpURL, func(ch *amqp.Channel) error {
		if err := ch.ExchangeDeclare(operatorExchange, amqp.ExchangeTopic, true, false, false, false, nil); err != nil {
			return err
		}
		if _, err := ch.QueueDeclare(mailerQueue, true, false, false, false, amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum}); err != nil {
			return err
		}
		return ch.QueueBind(mailerQueue, "destination.#", operatorExchange, false, nil)
	})

	a, logsA, exitedA := startWatchedRelay(t, bin, cfg, env...)
	st, err := store.Open(redisURL)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	ref := store.Ref{Account: "acct_1", ID: "orders-bus"}
	// New, so pending while STS does not answer: an operator activates it by hand (what
	// POST …/activate does), so its rejections count and can disable it.
	waitUntil(t, 30*time.Second, "the destination stored, pending", func() bool {
		s, err := st.LoadState(ctx, ref)
		return err == nil && s.Status == store.Pending
	})
	if _, err := st.ChangeStatus(ctx, store.StatusChange{Ref: ref, Status: store.Active, Operator: true}); err != nil {
		t.Fatal(err)
	}
	conn, ch := brokerChannel(t, amqpURL, queue)
	waitConsumers(t, conn, queue, 1)
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	key, _ := hex.DecodeString(testKeyHex)
	for i := range 20 {
		job := jobevent.Job{ID: fmt.Sprintf("0190f2a4-6666-7000-8000-%012d", i), Status: "completed"}
		dc, err := ch.PublishWithDeferredConfirm(exchange, job.RoutingKey(), false, false, jobevent.Build(job, exchange, key, time.Now()))
		if err != nil || !dc.Wait() {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	waitUntil(t, 30*time.Second, "20 events stored, the first one not taken", func() bool {
		log, err := st.ReadLog(ctx, "acct_1", "0", 100)
		s, _ := st.LoadState(ctx, ref)
		return err == nil && len(log) == 20 && s.LastFailure != nil && s.LastFailure.Class == "not_taken"
	})
	conn.Close()

	broker.Stop(t)
	deny.Store(true)
	waitUntil(t, 60*time.Second, "the destination disabled by 20 rejections", func() bool {
		s, err := st.LoadState(ctx, ref)
		return err == nil && s.Status == store.Disabled && s.ConsecutiveFailures == 20
	})
	assertServing(t, listen, exitedA, logsA)

	// Restart, the broker still down: the new process comes up and serves all the same.
	if err := a.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exitedA:
	case <-time.After(30 * time.Second):
		t.Fatalf("relay A did not stop; logs:\n%s", logsA)
	}
	_, logsB, exitedB := startWatchedRelay(t, bin, cfg, env...)
	waitUntil(t, 30*time.Second, "relay B's API", func() bool { return get(listen, "/healthz") == http.StatusOK })
	waitUntil(t, 30*time.Second, "relay B reporting the waiting operator event", func() bool {
		return strings.Contains(metrics(metricsListen), "relay_operator_events_pending 1")
	})
	assertServing(t, listen, exitedB, logsB)

	broker.Start(t)
	var got []amqp.Delivery
	take := func() {
		withChannel(t, amqpURL, func(ch *amqp.Channel) error {
			for {
				d, ok, err := ch.Get(mailerQueue, true)
				if err != nil || !ok {
					return err
				}
				got = append(got, d)
			}
		})
	}
	waitUntil(t, 90*time.Second, "destination.disabled at the mailer", func() bool { take(); return len(got) > 0 })
	waitUntil(t, 10*time.Second, "the outbox empty", func() bool {
		left, err := st.Outbox(ctx, "acct_1")
		return err == nil && len(left) == 0
	})
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		take() // a short drain: a second copy would arrive here
	}
	if len(got) != 1 {
		t.Fatalf("%d copies of the operator event at the mailer, want 1\nlogs B:\n%s", len(got), logsB)
	}
	var ev store.OperatorEvent
	if err := json.Unmarshal(got[0].Body, &ev); err != nil {
		t.Fatalf("body %s: %v", got[0].Body, err)
	}
	if ev.ID == "" || got[0].MessageId != ev.ID || got[0].RoutingKey != "destination.disabled" ||
		ev.Destination != "orders-bus" || ev.Account != "acct_1" || ev.Connector != "eventbridge" ||
		!strings.Contains(ev.Reason, "20 rejected attempts") || ev.LastFailure == nil || ev.LastFailure.Class != "rejected" {
		t.Fatalf("message-id %q via %q, body %s", got[0].MessageId, got[0].RoutingKey, got[0].Body)
	}
}

// startWatchedRelay starts relay serve; the channel is closed when the process exits.
func startWatchedRelay(t *testing.T, bin, cfg string, extraEnv ...string) (*exec.Cmd, *syncBuffer, <-chan struct{}) {
	t.Helper()
	cmd, logs := startRelay(t, bin, cfg, extraEnv...)
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	return cmd, logs, exited
}

// assertServing fails the test when the relay exited or its API does not answer.
func assertServing(t *testing.T, listen string, exited <-chan struct{}, logs fmt.Stringer) {
	t.Helper()
	select {
	case <-exited:
		t.Fatalf("the relay exited while the broker was down; logs:\n%s", logs)
	default:
	}
	if code := get(listen, "/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz answered %d while the broker was down; logs:\n%s", code, logs)
	}
}

func get(listen, path string) int {
	resp, err := http.Get("http://" + listen + path)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

func metrics(metricsListen string) string {
	resp, err := http.Get("http://" + metricsListen + "/metrics")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// withChannel runs f on a fresh connection and channel to the broker.
func withChannel(t *testing.T, url string, f func(*amqp.Channel) error) {
	t.Helper()
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := f(ch); err != nil {
		t.Fatal(err)
	}
}
