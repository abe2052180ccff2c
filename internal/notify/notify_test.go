package notify

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/mercamap/relay/internal/store"
	"github.com/mercamap/relay/internal/store/storetest"
	"github.com/mercamap/relay/internal/testpeer"
	"github.com/mercamap/relay/internal/waittest"
)

const acct = "acct_1"

// mailer is the platform's mailer as the operator guide sets it up: a durable queue bound
// to the operator-events exchange with destination.#.
type mailer struct {
	t     *testing.T
	url   string
	queue string
}

func newMailer(t *testing.T, url, exchange string) *mailer {
	t.Helper()
	m := &mailer{t: t, url: url, queue: exchange + ".mailer"}
	m.do(func(ch *amqp.Channel) error {
		if err := ch.ExchangeDeclare(exchange, amqp.ExchangeTopic, true, false, false, false, nil); err != nil {
			return err
		}
		if _, err := ch.QueueDeclare(m.queue, true, false, false, false, nil); err != nil {
			return err
		}
		return ch.QueueBind(m.queue, "destination.#", exchange, false, nil)
	})
	return m
}

// do runs f on a fresh channel: the broker may have been restarted since the last call.
func (m *mailer) do(f func(*amqp.Channel) error) {
	m.t.Helper()
	conn, err := amqp.Dial(m.url)
	if err != nil {
		m.t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		m.t.Fatal(err)
	}
	if err := f(ch); err != nil {
		m.t.Fatal(err)
	}
}

// take returns the messages in the mailer's queue now, acking them.
func (m *mailer) take() []amqp.Delivery {
	m.t.Helper()
	var out []amqp.Delivery
	m.do(func(ch *amqp.Channel) error {
		for {
			d, ok, err := ch.Get(m.queue, true)
			if err != nil || !ok {
				return err
			}
			out = append(out, d)
		}
	})
	return out
}

// startDrainer runs a drainer for acct until the test ends.
func startDrainer(t *testing.T, opts Options) *Drainer {
	t.Helper()
	d := New(opts)
	d.SetAccounts([]string{acct})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = d.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return d
}

// disable makes destination id exist and disables it, which writes destination.disabled
// to the account's outbox in the same script.
func disable(t *testing.T, st *store.Store, id string) {
	t.Helper()
	ctx := context.Background()
	ref := store.Ref{Account: acct, ID: id, Connector: "eventbridge"}
	if _, err := st.Ensure(ctx, ref, "relay-ext-"+id, "fp", time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := st.SetStatus(ctx, ref, store.Disabled, "customer asked", time.Hour); err != nil {
		t.Fatal(err)
	}
}

func outboxLen(t *testing.T, st *store.Store) int64 {
	t.Helper()
	n, err := st.OutboxLens(context.Background(), []string{acct})
	if err != nil {
		t.Fatal(err)
	}
	return n[0]
}

// drainOnce waits until the outbox is empty, then takes what reached the mailer, and
// once more after a short drain window: a second copy would show there.
func drainOnce(t *testing.T, st *store.Store, m *mailer, want int) []amqp.Delivery {
	t.Helper()
	var got []amqp.Delivery
	waittest.For(t, 60*time.Second, fmt.Sprintf("%d operator events at the mailer", want), func() bool {
		got = append(got, m.take()...)
		return len(got) >= want
	})
	waittest.For(t, 10*time.Second, "the outbox empty", func() bool { return outboxLen(t, st) == 0 })
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		got = append(got, m.take()...)
		time.Sleep(50 * time.Millisecond)
	}
	return got
}

func TestDisableWhileTheBrokerIsDownReachesTheMailerOnceItIsBack(t *testing.T) {
	broker := testpeer.StartRabbitMQ(t)
	st, err := store.Open(testpeer.RedisURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	exchange := "relay.operator.events"
	m := newMailer(t, broker.URL(), exchange)
	metrics := NewMetrics(nil)
	d := startDrainer(t, Options{URLs: []string{broker.URL()}, Exchange: exchange, Store: st, Consumer: "replica-a",
		Metrics: metrics, Sweep: 100 * time.Millisecond, MaxBackoff: 500 * time.Millisecond})

	broker.Stop(t)
	disable(t, st, "orders-bus")
	d.Nudge()
	waittest.For(t, 20*time.Second, "a publish that failed", func() bool { return testutil.ToFloat64(metrics.Failed) >= 1 })
	if n := outboxLen(t, st); n != 1 {
		t.Fatalf("%d entries in the outbox while the broker is down, want 1", n)
	}
	waittest.For(t, 5*time.Second, "the pending gauge", func() bool { return testutil.ToFloat64(metrics.Pending) == 1 })

	broker.Start(t)
	got := drainOnce(t, st, m, 1)
	if len(got) != 1 {
		t.Fatalf("%d copies of the operator event at the mailer, want 1", len(got))
	}
	msg := got[0]
	var ev store.OperatorEvent
	if err := json.Unmarshal(msg.Body, &ev); err != nil {
		t.Fatalf("body %s: %v", msg.Body, err)
	}
	if ev.ID == "" || msg.MessageId != ev.ID || msg.RoutingKey != "destination.disabled" || msg.DeliveryMode != amqp.Persistent ||
		ev.Type != "destination.disabled" || ev.Destination != "orders-bus" || ev.Account != acct ||
		ev.Connector != "eventbridge" || ev.Reason != "customer asked" || ev.At.IsZero() {
		t.Fatalf("got message-id %q via %q (mode %d), body %s", msg.MessageId, msg.RoutingKey, msg.DeliveryMode, msg.Body)
	}
	if p := testutil.ToFloat64(metrics.Published); p != 1 {
		t.Errorf("published counter %v, want 1", p)
	}
	waittest.For(t, 5*time.Second, "the pending gauge back to 0", func() bool { return testutil.ToFloat64(metrics.Pending) == 0 })
}

func TestTwoReplicasPublishEachOperatorEventOnce(t *testing.T) {
	url := testpeer.SharedRabbitMQ(t)
	st, err := store.Open(testpeer.RedisURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	exchange := fmt.Sprintf("relay-test-operator-%d", time.Now().UnixNano())
	m := newMailer(t, url, exchange)
	var drainers []*Drainer
	for _, name := range []string{"replica-a", "replica-b"} {
		drainers = append(drainers, startDrainer(t, Options{URLs: []string{url}, Exchange: exchange, Store: st, Consumer: name,
			Sweep: 5 * time.Millisecond}))
	}
	const n = 40
	for i := range n {
		disable(t, st, fmt.Sprintf("dest-%02d", i))
		drainers[i%2].Nudge()
	}
	got := drainOnce(t, st, m, n)
	seen := map[string]bool{}
	for _, msg := range got {
		if seen[msg.MessageId] {
			t.Errorf("operator event %s published twice", msg.MessageId)
		}
		seen[msg.MessageId] = true
	}
	if len(seen) != n {
		t.Fatalf("%d distinct operator events at the mailer, want %d", len(seen), n)
	}
}

func TestAnEventLeftByADeadReplicaIsPublishedByAnother(t *testing.T) {
	url := testpeer.SharedRabbitMQ(t)
	st, err := store.Open(testpeer.RedisURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	exchange := fmt.Sprintf("relay-test-operator-%d", time.Now().UnixNano())
	m := newMailer(t, url, exchange)
	disable(t, st, "orders-bus")
	// A replica took the event and died before the broker confirmed it.
	held, err := st.TakeOutbox(context.Background(), acct, "dead-replica", time.Minute, 10)
	if err != nil || len(held) != 1 {
		t.Fatalf("take: %v, %v", held, err)
	}
	startDrainer(t, Options{URLs: []string{url}, Exchange: exchange, Store: st, Consumer: "replica-b",
		Sweep: 20 * time.Millisecond, Stale: 200 * time.Millisecond})
	got := drainOnce(t, st, m, 1)
	if len(got) != 1 || got[0].MessageId != held[0].ID {
		t.Fatalf("mailer got %d messages, want the dead replica's one (%s)", len(got), held[0].ID)
	}
	consumers, err := st.Client().XInfoConsumers(context.Background(), storetest.OutboxKey("acct_1"), "relay").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range consumers {
		if c.Name == "dead-replica" {
			t.Errorf("the dead replica's consumer is still in the outbox's group: %+v", c)
		}
	}
}

func TestOperatorEventIsPublishedThroughTheNextNodeWhenTheFirstIsDown(t *testing.T) {
	url := testpeer.SharedRabbitMQ(t)
	st, err := store.Open(testpeer.RedisURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	exchange := fmt.Sprintf("relay-test-operator-%d", time.Now().UnixNano())
	m := newMailer(t, url, exchange)
	// The first node listed is down (nothing listens on its port); the second is up.
	down := fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", testpeer.FreePort(t))
	metrics := NewMetrics(nil)
	startDrainer(t, Options{URLs: []string{down, url}, Exchange: exchange, Store: st, Consumer: "replica-a",
		Metrics: metrics, Sweep: 20 * time.Millisecond})
	disable(t, st, "orders-bus")
	got := drainOnce(t, st, m, 1)
	if len(got) != 1 {
		t.Fatalf("%d copies of the operator event at the mailer, want 1", len(got))
	}
	if f := testutil.ToFloat64(metrics.Failed); f != 0 {
		t.Errorf("%v failed publishes: the drainer did not go on to the live node", f)
	}
}
